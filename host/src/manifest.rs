//! The pinned manifest: what the operator reviewed, one file per configuration
//! (`manifest`, default `manifest.json`), written by `toolward pin` and read by load.
//!
//! # Format
//!
//! Pretty JSON whose keys are sorted at every level, two spaces of indentation, one member
//! or item per line, and a final line feed, so that a change reads well in a `git diff`.
//! Strings use the canonical escaping ([`canonical::write_string`]: raw UTF-8, only `"`, `\`
//! and controls escaped) and numbers their canonical text, so embedded schemas keep their
//! exact numbers. The same manifest always writes the same bytes.
//!
//! ```json
//! {
//!   "components": {
//!     "policy": "<sha256>",
//!     "rules": "<sha256>"
//!   },
//!   "manifest_version": 1,
//!   "servers": {
//!     "fs": {
//!       "protocol_version": "2025-06-18",
//!       "server_name": "secure-filesystem-server",
//!       "server_version": "0.2.0",
//!       "tools": {
//!         "read_file": {
//!           "annotations": { "readOnlyHint": true },
//!           "description": "Read the complete contents of a file ...",
//!           "description_sha256": "<sha256>",
//!           "input_schema": { "type": "object", ... },
//!           "input_schema_sha256": "<sha256>",
//!           "output_schema_sha256": "<sha256>"
//!         }
//!       },
//!       "refused": {
//!         "report\\u{202E}fdp.exe": "bidirectional control U+202E in `name`, which a reviewer would not see"
//!       }
//!     }
//!   }
//! }
//! ```
//!
//! `annotations` and `output_schema_sha256` are left out when the server sent none.
//! `refused` (see [`PinnedServer::refused`]) names each tool of the listing that `pin`
//! refused, hidden characters made visible (`#index` for an entry without a name), with the
//! reason; it is left out when there is none, so a manifest without refusals reads and
//! writes as before (`docs/manifest.md`). Every
//! hash is 64 lowercase hex digits of SHA-256: `description_sha256` over the description's
//! UTF-8 bytes, `input_schema_sha256` and `output_schema_sha256` over the schema's canonical
//! text (`docs/canonical-json.md`).
//!
//! # Reading
//!
//! [`Manifest::parse`] reads with [`canonical::parse`] (exact numbers, duplicate keys
//! refused) and accepts exactly the shape above: an unknown key, a missing key, a wrong type,
//! a hash that is not 64 lowercase hex digits or another `manifest_version` than
//! [`MANIFEST_VERSION`] is an error naming its place. The stored description and input
//! schema are the reviewed text, and their hashes are what load compares: a manifest whose
//! `description` or `input_schema` no longer matches its own hash was edited by hand (or
//! damaged), so what the operator reads is not what load enforces. It is refused, naming the
//! server and tool, rather than trusting either side.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::canonical::{self, CanonicalError, Value};
use crate::config::operator_file::{self, OperatorFileError};
use crate::config::rewrite::{Foreign, HeldFile, RewriteError};
use crate::schema;
use crate::state_dir::{StateDir, StateError};
use crate::text::{self, escape as visible};

pub mod compact;

/// The format version this module writes and reads (`manifest_version`).
pub const MANIFEST_VERSION: u64 = 1;

/// Longest manifest [`Manifest::read`] reads, in bytes: four servers at the default
/// `max_listing_bytes` (64 MiB each) fit; past that a file is more likely damaged than
/// reviewed.
pub const MAX_MANIFEST_BYTES: u64 = 256 * 1024 * 1024;

/// Indentation of one level in the written manifest.
const INDENT: &str = "  ";

/// Lines of context around each change in a description diff.
const DIFF_CONTEXT_LINES: usize = 3;

/// Whether reading re-verifies each stored description and input schema against its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hashes {
    /// Re-verify: the reviewed manifest, which anyone with the file could have edited.
    Verify,
    /// Trust them: the compact form, made from a manifest that was verified, and read only
    /// when its MAC verifies (see [`compact`]).
    Trust,
}

/// Keys of the manifest object.
const TOP_KEYS: &[&str] = &["components", "manifest_version", "servers"];
/// Keys of a server entry.
const SERVER_KEYS: &[&str] = &[
    "protocol_version",
    "refused",
    "server_name",
    "server_version",
    "tools",
];
/// Keys of a tool entry.
const TOOL_KEYS: &[&str] = &[
    "annotations",
    "description",
    "description_sha256",
    "input_schema",
    "input_schema_sha256",
    "output_schema_sha256",
];

/// Why a manifest could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file cannot be read.
    #[error("could not read the manifest `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file is longer than `MAX_MANIFEST_BYTES`.
    #[error("the manifest `{}` is longer than {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// `MAX_MANIFEST_BYTES`.
        limit: u64,
    },
    /// The file is not a regular file (`/dev/zero`, a FIFO).
    #[error(transparent)]
    File(OperatorFileError),
    /// The file is owned by another user than the one toolward runs as.
    #[error(
        "the manifest `{}` is owned by uid {owner}, not by uid {euid} that toolward runs as: whoever owns it decides which tools the model sees; review it, then run `chown {euid} {}`",
        path.display(),
        path.display()
    )]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The effective uid of this process.
        euid: u32,
    },
    /// Group or others may write the file.
    #[error(
        "the manifest `{}` has mode {mode:04o}: group or others can change which tools the model sees; review it, then run `chmod go-w {}`",
        path.display(),
        path.display()
    )]
    Writable {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The text is not JSON.
    #[error("the manifest is not valid JSON")]
    Parse {
        /// Why.
        #[source]
        source: CanonicalError,
    },
    /// `manifest_version` is not `MANIFEST_VERSION`.
    #[error(
        "the manifest has `manifest_version` {found}, and this toolward reads version {supported}"
    )]
    UnsupportedVersion {
        /// The version found, as written.
        found: String,
        /// `MANIFEST_VERSION`.
        supported: u64,
    },
    /// Something in the manifest has the wrong shape.
    #[error("the manifest is invalid at `{at}`: {detail}")]
    Invalid {
        /// Where: dotted keys from the root (`servers.fs.tools.read_file.description`).
        at: String,
        /// What is wrong.
        detail: String,
    },
    /// A stored text no longer matches its stored hash.
    #[error(
        "the manifest's `{field}` of tool `{tool}` on server `{server}` does not match its hash `{field}_sha256`: it was edited by hand or damaged; pin again and review"
    )]
    HashMismatch {
        /// The server's name in the configuration.
        server: String,
        /// The tool (hidden characters made visible).
        tool: String,
        /// `description` or `input_schema`.
        field: &'static str,
    },
    /// The compact form's folder or key in the state folder cannot be used (another owner,
    /// access for group or others, a symlink), or its entry cannot be written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The file cannot be written, or not safely: a link, file or folder of another user or
    /// writable by others on the way, or another file put in its place while it was written
    /// (see `crate::config::rewrite`).
    #[error("could not write the manifest `{}`", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: RewriteError,
    },
}

/// The reviewed manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// SHA-256 of each component the manifest was pinned with: `rules`, `policy`.
    pub components: BTreeMap<String, String>,
    /// Each server by its name in the configuration.
    pub servers: BTreeMap<String, PinnedServer>,
}

/// One pinned server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedServer {
    /// `serverInfo.name` it answered `initialize` with.
    pub server_name: String,
    /// `serverInfo.version`.
    pub server_version: String,
    /// The protocol version it answered.
    pub protocol_version: String,
    /// Its tools by name.
    pub tools: BTreeMap<String, PinnedTool>,
    /// Tools its listing held that `pin` refused (malformed: hidden characters, over
    /// `max_tool_bytes`, an `inputSchema` that is not an object), by name (hidden characters
    /// made visible, or `#index` for an entry without a name), with the reason. Recorded for
    /// review; never registered. Written as `refused` only when there are any.
    pub refused: BTreeMap<String, String>,
}

/// One pinned tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedTool {
    /// The description as the server sent it (decoded).
    pub description: String,
    /// SHA-256 of `description`'s UTF-8 bytes, lowercase hex.
    pub description_sha256: String,
    /// The input schema, exact.
    pub input_schema: Value,
    /// SHA-256 of the canonical text of `input_schema`, lowercase hex.
    pub input_schema_sha256: String,
    /// SHA-256 of the canonical text of the output schema, when the server sent one.
    pub output_schema_sha256: Option<String>,
    /// The annotations as received, when the server sent any.
    pub annotations: Option<Value>,
}

impl Manifest {
    /// Reads a manifest from its JSON text (see the module documentation).
    ///
    /// # Errors
    ///
    /// [`ManifestError::Parse`], [`ManifestError::UnsupportedVersion`],
    /// [`ManifestError::Invalid`], [`ManifestError::HashMismatch`].
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        Manifest::parse_as(bytes, Hashes::Verify)
    }

    /// [`Manifest::parse`], re-verifying each stored text against its hash or not
    /// ([`Hashes::Trust`]: only for the compact form, whose text was verified when it was
    /// made from the reviewed manifest, see [`compact`]).
    fn parse_as(bytes: &[u8], hashes: Hashes) -> Result<Manifest, ManifestError> {
        let mut value =
            canonical::parse(bytes).map_err(|source| ManifestError::Parse { source })?;
        let root = members(&value, "manifest", TOP_KEYS)?;
        let version = required(root, "manifest", "manifest_version")?;
        if version.as_number().and_then(canonical::Number::as_u64) != Some(MANIFEST_VERSION) {
            return Err(ManifestError::UnsupportedVersion {
                found: canonical::to_canonical(version),
                supported: MANIFEST_VERSION,
            });
        }
        let mut components = BTreeMap::new();
        let at = "components";
        for (name, hash) in members(required(root, "manifest", at)?, at, &[])? {
            components.insert(name.clone(), sha256(hash, &format!("{at}.{name}"))?);
        }
        members(required(root, "manifest", "servers")?, "servers", &[])?;
        // Owned: each tool's schema and annotations move out of the parsed document instead
        // of being copied (a copy of every schema was a fifth of reading a manifest).
        let mut servers_value = value.take_member("servers").unwrap_or(Value::Null);
        let mut servers = BTreeMap::new();
        for (name, server) in members_mut(&mut servers_value) {
            servers.insert(name.clone(), read_server(name, server, hashes)?);
        }
        Ok(Manifest {
            components,
            servers,
        })
    }

    /// Reads the manifest file at `path`: a regular file of at most `MAX_MANIFEST_BYTES`
    /// (read as `operator_file` says), owned by the effective user and not writable by
    /// group or others (it may be `0644`: it is reviewed and committed, not secret).
    ///
    /// # Errors
    ///
    /// [`ManifestError::Read`], [`ManifestError::File`], [`ManifestError::TooLarge`],
    /// [`ManifestError::Owner`], [`ManifestError::Writable`], and those of
    /// [`Manifest::parse`].
    pub fn read(path: &Path) -> Result<Manifest, ManifestError> {
        Manifest::parse(&read_bytes(path)?)
    }

    /// [`Manifest::read`] through the manifest's compact form in the state folder `state`
    /// (see `compact`): the same manifest, read without re-verifying every stored text
    /// when a compact form made from exactly these bytes is there; otherwise the manifest
    /// is read as [`Manifest::read`] does and its compact form written for the next start.
    ///
    /// # Errors
    /// Those of [`Manifest::read`], and [`ManifestError::State`] when the compact form's
    /// folder or key cannot be trusted (another owner, access for group or others).
    pub fn read_through(path: &Path, state: &StateDir) -> Result<Manifest, ManifestError> {
        let bytes = read_bytes(path)?;
        compact::read(&bytes, state)
    }

    /// The manifest's text (see the module documentation): the same manifest always gives
    /// the same bytes, and [`Manifest::parse`] reads them back equal.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_pretty_node(&mut out, &self.to_node(), 0);
        out.push('\n');
        out
    }

    /// Writes [`Manifest::to_json`] to `path` atomically, as a `HeldFile`: the path resolved
    /// once (its links, file and folder the operator's or root's and not writable by others),
    /// a temporary file in the held folder flushed to disk, then renamed over the manifest
    /// there unless another file took its place since, so a reader sees the old manifest or
    /// the new one, never a part, and nothing is written elsewhere. An existing manifest keeps
    /// its permission bits (no set-id bit); a new one is `MANIFEST_MODE`.
    ///
    /// # Errors
    ///
    /// [`ManifestError::Write`]; the temporary file is removed.
    pub fn write(&self, path: &Path) -> Result<(), ManifestError> {
        let write_error = |source| ManifestError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut file = HeldFile::open(path, Foreign::Refuse).map_err(write_error)?;
        file.replace(self.to_json().as_bytes(), MANIFEST_MODE)
            .map_err(write_error)
    }

    /// The manifest's compact form: its canonical text (see `compact`).
    fn to_compact(&self) -> String {
        let mut out = String::new();
        write_compact(&mut out, &self.to_node());
        out
    }

    /// The manifest as the writers see it, borrowed: writing it copies no schema (two copies
    /// of every schema were a third of a pin of many tools).
    fn to_node(&self) -> Node<'_> {
        let components = self
            .components
            .iter()
            .map(|(name, hash)| (name.as_str(), Node::Text(hash)))
            .collect();
        let servers = self
            .servers
            .iter()
            .map(|(name, server)| {
                let tools = server
                    .tools
                    .iter()
                    .map(|(name, tool)| {
                        let mut members = vec![
                            ("description", Node::Text(&tool.description)),
                            ("description_sha256", Node::Text(&tool.description_sha256)),
                            ("input_schema", Node::Value(&tool.input_schema)),
                            ("input_schema_sha256", Node::Text(&tool.input_schema_sha256)),
                        ];
                        if let Some(hash) = &tool.output_schema_sha256 {
                            members.push(("output_schema_sha256", Node::Text(hash)));
                        }
                        if let Some(annotations) = &tool.annotations {
                            members.push(("annotations", Node::Value(annotations)));
                        }
                        (name.as_str(), Node::Object(members))
                    })
                    .collect();
                let mut members = vec![
                    ("protocol_version", Node::Text(&server.protocol_version)),
                    ("server_name", Node::Text(&server.server_name)),
                    ("server_version", Node::Text(&server.server_version)),
                    ("tools", Node::Object(tools)),
                ];
                if !server.refused.is_empty() {
                    let refused = server
                        .refused
                        .iter()
                        .map(|(tool, reason)| (tool.as_str(), Node::Text(reason)))
                        .collect();
                    members.push(("refused", Node::Object(refused)));
                }
                (name.as_str(), Node::Object(members))
            })
            .collect();
        Node::Object(vec![
            ("components", Node::Object(components)),
            ("manifest_version", Node::Number(MANIFEST_VERSION)),
            ("servers", Node::Object(servers)),
        ])
    }
}

/// A part of the manifest as its writers see it (see [`Manifest::to_node`]).
enum Node<'m> {
    /// A value the manifest holds: a schema, annotations.
    Value(&'m Value),
    /// A string.
    Text(&'m str),
    /// A whole number (`manifest_version`).
    Number(u64),
    /// An object, its members in any order (the writers sort them).
    Object(Vec<(&'m str, Node<'m>)>),
}

impl Node<'_> {
    /// The members of an object node sorted by key by code point (keys are unique: they come
    /// from maps and fixed names).
    fn sorted<'n, 'm>(members: &'n [(&'m str, Node<'m>)]) -> Vec<&'n (&'m str, Node<'m>)> {
        let mut sorted: Vec<_> = members.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        sorted
    }
}

/// Writes `node` pretty (see [`write_pretty`]).
fn write_pretty_node(out: &mut String, node: &Node<'_>, level: usize) {
    match node {
        Node::Value(value) => write_pretty(out, value, level),
        Node::Text(text) => canonical::write_string(out, text),
        Node::Number(n) => out.push_str(&n.to_string()),
        Node::Object(members) if members.is_empty() => out.push_str("{}"),
        Node::Object(members) => {
            out.push('{');
            for (i, (key, item)) in Node::sorted(members).into_iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                push_indent(out, level + 1);
                canonical::write_string(out, key);
                out.push_str(": ");
                write_pretty_node(out, item, level + 1);
            }
            out.push('\n');
            push_indent(out, level);
            out.push('}');
        }
    }
}

/// Writes the canonical text of `node` (see [`canonical::to_canonical`]).
fn write_compact(out: &mut String, node: &Node<'_>) {
    match node {
        Node::Value(value) => canonical::write_canonical(out, value),
        Node::Text(text) => canonical::write_string(out, text),
        Node::Number(n) => out.push_str(&n.to_string()),
        Node::Object(members) => {
            out.push('{');
            for (i, (key, item)) in Node::sorted(members).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical::write_string(out, key);
                out.push(':');
                write_compact(out, item);
            }
            out.push('}');
        }
    }
}

/// The bytes of the manifest file at `path`, read as [`Manifest::read`] says.
fn read_bytes(path: &Path) -> Result<Vec<u8>, ManifestError> {
    let read = operator_file::read_with_metadata(path, "manifest", MAX_MANIFEST_BYTES);
    let (bytes, meta) = read.map_err(|error| match error {
        OperatorFileError::Io { source, .. } => ManifestError::Read {
            path: path.to_path_buf(),
            source,
        },
        OperatorFileError::TooLarge { .. } => ManifestError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_MANIFEST_BYTES,
        },
        other => ManifestError::File(other),
    })?;
    check_owner_and_mode(&meta, path)?;
    Ok(bytes)
}

/// Mode of the manifest toolward writes: owner read and write, others read (it is reviewed
/// and committed, not secret). [`Manifest::read`] refuses one group or others may write.
pub const MANIFEST_MODE: u32 = 0o644;

/// The manifest's owner must be the effective user and group and others must not write it.
fn check_owner_and_mode(meta: &fs::Metadata, path: &Path) -> Result<(), ManifestError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let euid = crate::identity::euid();
        if meta.uid() != euid {
            return Err(ManifestError::Owner {
                path: path.to_path_buf(),
                owner: meta.uid(),
                euid,
            });
        }
        if meta.mode() & 0o022 != 0 {
            return Err(ManifestError::Writable {
                path: path.to_path_buf(),
                mode: meta.mode() & 0o7777,
            });
        }
    }
    #[cfg(not(unix))]
    let _ = (meta, path);
    Ok(())
}

/// Writes `value` pretty: members sorted by key, [`INDENT`] per level, empty arrays and
/// objects as `[]` and `{}`, strings and numbers in their canonical text.
fn write_pretty(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => canonical::write_canonical(out, value),
        Value::String(text) => canonical::write_string(out, text),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Object(members) if members.is_empty() => out.push_str("{}"),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                push_indent(out, level + 1);
                write_pretty(out, item, level + 1);
            }
            out.push('\n');
            push_indent(out, level);
            out.push(']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<&(String, Value)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (key, item)) in sorted.into_iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                push_indent(out, level + 1);
                canonical::write_string(out, key);
                out.push_str(": ");
                write_pretty(out, item, level + 1);
            }
            out.push('\n');
            push_indent(out, level);
            out.push('}');
        }
    }
}

fn push_indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str(INDENT);
    }
}

fn invalid(at: &str, detail: impl Into<String>) -> ManifestError {
    ManifestError::Invalid {
        at: at.to_owned(),
        detail: detail.into(),
    }
}

/// The members of the object `value` at `at`; with `keys` non-empty, refuses any other key.
fn members<'v>(
    value: &'v Value,
    at: &str,
    keys: &[&str],
) -> Result<&'v [(String, Value)], ManifestError> {
    let members = value
        .as_object()
        .ok_or_else(|| invalid(at, "expected an object"))?;
    if !keys.is_empty()
        && let Some((key, _)) = members
            .iter()
            .find(|(key, _)| !keys.contains(&key.as_str()))
    {
        return Err(invalid(at, format!("unknown key `{}`", visible(key))));
    }
    Ok(members)
}

/// The members of `value`, mutable, once [`members`] has checked that it is an object
/// (empty otherwise).
fn members_mut(value: &mut Value) -> &mut [(String, Value)] {
    match value {
        Value::Object(members) => members,
        _ => &mut [],
    }
}

fn find<'v>(members: &'v [(String, Value)], key: &str) -> Option<&'v Value> {
    members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn required<'v>(
    members: &'v [(String, Value)],
    at: &str,
    key: &str,
) -> Result<&'v Value, ManifestError> {
    find(members, key).ok_or_else(|| invalid(at, format!("missing key `{key}`")))
}

fn string(value: &Value, at: &str) -> Result<String, ManifestError> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(at, "expected a string"))
}

/// A SHA-256 in lowercase hex.
fn sha256(value: &Value, at: &str) -> Result<String, ManifestError> {
    let hash = string(value, at)?;
    let hex = hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !hex {
        return Err(invalid(at, "expected 64 lowercase hex digits of SHA-256"));
    }
    Ok(hash)
}

fn read_server(
    name: &str,
    value: &mut Value,
    hashes: Hashes,
) -> Result<PinnedServer, ManifestError> {
    let at = format!("servers.{}", visible(name));
    let tools_at = format!("{at}.tools");
    members(required(members(value, &at, SERVER_KEYS)?, &at, "tools")?, &tools_at, &[])?;
    let mut tools_value = value.take_member("tools").unwrap_or(Value::Null);
    let mut tools = BTreeMap::new();
    for (tool, entry) in members_mut(&mut tools_value) {
        tools.insert(
            tool.clone(),
            read_tool(name, tool, entry, &tools_at, hashes)?,
        );
    }
    let server = members(value, &at, SERVER_KEYS)?;
    let field = |key: &str| string(required(server, &at, key)?, &format!("{at}.{key}"));
    let mut refused = BTreeMap::new();
    if let Some(value) = find(server, "refused") {
        let refused_at = format!("{at}.refused");
        for (tool, reason) in members(value, &refused_at, &[])? {
            let place = format!("{refused_at}.{}", visible(tool));
            refused.insert(tool.clone(), string(reason, &place)?);
        }
    }
    Ok(PinnedServer {
        server_name: field("server_name")?,
        server_version: field("server_version")?,
        protocol_version: field("protocol_version")?,
        tools,
        refused,
    })
}

/// Reads one tool entry; what the tool keeps (its schema and annotations) is moved out of
/// `value`, which is left with `null`s.
fn read_tool(
    server: &str,
    tool: &str,
    value: &mut Value,
    at: &str,
    hashes: Hashes,
) -> Result<PinnedTool, ManifestError> {
    let at = format!("{at}.{}", visible(tool));
    let entry = members(value, &at, TOOL_KEYS)?;
    let place = |key: &str| format!("{at}.{key}");
    let description = string(required(entry, &at, "description")?, &place("description"))?;
    let description_sha256 = sha256(
        required(entry, &at, "description_sha256")?,
        &place("description_sha256"),
    )?;
    let input_schema = required(entry, &at, "input_schema")?;
    if input_schema.as_object().is_none() {
        return Err(invalid(&place("input_schema"), "expected an object"));
    }
    let input_schema_sha256 = sha256(
        required(entry, &at, "input_schema_sha256")?,
        &place("input_schema_sha256"),
    )?;
    let output_schema_sha256 = find(entry, "output_schema_sha256")
        .map(|hash| sha256(hash, &place("output_schema_sha256")))
        .transpose()?;
    if find(entry, "annotations").is_some_and(|a| a.as_object().is_none()) {
        return Err(invalid(&place("annotations"), "expected an object"));
    }
    let mismatch = |field| ManifestError::HashMismatch {
        server: visible(server),
        tool: visible(tool),
        field,
    };
    if hashes == Hashes::Verify {
        if canonical::sha256_hex(description.as_bytes()) != description_sha256 {
            return Err(mismatch("description"));
        }
        if canonical::sha256_hex(canonical::to_canonical(input_schema).as_bytes())
            != input_schema_sha256
        {
            return Err(mismatch("input_schema"));
        }
    }
    // Checked above: moved, not copied.
    let input_schema = value.take_member("input_schema").unwrap_or(Value::Null);
    let annotations = value.take_member("annotations");
    Ok(PinnedTool {
        description,
        description_sha256,
        input_schema,
        input_schema_sha256,
        output_schema_sha256,
        annotations,
    })
}

/// What changed between two manifests, for review: the diff `toolward pin` and
/// `toolward check` print. `Display` renders it (see `diff`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestDiff {
    /// Components whose hash changed, appeared or disappeared, by name.
    pub components: Vec<ComponentChange>,
    /// Servers added, removed or changed, by name; unchanged servers are not listed.
    pub servers: Vec<ServerDiff>,
}

/// A component hash that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentChange {
    /// `rules` or `policy`.
    pub name: String,
    /// The old hash, `None` when the component is new.
    pub old: Option<String>,
    /// The new hash, `None` when the component is gone.
    pub new: Option<String>,
}

/// Whether a server or tool is new, gone, or present in both with changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Only in the new manifest.
    Added,
    /// Only in the old manifest.
    Removed,
    /// In both, different.
    Changed,
}

/// What changed about one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerDiff {
    /// The server's name in the configuration.
    pub server: String,
    /// Added, removed or changed.
    pub change: Change,
    /// Changes of `server_name`, `server_version`, `protocol_version` (for a changed server).
    pub identity: Vec<FieldChange>,
    /// Its tools added, removed or changed, by name (for an added or removed server, all of
    /// them, added or removed).
    pub tools: Vec<ToolDiff>,
}

/// One text field that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    /// The field's key in the manifest.
    pub field: &'static str,
    /// The old value.
    pub old: String,
    /// The new value.
    pub new: String,
}

/// What changed about one tool. For an added or removed tool only `tool` and `change` are
/// set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDiff {
    /// The tool's name.
    pub tool: String,
    /// Added, removed or changed.
    pub change: Change,
    /// A unified diff of the description (old, then new), hidden characters made visible
    /// (see [`visible`]), when it changed.
    pub description: Option<String>,
    /// JSON Pointers where the input schema changed (see [`schema::changed_pointers`]); empty
    /// when it did not.
    pub input_schema: Vec<String>,
    /// Old and new annotations, when they changed.
    pub annotations: Option<(Option<Value>, Option<Value>)>,
    /// Old and new output schema hashes, when they changed.
    pub output_schema: Option<(Option<String>, Option<String>)>,
}

impl ManifestDiff {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.components.is_empty() && self.servers.is_empty()
    }
}

/// What changed from `old` to `new`: components, servers, and per tool the description (a
/// unified line diff), the input schema (JSON Pointers), annotations and output schema.
pub fn diff(old: &Manifest, new: &Manifest) -> ManifestDiff {
    let mut result = ManifestDiff::default();
    for name in union(&old.components, &new.components) {
        let (a, b) = (old.components.get(name), new.components.get(name));
        if a != b {
            result.components.push(ComponentChange {
                name: name.clone(),
                old: a.cloned(),
                new: b.cloned(),
            });
        }
    }
    for name in union(&old.servers, &new.servers) {
        let server_diff = match (old.servers.get(name), new.servers.get(name)) {
            (Some(a), Some(b)) => {
                let identity = identity_changes(a, b);
                let tools = tool_diffs(a, b);
                if identity.is_empty() && tools.is_empty() {
                    continue;
                }
                ServerDiff {
                    server: name.clone(),
                    change: Change::Changed,
                    identity,
                    tools,
                }
            }
            (None, Some(b)) => whole_server(name, b, Change::Added),
            (Some(a), None) => whole_server(name, a, Change::Removed),
            (None, None) => continue,
        };
        result.servers.push(server_diff);
    }
    result
}

/// The keys of two maps, sorted, each once.
fn union<'m, V>(a: &'m BTreeMap<String, V>, b: &'m BTreeMap<String, V>) -> Vec<&'m String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys
}

fn whole_server(name: &str, server: &PinnedServer, change: Change) -> ServerDiff {
    ServerDiff {
        server: name.to_owned(),
        change,
        identity: Vec::new(),
        tools: server.tools.keys().map(|tool| bare(tool, change)).collect(),
    }
}

fn bare(tool: &str, change: Change) -> ToolDiff {
    ToolDiff {
        tool: tool.to_owned(),
        change,
        description: None,
        input_schema: Vec::new(),
        annotations: None,
        output_schema: None,
    }
}

fn identity_changes(a: &PinnedServer, b: &PinnedServer) -> Vec<FieldChange> {
    let refused = |server: &PinnedServer| {
        let names: Vec<String> = server.refused.keys().map(|t| format!("`{t}`")).collect();
        names.join(", ")
    };
    let (old_refused, new_refused) = (refused(a), refused(b));
    [
        ("server_name", &a.server_name, &b.server_name),
        ("server_version", &a.server_version, &b.server_version),
        ("protocol_version", &a.protocol_version, &b.protocol_version),
        ("refused", &old_refused, &new_refused),
    ]
    .into_iter()
    .filter(|(_, old, new)| old != new)
    .map(|(field, old, new)| FieldChange {
        field,
        old: old.clone(),
        new: new.clone(),
    })
    .collect()
}

fn tool_diffs(a: &PinnedServer, b: &PinnedServer) -> Vec<ToolDiff> {
    let mut diffs = Vec::new();
    for name in union(&a.tools, &b.tools) {
        match (a.tools.get(name), b.tools.get(name)) {
            (Some(old), Some(new)) => {
                if old == new {
                    continue;
                }
                let description = (old.description != new.description)
                    .then(|| text_diff(&old.description, &new.description));
                let mut input_schema = Vec::new();
                if old.input_schema != new.input_schema {
                    input_schema = schema::changed_pointers(&old.input_schema, &new.input_schema);
                    if input_schema.is_empty() {
                        input_schema.push(String::new());
                    }
                }
                diffs.push(ToolDiff {
                    tool: name.clone(),
                    change: Change::Changed,
                    description,
                    input_schema,
                    annotations: (old.annotations != new.annotations)
                        .then(|| (old.annotations.clone(), new.annotations.clone())),
                    output_schema: (old.output_schema_sha256 != new.output_schema_sha256).then(
                        || {
                            (
                                old.output_schema_sha256.clone(),
                                new.output_schema_sha256.clone(),
                            )
                        },
                    ),
                });
            }
            (None, Some(_)) => diffs.push(bare(name, Change::Added)),
            (Some(_), None) => diffs.push(bare(name, Change::Removed)),
            (None, None) => {}
        }
    }
    diffs
}

/// A unified line diff of two texts, each line escaped ([`text::lines`]). Each text gets a
/// final line feed first, so a description without one (the common case) diffs without a
/// "no newline" marker, and one that gained or lost a final line feed still shows.
fn text_diff(old: &str, new: &str) -> String {
    let old: String = text::lines(old).map(|line| line + "\n").collect();
    let new: String = text::lines(new).map(|line| line + "\n").collect();
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(DIFF_CONTEXT_LINES)
        .header("pinned", "listed")
        .to_string()
}

impl fmt::Display for ManifestDiff {
    /// One line per change, nested by server and tool; description diffs indented under
    /// their tool. `no changes` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "no changes");
        }
        for change in &self.components {
            let hash = |h: &Option<String>| h.clone().unwrap_or_else(|| String::from("(none)"));
            writeln!(
                f,
                "component `{}`: {} -> {}",
                visible(&change.name),
                hash(&change.old),
                hash(&change.new)
            )?;
        }
        for server in &self.servers {
            let name = visible(&server.server);
            match server.change {
                Change::Added => writeln!(f, "+ server `{name}` ({} tools)", server.tools.len())?,
                Change::Removed => {
                    writeln!(f, "- server `{name}` ({} tools)", server.tools.len())?;
                }
                Change::Changed => writeln!(f, "~ server `{name}`")?,
            }
            for field in &server.identity {
                writeln!(
                    f,
                    "    {}: `{}` -> `{}`",
                    field.field,
                    visible(&field.old),
                    visible(&field.new)
                )?;
            }
            for tool in &server.tools {
                write_tool(f, tool)?;
            }
        }
        Ok(())
    }
}

fn write_tool(f: &mut fmt::Formatter<'_>, tool: &ToolDiff) -> fmt::Result {
    let name = visible(&tool.tool);
    match tool.change {
        Change::Added => return writeln!(f, "    + tool `{name}`"),
        Change::Removed => return writeln!(f, "    - tool `{name}`"),
        Change::Changed => writeln!(f, "    ~ tool `{name}`")?,
    }
    if let Some(text) = &tool.description {
        writeln!(f, "        description changed:")?;
        for line in text.lines() {
            writeln!(f, "          {line}")?;
        }
    }
    if !tool.input_schema.is_empty() {
        let places: Vec<String> = tool
            .input_schema
            .iter()
            .map(|p| {
                if p.is_empty() {
                    String::from("the root")
                } else {
                    format!("`{}`", visible(p))
                }
            })
            .collect();
        writeln!(f, "        input schema changed at {}", places.join(", "))?;
    }
    if let Some((old, new)) = &tool.annotations {
        let text = |a: &Option<Value>| match a {
            Some(value) => format!("`{}`", visible(&canonical::to_canonical(value))),
            None => String::from("(none)"),
        };
        writeln!(f, "        annotations: {} -> {}", text(old), text(new))?;
    }
    if let Some((old, new)) = &tool.output_schema {
        let text = |h: &Option<String>| match h {
            Some(hash) => format!("`{hash}`"),
            None => String::from("(none)"),
        };
        writeln!(f, "        output schema: {} -> {}", text(old), text(new))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "manifest/tests.rs"]
mod tests;
