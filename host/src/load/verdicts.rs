//! Which schemas this build's validator compiles, remembered in the state folder
//! ([`VERDICTS_FILE`]), so that a load compiles only the schemas it has not seen.
//!
//! # Why
//! Load refuses a tool whose schema the `jsonschema` crate cannot compile into a validator
//! ([`check_validator`]); the validator is then dropped (a call builds its own when first
//! used). At 10,000 tools that compile was a third of every start's load (BENCHMARKS.md §15,
//! §16), repeated for the same schemas at every start.
//!
//! # What is remembered, and why it cannot let a schema through
//! - **Only that a schema compiled.** An entry is the schema's dialect and the SHA-256 of its
//!   canonical text, as the listing computed it from the text the server sent this time. A
//!   schema the validator refuses is never remembered: it is compiled again at every load,
//!   so it is refused with the same message, in the same order, as without this file.
//! - **Bound to this build.** The file names the build that wrote it ([`build`]): toolward's
//!   version, the source of [`check_validator`], and the compiler's identity of the
//!   `jsonschema` crate and of this one (which changes with either crate's version, source or
//!   features, their dependencies', and the compiler). A file of another build is not read:
//!   a new `jsonschema` may refuse what an old one compiled.
//! - **Written only by toolward.** The file's first line is an HMAC-SHA256 (64 hex digits,
//!   under the state folder's key [`VERDICTS_KEY`]) over the rest of it. A file planted in
//!   the state folder, or changed after it was written (an entry added or swapped), does not
//!   verify and is not used: every schema is compiled, and the log says why.
//! - **Nothing but a cache.** A file missing, damaged, foreign or refused costs only the
//!   compiles; so does a state folder that cannot be read (logged, not an error). Without a
//!   state folder (a memory store), every schema is compiled, as before this file existed.
//!
//! The file holds the schemas checked at the last load that compiled something or left an
//! entry unused (its working set); a load that finds every entry it needs writes nothing.
//! Whoever holds the state folder's key can write an entry, as they can write a compiled
//! component toolward would run: the key is as sensitive as the folder it lives in.

use std::any::TypeId;
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cap_std::fs::Dir;

use crate::schema::Dialect;
use crate::schema::validator::{ValidatorProblem, check_validator};
use crate::canonical::{self, Value};
use crate::state_dir::{
    Key, MAC_HEX_BYTES, StateDir, StateError, open_private_in, replace_private_in, split_mac,
};

/// The file in the state folder: `schema-verdicts`.
pub const VERDICTS_FILE: &str = "schema-verdicts";
/// The key the file's MAC is made with, a file in the state folder: `schema-verdicts.key`.
pub const VERDICTS_KEY: &str = "schema-verdicts.key";
/// Most entries read or written: 1,000,000 (about 75 MB of file). A load that checks more
/// schemas than this remembers none of them; a longer file is not read.
pub const MAX_VERDICTS: usize = 1_000_000;
/// What the MAC covers first, so this file's MAC can never be mistaken for another MAC made
/// with a key of the same folder.
const MAC_CONTEXT: &[u8] = b"toolward schema verdicts 1";
/// Longest entry line: the longest dialect tag, a space, 64 hex digits, a newline.
const ENTRY_LINE_BYTES: usize = 7 + 1 + 64 + 1;
/// The line that names the build, before its 64 hex digits.
const BUILD_PREFIX: &str = "build ";

/// One remembered verdict: a schema of this dialect whose canonical text has this SHA-256
/// compiles into a validator.
type Entry = (Dialect, [u8; 32]);

/// The verdicts a load reads and adds to (see the module documentation).
#[derive(Debug, Default)]
pub struct Verdicts {
    /// Where they are kept; `None` without a state folder, or when it cannot be used.
    kept: Option<Kept>,
    /// Read from the file, verified.
    known: HashSet<Entry>,
    /// Schemas this load found to compile, or found in `known`.
    seen: HashSet<Entry>,
    /// Schemas compiled by this value.
    compiled: usize,
}

/// The file, the state folder and the key.
#[derive(Debug)]
struct Kept {
    dir: Dir,
    path: PathBuf,
    key: Key,
}

impl Verdicts {
    /// Verdicts kept nowhere: every schema is compiled (the same schema once per value).
    pub fn memory() -> Verdicts {
        Verdicts::default()
    }

    /// The verdicts of the state folder `state`, read from [`VERDICTS_FILE`] when it was
    /// written by this build and its MAC verifies. Never an error: a folder, key or file that
    /// cannot be used is logged, and every schema is then compiled.
    pub fn open(state: &StateDir) -> Verdicts {
        let kept = match Kept::open(state) {
            Ok(kept) => kept,
            Err(e) => {
                tracing::warn!("schema verdicts are not kept ({e}); every schema is compiled");
                return Verdicts::memory();
            }
        };
        let known = match kept.read() {
            Ok(Held::Verified(known)) => known,
            Ok(Held::Missing) => HashSet::new(),
            Ok(Held::OtherBuild) => {
                tracing::info!(
                    "`{}` was written by another build of toolward; every schema is compiled again",
                    kept.path.display()
                );
                HashSet::new()
            }
            Ok(Held::Rejected(why)) => {
                tracing::warn!(
                    "`{}` is not used ({why}); every schema is compiled again",
                    kept.path.display()
                );
                HashSet::new()
            }
            Err(e) => {
                tracing::warn!("schema verdicts are not read ({e}); every schema is compiled");
                HashSet::new()
            }
        };
        Verdicts {
            kept: Some(kept),
            known,
            ..Verdicts::default()
        }
    }

    /// Checks that `schema`, of dialect `dialect`, compiles into a validator, as
    /// [`check_validator`] does; `sha256` is the SHA-256 of its canonical text, lowercase hex,
    /// as the listing computed it. A schema already known to compile is not compiled again.
    ///
    /// # Errors
    /// Those of [`check_validator`], always from compiling the schema now.
    pub fn check(
        &mut self,
        schema: &Value,
        sha256: &str,
        dialect: Dialect,
    ) -> Result<(), ValidatorProblem> {
        let entry = digest(sha256).map(|digest| (dialect, digest));
        if let Some(entry) = entry
            && (self.seen.contains(&entry) || self.known.contains(&entry))
        {
            self.seen.insert(entry);
            return Ok(());
        }
        self.compiled += 1;
        check_validator(schema, dialect)?;
        if let Some(entry) = entry {
            self.seen.insert(entry);
        }
        Ok(())
    }

    /// How many schemas this value compiled.
    pub fn compiled(&self) -> usize {
        self.compiled
    }

    /// Writes what this load checked to the state folder, when that differs from what it
    /// read; a failure to write is logged (the next load compiles again).
    pub fn save(&self) {
        let Some(kept) = &self.kept else {
            return;
        };
        if self.seen == self.known || self.seen.len() > MAX_VERDICTS {
            return;
        }
        if let Err(e) = kept.write(&self.seen) {
            tracing::warn!("could not write the schema verdicts: {e}");
        }
    }
}

/// What the file held.
enum Held {
    /// Verified entries.
    Verified(HashSet<Entry>),
    /// No file.
    Missing,
    /// A file of another build, verified.
    OtherBuild,
    /// A file that is not used, and why.
    Rejected(String),
}

impl Kept {
    fn open(state: &StateDir) -> Result<Kept, StateError> {
        let path = state.path().join(VERDICTS_FILE);
        let dir = state.dir().try_clone().map_err(|source| StateError::Io {
            path: state.path().to_owned(),
            source,
        })?;
        Ok(Kept {
            dir,
            path,
            key: state.key(VERDICTS_KEY)?,
        })
    }

    fn read(&self) -> Result<Held, StateError> {
        let file = match open_private_in(&self.dir, Path::new(VERDICTS_FILE), &self.path) {
            Ok(file) => file,
            Err(e) if e.not_found() => return Ok(Held::Missing),
            Err(e) => return Err(e),
        };
        let limit = (MAC_HEX_BYTES + 1 + BUILD_PREFIX.len() + 64 + 1
            + MAX_VERDICTS * ENTRY_LINE_BYTES) as u64;
        let mut text = Vec::new();
        file.take(limit.saturating_add(1))
            .read_to_end(&mut text)
            .map_err(|source| StateError::Io {
                path: self.path.clone(),
                source,
            })?;
        if text.len() as u64 > limit {
            return Ok(Held::Rejected(format!("it is longer than {limit} bytes")));
        }
        let Some((mac, body)) = split_mac(&text) else {
            return Ok(Held::Rejected(String::from(
                "it does not start with a MAC line",
            )));
        };
        if !self.key.verify_hex(&[MAC_CONTEXT, body], mac) {
            return Ok(Held::Rejected(String::from(
                "its MAC does not verify under the state folder's key",
            )));
        }
        let Ok(body) = std::str::from_utf8(body) else {
            return Ok(Held::Rejected(String::from("it is not UTF-8")));
        };
        let mut lines = body.lines();
        if lines.next() != Some(build_line().as_str()) {
            return Ok(Held::OtherBuild);
        }
        let mut known = HashSet::new();
        for line in lines {
            let entry = line.split_once(' ').and_then(|(tag, sha256)| {
                Some((dialect_of_tag(tag)?, digest(sha256)?))
            });
            match entry {
                Some(entry) => {
                    known.insert(entry);
                }
                None => {
                    return Ok(Held::Rejected(String::from(
                        "an entry is not a dialect and a SHA-256",
                    )));
                }
            }
        }
        Ok(Held::Verified(known))
    }

    fn write(&self, entries: &HashSet<Entry>) -> Result<(), StateError> {
        let mut body = String::with_capacity(
            BUILD_PREFIX.len() + 65 + entries.len().saturating_mul(ENTRY_LINE_BYTES),
        );
        body.push_str(&build_line());
        body.push('\n');
        for (dialect, sha256) in entries {
            body.push_str(tag_of_dialect(*dialect));
            body.push(' ');
            body.push_str(&hex::encode(sha256));
            body.push('\n');
        }
        let mac = self.key.mac_hex(&[MAC_CONTEXT, body.as_bytes()]);
        let mut text = String::with_capacity(MAC_HEX_BYTES + 1 + body.len());
        text.push_str(&mac);
        text.push('\n');
        text.push_str(&body);
        replace_private_in(&self.dir, VERDICTS_FILE, text.as_bytes(), &self.path)
    }
}

/// The identity of this build, as 64 hex digits (see the module documentation): what a
/// verdict depends on. The type identities are the compiler's hashes of each crate's
/// identity (name, version, source, features, and its dependencies'), so they differ
/// between builds of different `jsonschema` crates even under the same toolward version.
/// Not covered: a `jsonschema` edited in place at the same path and version.
pub fn build() -> &'static str {
    static BUILD: OnceLock<String> = OnceLock::new();
    BUILD.get_or_init(|| {
        let parts = [
            env!("CARGO_PKG_VERSION").to_owned(),
            format!("{:?}", TypeId::of::<jsonschema::Validator>()),
            format!("{:?}", TypeId::of::<Verdicts>()),
            include_str!("../schema/validator.rs").to_owned(),
        ];
        let mut text = String::new();
        for part in parts {
            text.push_str(&part.len().to_string());
            text.push(':');
            text.push_str(&part);
        }
        canonical::sha256_hex(text.as_bytes())
    })
}

fn build_line() -> String {
    format!("{BUILD_PREFIX}{}", build())
}

fn tag_of_dialect(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Draft7 => "7",
        Dialect::Draft201909 => "2019-09",
        Dialect::Draft202012 => "2020-12",
    }
}

fn dialect_of_tag(tag: &str) -> Option<Dialect> {
    match tag {
        "7" => Some(Dialect::Draft7),
        "2019-09" => Some(Dialect::Draft201909),
        "2020-12" => Some(Dialect::Draft202012),
        _ => None,
    }
}

/// The 32 bytes of a SHA-256 written as 64 lowercase hex digits.
fn digest(sha256: &str) -> Option<[u8; 32]> {
    if sha256.len() != 64 || sha256.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(sha256, &mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests;
