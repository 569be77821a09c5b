//! The manifest's compact form: what load reads, made from the reviewed manifest and bound
//! to its exact bytes, in `<state_dir>/manifests` ([`COMPACT_FOLDER`]).
//!
//! # Why
//! The reviewed manifest is pretty-printed for `git diff` (about 2.2 times the bytes of the
//! listing it pins), and reading it re-verifies every stored description and input schema
//! against its hash: the input schema written again in canonical form and hashed, per tool
//! (a file anyone with write access could have edited). At 10,000 tools that was about a
//! fifth of a start's load (BENCHMARKS.md §3). The compact form holds the same manifest
//! written in canonical form (no indentation) and is read without re-verifying the hashes,
//! because it was made from a manifest whose hashes were verified.
//!
//! # Why it cannot widen what was reviewed
//! - **Bound to the manifest's bytes.** An entry is named after the SHA-256 of the whole
//!   reviewed manifest file (`<sha256>.json`), and its MAC covers that digest. A start
//!   hashes the manifest it just read and looks up only that name: an edited manifest
//!   (another digest) never finds an old entry, so it is read and verified in full and a new
//!   entry replaces the old ones. Editing the pretty manifest therefore always takes effect.
//! - **Written only by toolward.** The entry's first line is an HMAC-SHA256 (64 hex digits,
//!   under the state folder's key [`COMPACT_KEY`]) over the digest and the rest of the file.
//!   An entry planted in the folder, or changed after it was written (another schema, a
//!   hash swapped), does not verify and is not used: the manifest is read in full, and the
//!   log says why.
//! - **Nothing but a cache.** An entry missing, damaged or refused costs only the full read.
//!   The folder and each entry must be owned by the effective user with no access for group
//!   or others, like the compiled-component cache; otherwise the start is refused with the
//!   fix ([`StateDir`]).
//!
//! Whoever holds the state folder's key can write an entry, as they can write a compiled
//! component toolward would run: the key is as sensitive as the folder it lives in.

use std::io::Read;
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use super::{Hashes, MAX_MANIFEST_BYTES, Manifest, ManifestError};
use crate::canonical;
use crate::state_dir::{
    Key, MAC_HEX_BYTES, StateDir, StateError, open_private_in, replace_private_in, split_mac,
};

/// The compact forms' folder in the state folder: `manifests`.
pub const COMPACT_FOLDER: &str = "manifests";
/// The key the entries' MACs are made with, a file in the state folder: `manifests.key`.
pub const COMPACT_KEY: &str = "manifests.key";
/// Extension of an entry: the manifest's SHA-256 in hex, then this.
const ENTRY_SUFFIX: &str = ".json";
/// What the MAC covers first, so an entry's MAC can never be mistaken for another MAC made
/// with a key of the same folder.
const MAC_CONTEXT: &[u8] = b"toolward compact manifest 1";

/// The compact forms' folder, open.
struct Folder {
    dir: Dir,
    path: PathBuf,
    key: Key,
}

/// Reads the manifest whose file holds `bytes`, through its compact form in `state` (see
/// the module documentation): the entry made from exactly these bytes when there is one and
/// its MAC verifies; otherwise `bytes` are read and verified in full
/// ([`Manifest::parse`]) and the entry is written (a failure to write it is logged, not an
/// error: the next start reads in full again).
///
/// # Errors
/// Those of [`Manifest::parse`] for the reviewed bytes, and [`ManifestError::State`] when
/// the folder, its key or the entry cannot be trusted (another owner, access for group or
/// others, a symlink).
pub fn read(bytes: &[u8], state: &StateDir) -> Result<Manifest, ManifestError> {
    let digest = canonical::sha256_hex(bytes);
    let folder = Folder::open(state)?;
    let name = format!("{digest}{ENTRY_SUFFIX}");
    match folder.lookup(&name, &digest)? {
        Lookup::Hit(manifest) => return Ok(manifest),
        Lookup::Missing => {}
        Lookup::Rejected(why) => tracing::warn!(
            "the compact form `{}` of the manifest is not used ({why}); reading the manifest in full",
            folder.path.join(&name).display()
        ),
    }
    let manifest = Manifest::parse(bytes)?;
    if let Err(e) = folder.store(&name, &digest, &manifest) {
        tracing::warn!("could not write the manifest's compact form: {e}");
    }
    Ok(manifest)
}

/// What the folder held for a manifest.
enum Lookup {
    /// A verified entry, read.
    Hit(Manifest),
    /// No entry.
    Missing,
    /// An entry that is not used, and why.
    Rejected(String),
}

impl Folder {
    fn open(state: &StateDir) -> Result<Folder, StateError> {
        Ok(Folder {
            dir: state.subdir(COMPACT_FOLDER)?,
            path: state.path().join(COMPACT_FOLDER),
            key: state.key(COMPACT_KEY)?,
        })
    }

    fn lookup(&self, name: &str, digest: &str) -> Result<Lookup, StateError> {
        let full = self.path.join(name);
        let file = match open_private_in(&self.dir, Path::new(name), &full) {
            Ok(file) => file,
            Err(e) if e.not_found() => return Ok(Lookup::Missing),
            Err(e) => return Err(e),
        };
        let limit = MAX_MANIFEST_BYTES.saturating_add(MAC_HEX_BYTES as u64 + 1);
        let mut text = Vec::new();
        file.take(limit.saturating_add(1))
            .read_to_end(&mut text)
            .map_err(|source| StateError::Io {
                path: full.clone(),
                source,
            })?;
        if u64::try_from(text.len()).unwrap_or(u64::MAX) > limit {
            return Ok(Lookup::Rejected(format!("it is longer than {limit} bytes")));
        }
        let Some((mac, body)) = split_mac(&text) else {
            return Ok(Lookup::Rejected(String::from(
                "it does not start with a MAC line",
            )));
        };
        if !self
            .key
            .verify_hex(&[MAC_CONTEXT, digest.as_bytes(), body], mac)
        {
            return Ok(Lookup::Rejected(String::from(
                "its MAC does not verify under the state folder's key",
            )));
        }
        match Manifest::parse_as(body, Hashes::Trust) {
            Ok(manifest) => Ok(Lookup::Hit(manifest)),
            Err(e) => Ok(Lookup::Rejected(format!("it cannot be read: {e}"))),
        }
    }

    /// Writes the entry `name` for the manifest of SHA-256 `digest`, and removes every other
    /// entry (made from manifests that are no longer the file's).
    fn store(&self, name: &str, digest: &str, manifest: &Manifest) -> Result<(), StateError> {
        let body = manifest.to_compact();
        let mac = self
            .key
            .mac_hex(&[MAC_CONTEXT, digest.as_bytes(), body.as_bytes()]);
        let mut text = String::with_capacity(MAC_HEX_BYTES + 1 + body.len());
        text.push_str(&mac);
        text.push('\n');
        text.push_str(&body);
        replace_private_in(&self.dir, name, text.as_bytes(), &self.path.join(name))?;
        let entries = self.dir.entries().map_err(|source| StateError::Io {
            path: self.path.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let other = entry.file_name();
            let other = other.to_string_lossy();
            if other != name && other.ends_with(ENTRY_SUFFIX) {
                // Best effort: a stale entry is never read (its name is another digest).
                let _ = self.dir.remove_file(other.as_ref());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
