//! The compiled-component cache: `<state_dir>/components` ([`CACHE_FOLDER`]).
//!
//! wasmtime runs a deserialized component's machine code as is, so an entry is code that
//! toolward will run. Each entry `<sha256>-<engine hash>.cwasm` has its MAC beside it
//! (`<entry>.mac`: HMAC-SHA256, 64 hex digits, under the state folder's key [`CACHE_KEY`],
//! over the entry's name and bytes). An entry is read whole (at most
//! [`MAX_COMPILED_BYTES`]), its MAC verified, and only those verified bytes are deserialized
//! ([`load_compiled`]), so a file planted in the folder, or changed after it was checked, is
//! never run: a missing or wrong MAC means the component is compiled again (and the log says
//! so). The folder and every entry must be owned by the effective user with no access for
//! group or others; otherwise the start is refused with the fix (checked through
//! [`StateDir`], with no symlink followed).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;
use wasmtime::Engine;
use wasmtime::component::Component;

use super::ComponentError;
use crate::state_dir::{Key, StateDir, StateError, open_private_in, replace_private_in};

/// The cache's folder in the state folder: `components`.
pub const CACHE_FOLDER: &str = "components";
/// The key the cache's MACs are made with, a file in the state folder: `components.key`.
pub const CACHE_KEY: &str = "components.key";
/// Longest compiled entry read from the cache, in bytes: 256 MiB. The default component
/// compiles to about 3 MiB; an entry past the limit is compiled again rather than read.
pub const MAX_COMPILED_BYTES: u64 = 256 * 1024 * 1024;
/// Length of a MAC file, bytes: 64 hex digits.
const MAC_HEX_BYTES: u64 = 64;
/// Extension of the MAC beside an entry.
const MAC_SUFFIX: &str = ".mac";

/// The compiled-component cache, open (see the module documentation).
pub struct ComponentCache {
    dir: Dir,
    path: PathBuf,
    key: Key,
}

impl fmt::Debug for ComponentCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComponentCache")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What the cache held for a name.
pub(super) enum Lookup {
    /// A verified entry, deserialized.
    Hit(Component),
    /// No entry.
    Missing,
    /// An entry that is not used, and why (no MAC, a wrong MAC, too long, not loadable).
    Rejected(String),
}

impl ComponentCache {
    /// Opens the cache of the state folder `state`: the folder [`CACHE_FOLDER`] (created
    /// `0700` when missing) and the key [`CACHE_KEY`] (created `0600`, 32 random bytes).
    ///
    /// # Errors
    /// [`ComponentError::State`] naming the path and the fix: the folder or the key has
    /// another owner than the effective user, gives group or others access, or is a symlink.
    pub fn open(state: &StateDir) -> Result<ComponentCache, ComponentError> {
        let dir = state.subdir(CACHE_FOLDER)?;
        let key = state.key(CACHE_KEY)?;
        Ok(ComponentCache {
            dir,
            path: state.path().join(CACHE_FOLDER),
            key,
        })
    }

    /// The folder's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The verified entry `name`, deserialized with `engine`.
    ///
    /// # Errors
    /// [`ComponentError::State`] when the entry or its MAC is a symlink, not a regular file,
    /// or has a wrong owner or mode: a refusal, not a miss, because someone else wrote there.
    pub(super) fn lookup(&self, engine: &Engine, name: &str) -> Result<Lookup, ComponentError> {
        let Some(bytes) = self.read(name, MAX_COMPILED_BYTES)? else {
            return Ok(Lookup::Missing);
        };
        let Some(bytes) = bytes else {
            return Ok(Lookup::Rejected(format!(
                "it is longer than {MAX_COMPILED_BYTES} bytes"
            )));
        };
        let mac_name = format!("{name}{MAC_SUFFIX}");
        let mac = match self.read(&mac_name, MAC_HEX_BYTES)? {
            Some(Some(mac)) => mac,
            Some(None) => return Ok(Lookup::Rejected(String::from("its MAC file is too long"))),
            None => return Ok(Lookup::Rejected(String::from("it has no MAC beside it"))),
        };
        let mac = String::from_utf8_lossy(&mac);
        if !self.key.verify_hex(&[name.as_bytes(), &bytes], mac.trim()) {
            return Ok(Lookup::Rejected(String::from(
                "its MAC does not verify under the state folder's key",
            )));
        }
        match load_compiled(engine, &bytes) {
            Ok(component) => Ok(Lookup::Hit(component)),
            Err(e) => Ok(Lookup::Rejected(format!("wasmtime refused it: {e}"))),
        }
    }

    /// Writes the entry `name` and its MAC.
    ///
    /// # Errors
    /// [`ComponentError::State`] naming the file.
    pub(super) fn store(&self, name: &str, bytes: &[u8]) -> Result<(), ComponentError> {
        let mac = self.key.mac_hex(&[name.as_bytes(), bytes]);
        replace_private_in(&self.dir, name, bytes, &self.path.join(name))?;
        let mac_name = format!("{name}{MAC_SUFFIX}");
        replace_private_in(
            &self.dir,
            &mac_name,
            mac.as_bytes(),
            &self.path.join(&mac_name),
        )?;
        Ok(())
    }

    /// The bytes of the file `name`: `None` when there is none, `Some(None)` when it is
    /// longer than `limit` bytes.
    fn read(&self, name: &str, limit: u64) -> Result<Option<Option<Vec<u8>>>, StateError> {
        let full = self.path.join(name);
        let file = match open_private_in(&self.dir, Path::new(name), &full) {
            Ok(file) => file,
            Err(e) if e.not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let io = |source| StateError::Io {
            path: full.clone(),
            source,
        };
        let length = file.metadata().map_err(io)?.len();
        if length > limit {
            return Ok(Some(None));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
            return Ok(Some(None));
        }
        Ok(Some(Some(bytes)))
    }
}

impl From<StateError> for ComponentError {
    fn from(error: StateError) -> Self {
        ComponentError::State(error)
    }
}

/// Deserializes a compiled component from bytes whose MAC was verified.
///
/// wasmtime trusts a serialized component completely: its machine code runs as is. This is
/// the one place toolward deserializes, and it is given only bytes read once, whole, into
/// memory and verified under the state folder's key ([`ComponentCache::lookup`]): no file is
/// read again between the check and the use.
#[expect(
    unsafe_code,
    reason = "deserializing compiled machine code is unsafe in wasmtime; only MAC-verified bytes get here"
)]
fn load_compiled(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `bytes` were written by `ComponentCache::store` of this process or an earlier
    // one holding the state folder's key (their MAC verified), and wasmtime checks the
    // header and the engine's compatibility before using them.
    unsafe { Component::deserialize(engine, bytes) }
}
