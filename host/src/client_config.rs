//! MCP clients' own config files: where each client keeps its servers on this machine, reading
//! them, and rewriting one so the client starts `toolward serve` in place of the servers
//! toolward imported (`toolward client connect`), then undoing that (`disconnect`).
//!
//! # Contract
//!
//! - [`KNOWN_CLIENTS`] names every client, its file's place and shape (sources in
//!   `docs/operators.md`): Linux paths under `HOME`, the macOS ones when built for macOS;
//!   Windows paths are documented only.
//! - Reading never changes a file. A file that is missing is not an error (the client is not
//!   installed); one that does not parse is, naming the file.
//! - [`connect`] changes only the client's server map: it removes the entries toolward
//!   manages (same name as a server of `toolward.json` and the same `command`, `args` and
//!   `url`), moves their `env` values into the entry it adds (`toolward`), and keeps every
//!   other byte: comments, key order, unknown keys, servers toolward does not manage. JSON and
//!   JSONC go through `jsonc-parser`'s CST, TOML through `toml_edit`. It keeps the file's
//!   bytes as they were (`<state_dir>/clients/CLIENT.backup`), writes atomically (a temporary
//!   file renamed over the old, its permission bits kept, never a set-id bit), and does
//!   nothing when the file is already connected.
//! - Both reach the client's file as a [`HeldFile`]: its path resolved once (a dotfile
//!   manager's link followed, and the link, the file and its folder the operator's or root's
//!   and not writable by others, unless [`Foreign::Accept`]), read and replaced through its
//!   folder's handle, and not written when another file or a link took its place since the
//!   read. The backup and the record are written through the state folder's handle.
//! - [`disconnect`] writes the backup back byte for byte when the file is still exactly what
//!   `connect` wrote; otherwise (the client rewrote its file since) it undoes only toolward's
//!   edit: removes the `toolward` entry and puts back the entries it replaced, from the
//!   backup.

mod clients;
mod edit;
mod nesting;

pub use clients::{ClientSpec, FileFormat, KNOWN_CLIENTS, client_by_id, flatten_entry};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canonical::sha256_hex;
use crate::config::rewrite::{self, Foreign, HeldFile, RewriteError};
use crate::state_dir::{StateDir, StateError};

/// Largest client config file read, in bytes: 16 MiB. Claude Code's `~/.claude.json` keeps
/// its history and grows to a few MiB; a settings file past this is not one a person edits.
pub const MAX_CLIENT_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Deepest nesting of arrays and objects (TOML tables) read in a client's file, in levels (the
/// top-level object is level 1): 128. The JSONC parser recurses once per level, and so do the
/// walks over what it returns, so the depth is measured without recursion before any of them
/// runs (a file nested 200,000 deep would otherwise overflow the stack and abort). Real client
/// files nest under ten levels; 128 is also `serde_json`'s limit for toolward's own files.
pub const MAX_CLIENT_FILE_DEPTH: usize = 128;

/// The name of the entry [`connect`] adds to the client's server map. Tools then reach the
/// model as `toolward`'s, named `server__tool`.
pub const TOOLWARD_ENTRY: &str = "toolward";

/// Errors reading or rewriting a client's config.
#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    /// The file could not be read or written.
    #[error("cannot {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CLIENT_FILE_BYTES`].
    #[error("client config `{path}` is {bytes} bytes, over the limit of {limit} bytes ({client})")]
    TooLarge {
        /// The client.
        client: String,
        /// The file.
        path: PathBuf,
        /// Its size, in bytes.
        bytes: u64,
        /// [`MAX_CLIENT_FILE_BYTES`].
        limit: u64,
    },
    /// The file nests deeper than [`MAX_CLIENT_FILE_DEPTH`].
    #[error(
        "client config `{path}` of `{client}` nests {depth} levels deep, over the limit of {limit} levels: toolward does not read it"
    )]
    TooDeep {
        /// The client.
        client: String,
        /// The file.
        path: PathBuf,
        /// How deep it nests, in levels.
        depth: usize,
        /// [`MAX_CLIENT_FILE_DEPTH`].
        limit: usize,
    },
    /// The file does not parse in its client's format.
    #[error(
        "client config `{path}` of `{client}` does not parse: {message}; fix it in the client first"
    )]
    Parse {
        /// The client.
        client: String,
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The client has a server named `toolward` that toolward did not add.
    #[error(
        "client config `{path}` already has a server `{TOOLWARD_ENTRY}` that does not start this config; rename it in `{client}` first"
    )]
    EntryTaken {
        /// The client.
        client: String,
        /// The file.
        path: PathBuf,
    },
    /// No server of the client is one toolward manages.
    #[error(
        "no server of `{client}` (`{path}`) is managed by `{config}`: run `toolward init --client {client}` first"
    )]
    NothingToConnect {
        /// The client.
        client: String,
        /// The file.
        path: PathBuf,
        /// The toolward config.
        config: PathBuf,
    },
    /// Two servers' different values would be moved under one variable.
    #[error(
        "`{config}` refers to variable `{variable}` for servers `{first}` and `{second}`, which have different values in `{path}`: one value would reach both servers; give each its own variable in `{config}` (as `toolward init` does now)",
        first = crate::text::escape(first),
        second = crate::text::escape(second)
    )]
    SharedVariable {
        /// The client's file.
        path: PathBuf,
        /// The toolward config.
        config: PathBuf,
        /// The variable.
        variable: String,
        /// The server whose value was moved first.
        first: String,
        /// The server with another value.
        second: String,
    },
    /// `connect` of a client this config already connected at another file: the config keeps
    /// one backup and one record per client, so the second file's would be lost and
    /// `disconnect` would put the first file's content (its secrets) into the second.
    #[error(
        "`{client}` is already connected at `{connected}` by this config, not `{path}`: run `toolward client disconnect {client}` for that file first (a config keeps one backup per client)"
    )]
    ConnectedElsewhere {
        /// The client.
        client: String,
        /// The file the record names.
        connected: PathBuf,
        /// The file named now.
        path: PathBuf,
    },
    /// `disconnect` without an earlier `connect`.
    #[error("`{client}` was not connected by this config (no `{record}`)")]
    NotConnected {
        /// The client.
        client: String,
        /// The record `connect` writes.
        record: PathBuf,
    },
    /// The client's file cannot be rewritten safely (another user's link, file or folder, or
    /// it changed since it was read).
    #[error(transparent)]
    File(#[from] RewriteError),
    /// The state folder, where the backup and the record go, cannot be trusted or reached.
    #[error("cannot keep the backup and record of `{client}`: {source}")]
    State {
        /// The client.
        client: String,
        /// Why.
        #[source]
        source: StateError,
    },
    /// The record `connect` wrote is unreadable.
    #[error("connection record `{path}` is damaged: {message}")]
    Record {
        /// The record.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One server as a client's config has it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientServer {
    /// Its name in the client's map.
    pub name: String,
    /// The entry, as JSON (TOML converted), unchanged.
    pub entry: Map<String, Value>,
}

/// A client config found on this machine.
#[derive(Debug, Clone)]
pub struct FoundClient {
    /// Which client.
    pub spec: &'static ClientSpec,
    /// The file.
    pub path: PathBuf,
    /// Its servers, in file order for JSON and name order for TOML.
    pub servers: Vec<ClientServer>,
}

/// The file of `spec` on this machine: under `home`, or under `project` for project files.
#[must_use]
pub fn client_path(spec: &ClientSpec, home: &Path, project: &Path) -> PathBuf {
    if spec.project {
        project.join(spec.path())
    } else {
        home.join(spec.path())
    }
}

/// Reads the client configs that exist, in [`KNOWN_CLIENTS`] order.
///
/// # Errors
///
/// A file that exists but cannot be read or parsed.
pub fn discover(home: &Path, project: &Path) -> Result<Vec<FoundClient>, ClientConfigError> {
    let mut found = Vec::new();
    for spec in KNOWN_CLIENTS {
        let path = client_path(spec, home, project);
        if !path.is_file() {
            continue;
        }
        let text = read_text(spec, &path)?;
        let servers = edit::servers(spec, &path, &text)?;
        found.push(FoundClient {
            spec,
            path,
            servers,
        });
    }
    Ok(found)
}

fn read_text(spec: &ClientSpec, path: &Path) -> Result<String, ClientConfigError> {
    let io = |action| {
        move |source| ClientConfigError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    let bytes = std::fs::metadata(path).map_err(io("read"))?.len();
    if bytes > MAX_CLIENT_FILE_BYTES {
        return Err(ClientConfigError::TooLarge {
            client: spec.id.to_owned(),
            path: path.to_path_buf(),
            bytes,
            limit: MAX_CLIENT_FILE_BYTES,
        });
    }
    std::fs::read_to_string(path).map_err(io("read"))
}

/// What [`connect`] and [`disconnect`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The file was written; the names of the servers replaced (connect) or put back
    /// (disconnect).
    Changed(Vec<String>),
    /// The file was already in the wanted state: nothing written.
    Unchanged,
    /// `disconnect` wrote the backup back byte for byte.
    Restored,
    /// `disconnect` found the file changed since `connect` and undid only toolward's edit;
    /// the servers put back.
    Undone(Vec<String>),
}

/// What `connect` keeps in `<state_dir>/clients/CLIENT.json` for `disconnect`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    client: String,
    path: PathBuf,
    /// SHA-256 of the bytes `connect` wrote.
    written_sha256: String,
    /// The servers it replaced, by name.
    replaced: Vec<String>,
}

/// What `connect` needs to know of the toolward side.
#[derive(Debug, Clone)]
pub struct Toolward {
    /// The `toolward` program the client should start (absolute).
    pub program: PathBuf,
    /// The config (absolute).
    pub config: PathBuf,
    /// The config's `mcpServers` as written (before `${VAR}` expansion), by name.
    pub servers: Map<String, Value>,
    /// The config's state folder, where the backup and the record go.
    pub state_dir: PathBuf,
}

impl Toolward {
    fn args(&self) -> Vec<String> {
        vec![
            "serve".to_owned(),
            "--config".to_owned(),
            self.config.display().to_string(),
        ]
    }

    /// Whether the client's `entry` for `name` is the server toolward manages under that
    /// name: same `command`, `args` and `url` (the `env` moved, so it may differ).
    fn manages(&self, name: &str, entry: &Map<String, Value>) -> bool {
        let Some(Value::Object(ours)) = self.servers.get(name) else {
            return false;
        };
        let entry = clients::flatten_entry(entry);
        ["command", "args", "url"]
            .iter()
            .all(|key| ours.get(*key) == entry.get(*key))
    }
}

fn clients_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("clients")
}

/// Rewrites the config of `spec` at `path` to start toolward in place of the servers it
/// manages (see the module documentation).
///
/// # Errors
///
/// [`ClientConfigError`]: the file unreadable or unparsable, no managed server, a foreign
/// `toolward` entry, a write that failed (the old file then stays as it was).
pub fn connect(
    spec: &ClientSpec,
    path: &Path,
    toolward: &Toolward,
    foreign: Foreign,
) -> Result<Outcome, ClientConfigError> {
    let mut file = HeldFile::open(path, foreign)?;
    let text = read_held(spec, &mut file)?;
    let servers = edit::servers(spec, path, &text)?;
    let mut replaced = Vec::new();
    let mut env = BTreeMap::new();
    // Each variable moved in this run, with the server it came from: two servers' different
    // values under one name would give one server the other's secret.
    let mut moved: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut already = false;
    for server in &servers {
        if server.name == TOOLWARD_ENTRY {
            let args = server.entry.get("args").cloned().unwrap_or(Value::Null);
            if args != Value::from(toolward.args()) {
                return Err(ClientConfigError::EntryTaken {
                    client: spec.id.to_owned(),
                    path: path.to_path_buf(),
                });
            }
            already = true;
            // Connecting again after the client gained a managed server keeps what the
            // earlier connect moved.
            if let Some(Value::Object(values)) = server.entry.get("env") {
                for (name, value) in values {
                    if let Value::String(value) = value {
                        env.insert(name.clone(), value.clone());
                    }
                }
            }
            continue;
        }
        if toolward.manages(&server.name, &server.entry) {
            replaced.push(server.name.clone());
            for (var, value) in moved_env(&toolward.servers, server) {
                if let Some((other, earlier)) = moved.get(&var)
                    && *earlier != value
                {
                    return Err(ClientConfigError::SharedVariable {
                        path: path.to_path_buf(),
                        config: toolward.config.clone(),
                        variable: var,
                        first: other.clone(),
                        second: server.name.clone(),
                    });
                }
                env.insert(var.clone(), value.clone());
                moved.insert(var, (server.name.clone(), value));
            }
        }
    }
    if replaced.is_empty() {
        if already {
            return Ok(Outcome::Unchanged);
        }
        return Err(ClientConfigError::NothingToConnect {
            client: spec.id.to_owned(),
            path: path.to_path_buf(),
            config: toolward.config.clone(),
        });
    }
    let entry = edit::ToolwardEntry {
        command: toolward.program.display().to_string(),
        args: toolward.args(),
        env,
    };
    let new_text = edit::connect(spec, path, &text, &replaced, &entry)?;
    if new_text == text {
        return Ok(Outcome::Unchanged);
    }
    let clients = Clients::open(spec, &toolward.state_dir)?;
    let record_path = clients.path(RECORD);
    // A second connect after the client changed the file keeps the first backup: it is the
    // file as it was before toolward. Of the same file only (found by an attack: a project's
    // `.mcp.json` connected after another project's took the other's record, and `disconnect`
    // then wrote the first project's file, secrets and all, over the second's).
    match clients.read(RECORD)? {
        None => clients.write(BACKUP, text.as_bytes())?,
        Some(earlier) => {
            let earlier: Record =
                serde_json::from_slice(&earlier).map_err(|e| ClientConfigError::Record {
                    path: record_path.clone(),
                    message: e.to_string(),
                })?;
            if !same_file_named(&earlier.path, path) {
                return Err(ClientConfigError::ConnectedElsewhere {
                    client: spec.id.to_owned(),
                    connected: earlier.path,
                    path: path.to_path_buf(),
                });
            }
        }
    }
    let record = Record {
        client: spec.id.to_owned(),
        path: path.to_path_buf(),
        written_sha256: sha256_hex(new_text.as_bytes()),
        replaced: replaced.clone(),
    };
    let record_text =
        serde_json::to_string_pretty(&record).map_err(|e| ClientConfigError::Record {
            path: record_path.clone(),
            message: e.to_string(),
        })?;
    clients.write(RECORD, record_text.as_bytes())?;
    rewrite::test_pause("client-file-read");
    // 0600 only for a file that vanished meanwhile; the old file's bits are kept otherwise.
    file.replace(new_text.as_bytes(), 0o600)?;
    Ok(Outcome::Changed(replaced))
}

/// Whether two names of a client's file are one name: compared absolute, as written (a
/// second name for the same file through a link is another name, and refused).
fn same_file_named(a: &Path, b: &Path) -> bool {
    match (std::path::absolute(a), std::path::absolute(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The `env` values of the client's `server` that `toolward.json` refers to as `${VAR}`,
/// as `(VAR, value)`. Headers are treated the same way.
fn moved_env(ours: &Map<String, Value>, server: &ClientServer) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(Value::Object(entry)) = ours.get(&server.name) else {
        return out;
    };
    let theirs = clients::flatten_entry(&server.entry);
    for key in ["env", "headers"] {
        let (Some(Value::Object(refs)), Some(Value::Object(values))) =
            (entry.get(key), theirs.get(key))
        else {
            continue;
        };
        for (name, reference) in refs {
            let (Some(var), Some(Value::String(value))) =
                (reference.as_str().and_then(variable_of), values.get(name))
            else {
                continue;
            };
            out.push((var.to_owned(), value.clone()));
        }
    }
    out
}

/// `NAME` of a value that is exactly `${NAME}`.
#[must_use]
pub fn variable_of(text: &str) -> Option<&str> {
    let name = text.strip_prefix("${")?.strip_suffix('}')?;
    let valid = name
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    (valid && !name.is_empty()).then_some(name)
}

/// Undoes [`connect`] for `spec` (see the module documentation), reaching the client's file
/// as [`connect`] does (`foreign` as there).
///
/// # Errors
///
/// [`ClientConfigError::NotConnected`] without a record; otherwise as [`connect`].
pub fn disconnect(
    spec: &ClientSpec,
    state_dir: &Path,
    foreign: Foreign,
) -> Result<Outcome, ClientConfigError> {
    let clients = Clients::open(spec, state_dir)?;
    let record_path = clients.path(RECORD);
    let Some(record_text) = clients.read(RECORD)? else {
        return Err(ClientConfigError::NotConnected {
            client: spec.id.to_owned(),
            record: record_path,
        });
    };
    let record: Record =
        serde_json::from_slice(&record_text).map_err(|e| ClientConfigError::Record {
            path: record_path.clone(),
            message: e.to_string(),
        })?;
    let backup_path = clients.path(BACKUP);
    let backup = clients
        .read(BACKUP)?
        .ok_or_else(|| ClientConfigError::Io {
            action: "read",
            path: backup_path.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })
        .and_then(|bytes| text_of(&backup_path, bytes))?;
    let mut file = HeldFile::open(&record.path, foreign)?;
    let current = read_held(spec, &mut file)?;
    rewrite::test_pause("client-file-read");
    let outcome = if sha256_hex(current.as_bytes()) == record.written_sha256 {
        file.replace(backup.as_bytes(), 0o600)?;
        Outcome::Restored
    } else {
        let new_text = edit::disconnect(spec, &record.path, &current, &backup, &record.replaced)?;
        if new_text != current {
            file.replace(new_text.as_bytes(), 0o600)?;
        }
        Outcome::Undone(record.replaced.clone())
    };
    clients.remove(RECORD)?;
    clients.remove(BACKUP)?;
    Ok(outcome)
}

/// The text of the client's file read through `file`, at most [`MAX_CLIENT_FILE_BYTES`].
fn read_held(spec: &ClientSpec, file: &mut HeldFile) -> Result<String, ClientConfigError> {
    let bytes = file.read(MAX_CLIENT_FILE_BYTES).map_err(|e| match e {
        RewriteError::TooLarge { path, bytes, limit } => ClientConfigError::TooLarge {
            client: spec.id.to_owned(),
            path,
            bytes,
            limit,
        },
        e => ClientConfigError::File(e),
    })?;
    text_of(file.path(), bytes)
}

fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String, ClientConfigError> {
    String::from_utf8(bytes).map_err(|e| ClientConfigError::Io {
        action: "read",
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

/// The record `connect` keeps for `disconnect`, in `<state_dir>/clients/`.
const RECORD: &str = "json";
/// The client's file as it was before `connect`, beside the record.
const BACKUP: &str = "backup";

/// `<state_dir>/clients/`, opened through the state folder (owner only, checked), where the
/// backup and the record of one client are `CLIENT.backup` and `CLIENT.json`.
struct Clients {
    client: &'static str,
    path: PathBuf,
    dir: cap_std::fs::Dir,
}

impl Clients {
    fn open(spec: &ClientSpec, state_dir: &Path) -> Result<Clients, ClientConfigError> {
        let state = |source| ClientConfigError::State {
            client: spec.id.to_owned(),
            source,
        };
        let root = StateDir::open(state_dir).map_err(state)?;
        let dir = root.subdir("clients").map_err(state)?;
        Ok(Clients {
            client: spec.id,
            path: clients_dir(state_dir),
            dir,
        })
    }

    fn name(&self, kind: &str) -> String {
        format!("{}.{kind}", self.client)
    }

    fn path(&self, kind: &str) -> PathBuf {
        self.path.join(self.name(kind))
    }

    /// The file's bytes, `None` when there is none; a link, another owner or access for
    /// group or others is refused.
    fn read(&self, kind: &str) -> Result<Option<Vec<u8>>, ClientConfigError> {
        let name = self.name(kind);
        let path = self.path(kind);
        let file =
            match crate::state_dir::open_private_in(&self.dir, Path::new(&name), &path) {
                Ok(file) => file,
                Err(e) if e.not_found() => return Ok(None),
                Err(source) => {
                    return Err(ClientConfigError::State {
                        client: self.client.to_owned(),
                        source,
                    });
                }
            };
        // Length 0: the bound is checked on what is read, not on the file's metadata.
        let bytes = crate::config::operator_file::read_at_most(file, 0, MAX_CLIENT_FILE_BYTES)
            .map_err(|source| ClientConfigError::Io {
                action: "read",
                path: path.clone(),
                source,
            })?
            .map_err(|_| ClientConfigError::Record {
                path,
                message: format!("it is over the limit of {MAX_CLIENT_FILE_BYTES} bytes"),
            })?;
        Ok(Some(bytes))
    }

    fn write(&self, kind: &str, bytes: &[u8]) -> Result<(), ClientConfigError> {
        rewrite::replace_in(
            &self.dir,
            &self.name(kind),
            bytes,
            crate::state_dir::FILE_MODE,
            &self.path(kind),
        )
        .map_err(ClientConfigError::File)
    }

    fn remove(&self, kind: &str) -> Result<(), ClientConfigError> {
        self.dir
            .remove_file(self.name(kind))
            .map_err(|source| ClientConfigError::Io {
                action: "remove",
                path: self.path(kind),
                source,
            })
    }
}

#[cfg(test)]
mod tests;
