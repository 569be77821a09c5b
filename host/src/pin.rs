//! Pinning: start each configured server, list its tools, and record what it presents in a
//! [`Manifest`] for the operator to review (`toolward pin`).
//!
//! # Servers
//!
//! Each stdio server starts as [`stdio_spec`] describes: its command, arguments and
//! variables from the configuration, the variables it passes through, a `HOME` and a
//! `TMPDIR` of its own ([`server_home`], [`server_tmp`]: `<servers_dir>/<server>/home` and
//! `.../tmp`, created with mode `0700`, outside the state folder) unless the operator set the
//! variable for it or passes it through, and its confinement ([`crate::confine::plan`]).
//! Without a home, Node servers fall back to the operator's real home folder and write there.
//! A streamable HTTP server is reached at its
//! `url` with its `headers` ([`http_spec`]); it has no home folder. A server an embedder
//! handed in as an rmcp transport is connected through it, once: it has no home folder and
//! no confinement, and a second connection (a load after a pin through the same transport)
//! fails naming it. Load starts servers with
//! the same [`connect`], so pin and load see the same listing (the client also declares the
//! same capabilities, none: see [`crate::transport`]).
//!
//! # Failures
//!
//! A server that cannot be started or listed, or whose listing names a tool twice, fails
//! alone ([`PinOutcome::failures`]); the others are still pinned, and a failed server keeps
//! the entry it had in the existing manifest (if any), so writing the outcome never silently
//! drops a reviewed pin. A malformed tool (hidden characters, an entry over
//! `max_tool_bytes`, an `inputSchema` that is not an object) fails alone: the server's other
//! tools are pinned, and the refused tool is recorded with its reason in the server's
//! `refused` entry of the manifest ([`PinnedServer::refused`], [`PinOutcome::refused`]), so
//! `check` reports it as refused rather than as missing from the manifest. The pin as a whole
//! still fails: the CLI exits non-zero when [`PinOutcome::check`] is an error, after writing
//! the manifest and printing the report.

pub mod tool;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::{Config, Limits, ServerConfig, ServerTransport};
use crate::listing::{self, Listing, ListingBounds, ListingError};
use crate::manifest::{self, Manifest, ManifestDiff, PinnedServer, PinnedTool};
use crate::text::escape as visible;
use crate::transport::{
    HttpSpec, MAX_FRAME_BYTES, MAX_HTTP_BODY_BYTES, ServerIdentity, StdioSpec, TransportError,
    TransportLimits, Upstream,
};

/// Folder under each server's folder of `servers_dir` that is its `HOME`:
/// `<servers_dir>/<server>/home`.
pub const HOME_DIR: &str = "home";

/// Folder under each server's folder of `servers_dir` that is its `TMPDIR`:
/// `<servers_dir>/<server>/tmp`.
pub const TMP_DIR: &str = "tmp";

/// Bytes a JSON-RPC envelope (`jsonrpc`, `id`, the `result` key) may add around a
/// `tools/list` result: the frame limit and the HTTP body limit are at least `max_page_bytes`
/// plus this, so a page within its bound is never cut off by the transport first.
pub const FRAME_ENVELOPE_BYTES: u64 = 64 * 1024;

/// The variable that names a process's home folder.
const HOME: &str = "HOME";

/// The variable that names a process's folder for temporary files.
const TMPDIR: &str = "TMPDIR";

/// Why a server could not be pinned, or the pin as a whole failed. Each names the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// The server asked for is not in the configuration.
    #[error("server `{server}` is not in the configuration")]
    UnknownServer {
        /// The name asked for.
        server: String,
    },
    /// A stdio setting was asked of a server toolward does not start (reached over
    /// streamable HTTP, or handed in as a transport).
    #[error(
        "server `{server}` is not started by toolward (it is reached over streamable HTTP, or was handed in as a transport): it has no command to start"
    )]
    NotStdio {
        /// The server's name in the configuration.
        server: String,
    },
    /// The server's launcher (named by `confine.launcher` or `TOOLWARD_BIN`, or the running
    /// `toolward`) cannot be opened or failed its probe, so the server is not started rather
    /// than started unconfined.
    #[error("server `{server}` is {reason}")]
    Unconfinable {
        /// The server's name in the configuration.
        server: String,
        /// Why, naming the launcher.
        reason: String,
    },
    /// A path to give the server is not UTF-8.
    #[error("server `{server}` has a {what} that is not UTF-8: `{}`", path.display())]
    NotUnicode {
        /// The server's name in the configuration.
        server: String,
        /// `command` or `home folder`.
        what: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// The server's home folder could not be created.
    #[error("could not create the home folder `{}` of server `{server}`", path.display())]
    Home {
        /// The server's name in the configuration.
        server: String,
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The server could not be started.
    #[error("could not start server `{server}`")]
    Connect {
        /// The server's name in the configuration.
        server: String,
        /// Why (boxed: it is large, and rare).
        #[source]
        source: Box<TransportError>,
    },
    /// The server's listing was refused.
    #[error("could not pin the tools of server `{server}`")]
    Listing {
        /// The server's name in the configuration.
        server: String,
        /// Why (boxed: it is large, and rare).
        #[source]
        source: Box<ListingError>,
    },
    /// The listing names tools more than once.
    #[error("server `{server}` lists {} more than once", names(.tools))]
    DuplicateTools {
        /// The server's name in the configuration.
        server: String,
        /// The names (hidden characters made visible).
        tools: Vec<String>,
    },
    /// Some servers failed (see [`PinOutcome::failures`]).
    #[error("pin failed for {}", names(.servers))]
    ServersFailed {
        /// The servers that failed.
        servers: Vec<String>,
    },
    /// Every server was pinned, but some of their tools were refused (see
    /// [`PinOutcome::refused`]).
    #[error("pin refused {}", .tools.join(", "))]
    ToolsRefused {
        /// Each refused tool: `` `tool` of server `s` (why) ``.
        tools: Vec<String>,
    },
}

/// `` `a`, `b` `` for a list of names.
fn names(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|name| format!("`{name}`")).collect();
    quoted.join(", ")
}

/// What [`pin`] did.
#[derive(Debug)]
pub struct PinOutcome {
    /// The new manifest: every server pinned now, and for the others (a failed server,
    /// servers other than the one re-pinned, disabled servers) their entry of the existing
    /// manifest. The component hashes are the ones given to [`pin`].
    pub manifest: Manifest,
    /// What changed against the existing manifest (against an empty one when there is none).
    pub diff: ManifestDiff,
    /// Each server that could not be pinned, by name.
    pub failures: BTreeMap<String, PinError>,
    /// The tools refused in each server pinned now, by server: name (hidden characters made
    /// visible, or `#index`) and reason, as recorded in `PinnedServer::refused`.
    pub refused: BTreeMap<String, BTreeMap<String, String>>,
}

impl PinOutcome {
    /// Whether every server asked for was pinned with all its tools.
    pub fn is_complete(&self) -> bool {
        self.failures.is_empty() && self.refused.is_empty()
    }

    /// The pin as a whole: an error when any server failed, or any tool was refused.
    ///
    /// # Errors
    ///
    /// [`PinError::ServersFailed`] naming the failed servers, else
    /// [`PinError::ToolsRefused`] naming each refused tool, its server and why.
    pub fn check(&self) -> Result<(), PinError> {
        if !self.failures.is_empty() {
            return Err(PinError::ServersFailed {
                servers: self.failures.keys().cloned().collect(),
            });
        }
        if !self.refused.is_empty() {
            let tools = self
                .refused
                .iter()
                .flat_map(|(server, tools)| {
                    tools
                        .iter()
                        .map(move |(tool, why)| format!("`{tool}` of server `{server}` ({why})"))
                })
                .collect();
            return Err(PinError::ToolsRefused { tools });
        }
        Ok(())
    }
}

/// Pins the servers of `config`: each one (or only `only_server`, keeping every other entry
/// of `existing`), with `component_hashes` as the manifest's components. Servers are started
/// one after another, each closed once listed. See the module documentation for failures.
///
/// # Errors
///
/// [`PinError::UnknownServer`] when `only_server` is not a configured (enabled) server.
/// Every other failure is per server, in [`PinOutcome::failures`].
pub async fn pin(
    config: &Config,
    only_server: Option<&str>,
    existing: Option<&Manifest>,
    component_hashes: BTreeMap<String, String>,
) -> Result<PinOutcome, PinError> {
    if let Some(name) = only_server
        && !config.servers.contains_key(name)
    {
        return Err(PinError::UnknownServer {
            server: name.to_owned(),
        });
    }
    let empty = Manifest::default();
    let existing = existing.unwrap_or(&empty);
    let kept = |name: &String| only_server.is_some() || config.disabled_servers.contains(name);
    let mut servers: BTreeMap<String, PinnedServer> = existing
        .servers
        .iter()
        .filter(|(name, _)| kept(name))
        .map(|(name, server)| (name.clone(), server.clone()))
        .collect();
    let mut failures = BTreeMap::new();
    let mut refused = BTreeMap::new();
    for (name, server) in &config.servers {
        if only_server.is_some_and(|only| only != name) {
            continue;
        }
        match pin_one(config, server).await {
            Ok(pinned) => {
                if !pinned.refused.is_empty() {
                    refused.insert(name.clone(), pinned.refused.clone());
                }
                servers.insert(name.clone(), pinned);
            }
            Err(error) => {
                if let Some(old) = existing.servers.get(name) {
                    servers.insert(name.clone(), old.clone());
                }
                failures.insert(name.clone(), error);
            }
        }
    }
    let manifest = Manifest {
        components: component_hashes,
        servers,
    };
    let diff = manifest::diff(existing, &manifest);
    Ok(PinOutcome {
        manifest,
        diff,
        failures,
        refused,
    })
}

/// Starts, lists, closes and pins one server.
async fn pin_one(config: &Config, server: &ServerConfig) -> Result<PinnedServer, PinError> {
    let upstream = connect(config, server).await?;
    let listing = listing::list_tools(&upstream, &ListingBounds::from(&server.limits)).await;
    let identity = upstream.identity().clone();
    upstream.close().await;
    let listing = listing.map_err(|source| PinError::Listing {
        server: server.name.clone(),
        source: Box::new(source),
    })?;
    pin_server(listing, &identity)
}

/// The pinned entry of a server from its listing and its `initialize` answer: its
/// well-formed tools pinned, its malformed ones in [`PinnedServer::refused`] with the reason.
///
/// # Errors
///
/// [`PinError::DuplicateTools`] when the listing names a tool more than once, listing every
/// such name.
pub fn pin_server(listing: Listing, identity: &ServerIdentity) -> Result<PinnedServer, PinError> {
    if !listing.duplicates.is_empty() {
        return Err(PinError::DuplicateTools {
            server: listing.server,
            tools: listing
                .duplicates
                .iter()
                .map(|name| visible(name))
                .collect(),
        });
    }
    let refused = listing
        .malformed
        .into_iter()
        .map(|(name, why)| (visible(&name), why))
        .collect();
    // Owned: each tool's description and schema move into the pin (copying them was an
    // eighth of a pin of many tools).
    let tools = listing
        .tools
        .into_iter()
        .map(|tool| {
            let pinned = PinnedTool {
                description: tool.description,
                description_sha256: tool.description_sha256,
                input_schema: tool.input_schema,
                input_schema_sha256: tool.input_schema_sha256,
                output_schema_sha256: tool.output_schema_sha256,
                annotations: tool.annotations_raw,
            };
            (tool.name, pinned)
        })
        .collect();
    Ok(PinnedServer {
        server_name: identity.name.clone(),
        server_version: identity.version.clone(),
        protocol_version: identity.protocol_version.clone(),
        tools,
        refused,
    })
}

/// The `HOME` toolward gives `server`: `<servers_dir>/<server>/home` (see [`HOME_DIR`] and
/// [`Config::servers_dir`], outside the state folder), or `None` for an HTTP server, or when
/// the operator sets `HOME` in the server's `env` or names it in `pass_env`.
/// Server names are `[A-Za-z0-9_-]+`, so the name is one plain path component.
pub fn server_home(config: &Config, server: &ServerConfig) -> Option<PathBuf> {
    server_folder(config, server, HOME, HOME_DIR)
}

/// The `TMPDIR` toolward gives `server`: `<servers_dir>/<server>/tmp` (see [`TMP_DIR`]), or
/// `None` for an HTTP server, or when the operator sets `TMPDIR` in the server's `env` or
/// names it in `pass_env`.
pub fn server_tmp(config: &Config, server: &ServerConfig) -> Option<PathBuf> {
    server_folder(config, server, TMPDIR, TMP_DIR)
}

fn server_folder(
    config: &Config,
    server: &ServerConfig,
    variable: &str,
    folder: &str,
) -> Option<PathBuf> {
    let set = match &server.transport {
        ServerTransport::Stdio { env, .. } => env.contains_key(variable),
        ServerTransport::Http { .. } | ServerTransport::Handed(_) => true,
    };
    if set || server.pass_env.iter().any(|name| name == variable) {
        return None;
    }
    Some(config.servers_dir.as_ref()?.join(&server.name).join(folder))
}

/// How to start the stdio server `server`: its command, arguments and variables, the
/// variables it passes through, `HOME` and `TMPDIR` set to [`server_home`] and [`server_tmp`]
/// (made absolute) when they are `Some`, the config's folder ([`Config::base_dir`]) as
/// working directory, and its confinement when [`crate::confine::plan`] confines it.
/// Creates nothing: [`connect`] creates the home folder.
///
/// # Errors
///
/// [`PinError::NotStdio`] for an HTTP server; [`PinError::NotUnicode`] when the
/// command or the home folder is not UTF-8; [`PinError::Home`] when the home folder cannot
/// be made absolute; [`PinError::Unconfinable`] when its launcher cannot confine it.
pub fn stdio_spec(config: &Config, server: &ServerConfig) -> Result<StdioSpec, PinError> {
    let ServerTransport::Stdio { command, args, env } = &server.transport else {
        return Err(PinError::NotStdio {
            server: server.name.clone(),
        });
    };
    let not_unicode = |what, path: &Path| PinError::NotUnicode {
        server: server.name.clone(),
        what,
        path: path.to_path_buf(),
    };
    let mut env = env.clone();
    let folders = [
        (HOME, server_home(config, server)),
        (TMPDIR, server_tmp(config, server)),
    ];
    for (variable, folder) in folders {
        let Some(folder) = folder else { continue };
        let folder = std::path::absolute(&folder).map_err(|source| PinError::Home {
            server: server.name.clone(),
            path: folder.clone(),
            source,
        })?;
        let text = folder
            .to_str()
            .ok_or_else(|| not_unicode("home folder", &folder))?;
        env.insert(variable.to_owned(), text.to_owned());
    }
    Ok(StdioSpec {
        command: command
            .to_str()
            .ok_or_else(|| not_unicode("command", command))?
            .to_owned(),
        args: args.clone(),
        env,
        pass_env: server.pass_env.clone(),
        // Relative paths in `args` (a sandbox folder, a script) mean what they mean beside
        // the config file, wherever toolward was started from.
        cwd: Some(config.base_dir.clone()),
        confine: match crate::confine::plan(config, server) {
            Some(crate::confine::Plan::Refused { reason }) => {
                return Err(PinError::Unconfinable {
                    server: server.name.clone(),
                    reason,
                });
            }
            plan => plan.and_then(|plan| plan.confinement().cloned()),
        },
    })
}

/// How to reach the HTTP server `server`: its `url`, `headers` and extra roots
/// (`oauth.ca_file`), or `None` for a stdio server.
// Without `http-upstream` the spec has no `oauth` field, and the update fills nothing.
#[cfg_attr(not(feature = "http-upstream"), allow(clippy::needless_update))]
pub fn http_spec(server: &ServerConfig) -> Option<HttpSpec> {
    match &server.transport {
        ServerTransport::Http {
            url,
            headers,
            oauth,
        } => Some(HttpSpec {
            url: url.clone(),
            headers: headers.clone(),
            ca_file: oauth.ca_file.clone(),
            ..HttpSpec::default()
        }),
        ServerTransport::Stdio { .. } | ServerTransport::Handed(_) => None,
    }
}

/// `spec` with the server's OAuth grant (the operator's, or `principal`'s), if it has one
/// (see [`crate::oauth`]): read from the grant store at each connection, so a restart picks
/// up a new `auth login`. `grants` is the store, opened here when `None`.
///
/// # Errors
/// [`TransportError::SignIn`] when the grant is there but cannot be used (altered, or issued
/// for another URL), or the store cannot be opened; for a principal, also when it has no
/// grant: a principal's session never goes out without its own.
#[cfg(feature = "http-upstream")]
async fn with_grant(
    config: &Config,
    server: &ServerConfig,
    mut spec: HttpSpec,
    grants: Option<&std::sync::Arc<crate::oauth::GrantStore>>,
    principal: Option<&str>,
) -> Result<HttpSpec, TransportError> {
    let sign_in = |detail: String| TransportError::SignIn {
        server: server.name.clone(),
        principal: principal.map(str::to_owned),
        detail,
    };
    let unusable = |error: crate::oauth::OAuthError| match error {
        crate::oauth::OAuthError::NotSignedIn { reason, .. } => sign_in(reason),
        other => sign_in(format!(
            "its grant cannot be used: {}",
            crate::text::error_chain(&other)
        )),
    };
    if crate::oauth::has_own_authorization(server) {
        // The operator's header goes with every request; a principal's session would carry
        // it too, so there is none (the config refuses `per_principal` with the header).
        return match principal {
            None => Ok(spec),
            Some(_) => Err(sign_in(String::from(
                "the server has an `Authorization` header of the operator's, so no principal's grant is used",
            ))),
        };
    }
    let opened;
    let grants = match grants {
        Some(grants) => grants,
        None => {
            opened = std::sync::Arc::new(
                crate::oauth::GrantStore::open(config)
                    .await
                    .map_err(unusable)?,
            );
            &opened
        }
    };
    spec.oauth = crate::oauth::Credentials::load(grants, server, principal)
        .await
        .map_err(unusable)?;
    if let (Some(principal), None) = (principal, &spec.oauth) {
        return Err(sign_in(format!(
            "principal `{}` has no grant for it",
            crate::text::escape(principal)
        )));
    }
    Ok(spec)
}

#[cfg(not(feature = "http-upstream"))]
async fn with_grant(
    _config: &Config,
    _server: &ServerConfig,
    spec: HttpSpec,
) -> Result<HttpSpec, TransportError> {
    Ok(spec)
}

/// The transport limits of a server from its config limits: its start and request timeouts,
/// a frame limit of [`MAX_FRAME_BYTES`] and an HTTP body limit of [`MAX_HTTP_BODY_BYTES`],
/// each raised to `max_page_bytes` plus [`FRAME_ENVELOPE_BYTES`] when that is more.
pub fn transport_limits(limits: &Limits) -> TransportLimits {
    let page_frame = usize::try_from(limits.max_page_bytes.saturating_add(FRAME_ENVELOPE_BYTES))
        .unwrap_or(usize::MAX);
    TransportLimits {
        start_timeout: limits.start_timeout(),
        request_timeout: limits.request_timeout(),
        max_frame_bytes: page_frame.max(MAX_FRAME_BYTES),
        max_http_body_bytes: page_frame.max(MAX_HTTP_BODY_BYTES),
        ..TransportLimits::default()
    }
}

/// Creates the server's home and temporary folders (see [`server_home`], [`server_tmp`]) if
/// it has them, with the folders of `servers_dir` above them, with mode `0700` on Unix (also
/// when they already existed: they may hold the server's credentials). A stdio server's own
/// folder (`<servers_dir>/<server>`) is made even when both variables are the operator's:
/// confinement grants it.
///
/// # Errors
///
/// [`PinError::Home`].
pub fn create_home(config: &Config, server: &ServerConfig) -> Result<(), PinError> {
    if !matches!(server.transport, ServerTransport::Stdio { .. }) {
        return Ok(());
    }
    // Without a servers' folder (an embedder that asked for none), nothing is made.
    let Some(servers_dir) = &config.servers_dir else {
        return Ok(());
    };
    let own = servers_dir.join(&server.name);
    let folders = [
        Some(servers_dir.clone()),
        Some(own),
        server_home(config, server),
        server_tmp(config, server),
    ];
    for folder in folders.into_iter().flatten() {
        create_private(&folder).map_err(|source| PinError::Home {
            server: server.name.clone(),
            path: folder.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Creates `folder` (and its missing parents) and sets it to mode `0700` on Unix. The folder
/// itself is never reached through a link: its server could have put one there (it may write
/// its own folder), and toolward, unconfined, would `chmod` what the link leads to (found by
/// an attack: a server's `home` linked to `/tmp` made `/tmp` mode 0700 at its restart). A
/// link or file at the name is removed and the folder made anew; the mode is set on the
/// folder opened without following a link.
fn create_private(folder: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        if let Some(parent) = folder.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        match std::fs::symlink_metadata(folder) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => std::fs::remove_file(folder)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match std::fs::DirBuilder::new().mode(0o700).create(folder) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(folder)?
            .set_permissions(std::fs::Permissions::from_mode(0o700))?;
    }
    #[cfg(not(unix))]
    std::fs::DirBuilder::new().recursive(true).create(folder)?;
    Ok(())
}

/// Starts or reaches the server `server` of `config` as pin and load do, with
/// [`transport_limits`]: a stdio server with [`stdio_spec`], [`create_home`], then
/// [`Upstream::connect_stdio`]; an HTTP server with [`http_spec`], the operator's grant if it
/// has one, and [`Upstream::connect_http`].
///
/// # Errors
///
/// Those of [`stdio_spec`] and [`create_home`]; [`PinError::Connect`] when the server does
/// not start or cannot be reached.
pub async fn connect(config: &Config, server: &ServerConfig) -> Result<Upstream, PinError> {
    let limits = transport_limits(&server.limits);
    if let ServerTransport::Handed(handed) = &server.transport {
        return Upstream::connect_handed(&server.name, handed, &limits)
            .await
            .map_err(|source| PinError::Connect {
                server: server.name.clone(),
                source: Box::new(source),
            });
    }
    let connected = match http_spec(server) {
        #[cfg(feature = "http-upstream")]
        Some(spec) => match with_grant(config, server, spec, None, None).await {
            Ok(spec) => Upstream::connect_http(&server.name, &spec, &limits).await,
            Err(error) => Err(error),
        },
        #[cfg(not(feature = "http-upstream"))]
        Some(spec) => match with_grant(config, server, spec).await {
            Ok(spec) => Upstream::connect_http(&server.name, &spec, &limits).await,
            Err(error) => Err(error),
        },
        None => {
            let spec = stdio_spec(config, server)?;
            create_home(config, server)?;
            Upstream::connect_stdio(&server.name, &spec, &limits).await
        }
    };
    connected.map_err(|source| PinError::Connect {
        server: server.name.clone(),
        source: Box::new(source),
    })
}

/// Opens principal `principal`'s own session with the HTTP server `server` (one whose calls
/// go out under each principal's grant, `oauth.per_principal`): its `initialize` and every
/// request after it carry that principal's token from `grants`, never the operator's nor the
/// client's. Nothing is sent without the principal's grant.
///
/// # Errors
///
/// [`PinError::Connect`]: with [`TransportError::SignIn`] when the principal has no usable
/// grant, or the server refuses it; [`TransportError::InvalidHttpSpec`] for a stdio server.
#[cfg(feature = "http-upstream")]
pub async fn connect_principal(
    config: &Config,
    server: &ServerConfig,
    grants: &std::sync::Arc<crate::oauth::GrantStore>,
    principal: &str,
) -> Result<Upstream, PinError> {
    let limits = transport_limits(&server.limits);
    let connected = match http_spec(server) {
        Some(spec) => match with_grant(config, server, spec, Some(grants), Some(principal)).await {
            Ok(spec) => Upstream::connect_http(&server.name, &spec, &limits).await,
            Err(error) => Err(error),
        },
        None => Err(TransportError::InvalidHttpSpec {
            server: server.name.clone(),
            detail: String::from("only an HTTP server has principals' grants"),
        }),
    };
    connected.map_err(|source| PinError::Connect {
        server: server.name.clone(),
        source: Box::new(source),
    })
}

#[cfg(test)]
#[path = "pin/tests.rs"]
mod tests;
