//! The web console (`toolward console`): the held calls of the state folder's queue (or a
//! fleet's database) answered from a browser, the audit chain read there, and the gateways'
//! servers and refused tools, a changed tool accepted from its diff, on loopback by default.
//!
//! # Contract
//!
//! What the console promises, each checked by a test (`tests/all/console.rs`, and in a real
//! browser by `tests/clients/test_console_browser.py`):
//!
//! 1. **Held calls, live.** `/approvals` lists every entry of the queue ([`list_queue`]) as
//!    `toolward approvals list` shows it: every argument by [`display_arguments`]'s rules
//!    (every name, long values cut with their length stated, hidden characters escaped with
//!    [`text::escape`]), the tool, server, effect, reason, pins, principal and session. The
//!    page's script ([`SCRIPT_PATH`]) asks for the list again every [`POLL_INTERVAL`], so a
//!    call held while the page is open shows within about a second, without a reload.
//! 2. **Answers go the queue's one way.** Approve and deny are [`answer_as`], the path of
//!    `toolward approvals approve|deny`: the entry checked (MAC, arguments hash, its call
//!    still waiting), the answer MAC'd and bound to the call, placed so that the first answer
//!    of any channel wins. The answerer is the signed-in user (the name of the token used)
//!    through [`Channel::Console`]; the waiting process records it in the audit chain's
//!    `approval-answered` record.
//! 3. **The audit.** `/audit` shows the log's records that pass the filters of
//!    `toolward audit show` (since, until, server, tool, principal, decision, call), the
//!    newest [`MAX_AUDIT_ROWS`] first, each with its record (its first [`MAX_DETAIL_BYTES`]); and the chain's state
//!    against its head, checked when the console starts and again every
//!    [`CHAIN_CHECK_INTERVAL`] (a break is logged when it is first seen, so it is noticed
//!    while nobody looks).
//! 4. **Sign-in.** A user signs in with one of the listener's named tokens (`listen.tokens`,
//!    or the generated token file when none are named); the user is the token's name.
//!    Tokens are compared by SHA-256 in time independent of where they differ. Sign-in makes
//!    a new session id (a session cookie from before is never taken over: no fixation); the
//!    session cookie is `HttpOnly`, `SameSite=Strict`, `Path=/`, and `Secure` when the
//!    console is reached over https (`public_origins`). A session lasts [`SESSION_TTL`].
//!    With `console.oidc`, a user may also sign in with an OpenID provider ([`oidc`]: the
//!    authorization code with PKCE `S256`, the flow bound to the browser by the console
//!    origin's storage rather than a cookie, the ID token checked); the user is its
//!    `user_claim`, the session also keeps its `groups_claim` (at most [`MAX_GROUPS`] of at
//!    most [`MAX_GROUP_CHARS`] characters), and the session is made as a token's is.
//! 5. **A cookie alone is not a session.** Browsers send a host's cookies to every port of
//!    it, so a page the user opens on another port of 127.0.0.1 (a port a hostile server
//!    bound) receives the session cookie. Each session therefore also has a key, given once,
//!    in the answer to the sign-in, which the page's script keeps in the console origin's
//!    own storage (`localStorage`, kept apart by port) and sends in [`KEY_HEADER`] with
//!    every request. Without the key a page is an empty shell the script fills by asking
//!    again with it; with a wrong key, or on a change or the live list without one, the
//!    answer is 401 or 403 and shows nothing. The key is also what a change needs against
//!    cross-site requests: a page of another origin can neither read it nor send the header
//!    without the console allowing it (it never does).
//! 6. **Browser safety.** Every request's `Host` must name the console (its bound address
//!    with the loopback names, or a configured public origin) and an `Origin`, when sent,
//!    must be the console's own, else 403 (DNS rebinding, cross-site requests). A `POST`
//!    must carry an allowed `Origin` and the session's key (sign-in: the login form's
//!    nonce, also in a cookie). Every response has a Content-Security-Policy without inline
//!    script (`default-src 'self'`, `frame-ancestors 'none'`), `X-Frame-Options: DENY`,
//!    `X-Content-Type-Options: nosniff`, `Referrer-Policy: same-origin` and
//!    `Cache-Control: no-store`. Pages are rendered by minijinja with autoescaping, and every
//!    string a server, a client or a policy wrote is escaped with [`text::escape`] first: a
//!    tool's description or an argument is attacker input.
//!
//! 7. **Notifications** ([`notify`]): each call newly held is posted, within
//!    [`NOTIFY_POLL_INTERVAL`] of its hold, to every target: a JSON webhook signed with
//!    HMAC-SHA256, or a Slack-compatible message with its markup escaped; https only (http to
//!    a loopback IP for a local receiver), private addresses refused unless allowed.
//!
//! 8. **Tools and servers.** `/tools` shows every gateway's published state
//!    ([`gateways`]): servers, restarts, confinement, tools refused at load with their
//!    reason and diff, escaped as text; a gateway whose lock is free is shown as gone.
//!    Accept on a refused tool that is pinned does what `toolward pin --tool` does
//!    ([`tool_change`]) against [`ConsoleSettings::config`]'s manifest, a `POST` with the
//!    guards of 6, recorded first as a `pin-accepted` audit record naming the user; the page
//!    says the gateway must restart (it loads its pins at start). Elsewhere it shows the
//!    command to run.
//!
//! 9. **A fleet's store.** With [`ConsoleSettings::database`] (`store.postgres`), 1 to 8 hold
//!    over the database instead of the state folder: the held calls of every gateway,
//!    answered as the signed-in user with the channel and groups kept in the row (so the
//!    waiting gateway judges and records them as on one machine); the database's chain
//!    checked from its first record against its head row (and records past it counted); the
//!    console's own records kept in its machine's log, not the fleet's chain; the gateways' rows of `toolward_gateways`, one not written for
//!    [`GONE_AFTER`] shown as gone. Accept shows the command to run.
//!
//! Not here yet (issue 32): TLS built in (run it behind a TLS proxy and name the proxy's
//! origin in `public_origins`).
//!
//! [`GONE_AFTER`]: crate::store::postgres::gateways::GONE_AFTER
//!
//! [`NOTIFY_POLL_INTERVAL`]: notify::NOTIFY_POLL_INTERVAL
//! [`gateways`]: crate::gateways
//! [`tool_change`]: crate::pin::tool::tool_change
//! [`oidc`]: crate::config::ConsoleOidcConfig
//!
//! [`list_queue`]: crate::approval::list_queue
//! [`display_arguments`]: crate::approval::display_arguments
//! [`answer_as`]: crate::approval::answer_as
//! [`Channel::Console`]: crate::identity::Channel::Console
//! [`text::escape`]: crate::text::escape

mod guard;
pub mod notify;
mod oidc;
mod pages;
mod session;
mod store;
mod tools;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http_server::{AcceptLimits, accept_loop};

pub use notify::{NotifyFormat, NotifySettings, NotifyTarget};
pub use oidc::{CALLBACK_PATH as OIDC_CALLBACK_PATH, MAX_ID_TOKEN_AGE};
pub use pages::{ChainState, MAX_REFUSALS_RECORDED, MAX_SIGN_INS_PER_MINUTE};

/// The console's session cookie.
pub const SESSION_COOKIE: &str = "toolward_console";

/// The header that carries the session's key with every request of a signed-in page (see
/// the module's contract, 5).
pub const KEY_HEADER: &str = "x-toolward-key";

/// The header the approvals page's script sends with the calls it shows; when they are
/// still the held calls, the answer is 204 and nothing is rendered.
pub const SHOWN_HEADER: &str = "x-toolward-shown";

/// The cookie that carries the sign-in form's nonce until the form is sent.
pub const LOGIN_COOKIE: &str = "toolward_console_login";

/// How long a session lasts after sign-in: 12 hours, a working day; then sign in again.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Most sessions one user keeps at once: 16; past it that user's oldest is ended, so signing
/// in many times ends nobody else's session. Sessions are in memory only.
pub const MAX_SESSIONS_PER_USER: usize = 16;

/// How long a sign-in form stays valid: 10 minutes. A form's nonce is the console's MAC of
/// when it was made, so no table of them can be flooded out.
pub const LOGIN_NONCE_TTL: Duration = Duration::from_secs(600);


/// Largest request head read, in bytes: 1 MiB. A browser sends the console every cookie of
/// its host, whatever the port, and a page on another port can set up to about 180 of 4 KB
/// each; past hyper's default (about 400 KB) every page of the console would be refused.
pub const MAX_HEAD_BYTES: usize = 1024 * 1024;

/// Largest form body read, in bytes: 16 KiB, far more than a token, a CSRF token and a
/// deny reason.
pub const MAX_FORM_BYTES: usize = 16 * 1024;

/// Most audit records one page shows, the newest first: 500.
pub const MAX_AUDIT_ROWS: usize = 500;

/// Most bytes of one record's detail a page shows: 8 KiB; past it the page says how many more
/// there are and the command that shows the whole record. So 500 rows render at most about
/// 4 MB however large the calls' arguments were.
pub const MAX_DETAIL_BYTES: usize = 8 * 1024;

/// How often the chain is checked against its head while the console runs: 30 seconds.
pub const CHAIN_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// How often the approvals page asks for the held calls again: 1 second (issue 32: a call
/// shows within a second of being held).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Where the page's one script is served.
pub const SCRIPT_PATH: &str = "/static/console.js";

/// Most groups kept from an ID token's `groups_claim`: 64; the rest are left out (and
/// logged). Groups name approvers, so one left out takes a right away, never gives one.
pub const MAX_GROUPS: usize = 64;

/// Longest group name kept from an ID token, in characters: 256; a longer one is left out.
pub const MAX_GROUP_CHARS: usize = 256;

/// Most characters of a deny reason kept: 1024.
pub const MAX_REASON_CHARS: usize = 1024;

/// What `toolward console` serves, and for whom.
#[derive(Clone)]
pub struct ConsoleSettings {
    /// The address to bind (loopback unless `allow_non_loopback`).
    pub addr: SocketAddr,
    /// Accept an address that is not loopback.
    pub allow_non_loopback: bool,
    /// The state folder: its approvals queue, its audit head.
    pub state_dir: PathBuf,
    /// The audit log (`audit.file`).
    pub audit_file: PathBuf,
    /// A fleet's database (`store.postgres`): held calls, the audit chain and the gateways'
    /// states are read there, and answers written there, instead of `state_dir` and
    /// `audit_file`; the console's own records still go to `audit_file`.
    #[cfg(feature = "postgres")]
    pub database: Option<crate::store::postgres::PgStore>,
    /// Who may sign in: token by user name (the listener's named tokens).
    pub users: BTreeMap<String, String>,
    /// Origins the console is also reached at (`https://console.example`, through a TLS
    /// proxy), lowercase, without a trailing slash. With an https origin, cookies are
    /// `Secure`.
    pub public_origins: Vec<String>,
    /// Time a client has to send a request's head.
    pub header_read_timeout: Duration,
    /// Connections open at once; past it new ones wait to be accepted.
    pub max_connections: usize,
    /// Who is told of held calls ([`notify`]); no targets, nobody.
    pub notify: NotifySettings,
    /// Who may answer which held calls (the config's `approvers`): each user sees and
    /// answers only those, and reads the audit of only their servers. Without rules, every
    /// user everything.
    pub approvers: crate::identity::Approvers,
    /// The config the console was started with: "accept" of a changed tool on the tools
    /// page writes its manifest, as `toolward pin --tool` does. `None`, or a config of
    /// `store.postgres`: the page shows the command to run where the config is kept.
    pub config: Option<crate::config::Config>,
    /// Sign-in with an OpenID provider (`console.oidc`), besides the tokens; `None`: the
    /// tokens only. Its redirect URI is [`OIDC_CALLBACK_PATH`] on the first of
    /// `public_origins`, else on the bound address.
    pub oidc: Option<crate::config::ConsoleOidcConfig>,
}

impl std::fmt::Debug for ConsoleSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSettings")
            .field("addr", &self.addr)
            .field("allow_non_loopback", &self.allow_non_loopback)
            .field("state_dir", &self.state_dir)
            .field("audit_file", &self.audit_file)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("public_origins", &self.public_origins)
            .field("oidc", &self.oidc)
            .finish_non_exhaustive()
    }
}

/// Errors of `toolward console`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// The address is not loopback and that was not allowed.
    #[error(
        "`{addr}` is not a loopback address: the console would be reachable from the network; bind 127.0.0.1 or ::1, or say so with --listen-non-loopback"
    )]
    NotLoopback {
        /// The address.
        addr: SocketAddr,
    },
    /// Binding failed.
    #[error("cannot listen on `{addr}`: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// The same port of the other loopback address is another program's.
    #[error(
        "`{addr}` is taken by another program: a browser may send `localhost` there, where that program would see the token typed in; stop it, or start the console on another port"
    )]
    OtherLoopbackTaken {
        /// The other loopback address and the port.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// The fleet's database cannot be opened.
    #[error("the console cannot open the PostgreSQL store {store}: {reason}")]
    Store {
        /// The store, as named in messages (no user or password).
        store: String,
        /// Why.
        reason: String,
    },
    /// Nobody could sign in.
    #[error(
        "the console has no user: name tokens in `listen.tokens` of the config (each token's name is a user)"
    )]
    NoUsers,
    /// A public origin is not `http://host[:port]` or `https://host[:port]`.
    #[error("public origin `{origin}` is not `https://HOST[:PORT]` or `http://HOST[:PORT]`")]
    BadOrigin {
        /// The origin as given.
        origin: String,
    },
    /// The OpenID provider of `console.oidc` could not be used.
    #[error("`console.oidc`: issuer `{issuer}`: {reason}")]
    Oidc {
        /// The configured issuer.
        issuer: String,
        /// What failed (the discovery document, the keys).
        reason: String,
    },
    /// A template failed to load (a bug: they are compiled in).
    #[error("the console's page templates: {0}")]
    Templates(String),
}

/// A running console: its address, and how to stop it.
#[derive(Debug)]
pub struct Console {
    /// The bound address (the port chosen when the setting gave 0).
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Console {
    /// The console's URL on its bound address.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Stops accepting and waits for the accept loop to end.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Binds `settings.addr` and serves the console until [`Console::stop`]; checks the audit
/// chain at once and every [`CHAIN_CHECK_INTERVAL`].
///
/// # Errors
/// [`ConsoleError::NotLoopback`], [`ConsoleError::Bind`], [`ConsoleError::NoUsers`],
/// [`ConsoleError::BadOrigin`], [`ConsoleError::Oidc`] (the provider's discovery document or
/// keys cannot be read: the console does not start without the sign-in it was given).
pub async fn serve_console(settings: ConsoleSettings) -> Result<Console, ConsoleError> {
    if !settings.addr.ip().is_loopback() && !settings.allow_non_loopback {
        return Err(ConsoleError::NotLoopback {
            addr: settings.addr,
        });
    }
    if settings.users.is_empty() {
        return Err(ConsoleError::NoUsers);
    }
    let listener = TcpListener::bind(settings.addr)
        .await
        .map_err(|source| ConsoleError::Bind {
            addr: settings.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ConsoleError::Bind {
        addr: settings.addr,
        source,
    })?;
    let twin = hold_other_loopback(addr).await?;
    let guard = guard::Guard::new(addr, &settings.public_origins)?;
    let pages = pages::Pages::new()?;
    let oidc = match &settings.oidc {
        None => None,
        Some(config) => {
            let origin = settings
                .public_origins
                .first()
                .map(|origin| origin.trim_end_matches('/').to_ascii_lowercase())
                .unwrap_or_else(|| format!("http://{addr}"));
            let redirect_uri = format!("{origin}{}", oidc::CALLBACK_PATH);
            let reserved = settings.users.keys().cloned().collect();
            let provider = oidc::Provider::discover(config, &redirect_uri, reserved)
                .await
                .map_err(|reason| ConsoleError::Oidc {
                    issuer: crate::text::escape(&config.issuer),
                    reason,
                })?;
            tracing::info!(
                "console: OpenID Connect sign-in with `{}`, redirect URI `{}`",
                crate::text::escape(&config.issuer),
                crate::text::escape(&redirect_uri)
            );
            Some(provider)
        }
    };
    let store = Arc::new(open_store(&settings).await?);
    let chain = Arc::new(Mutex::new(ChainState::unchecked()));
    let shared = Arc::new(pages::Shared {
        guard,
        pages,
        sessions: session::Sessions::new(&settings.users),
        oidc,
        store: Arc::clone(&store),
        chain: Arc::clone(&chain),
        approvers: settings.approvers.clone(),
        tools: tools::Tools::new(settings.config.clone()),
        refusals: pages::PerMinute::default(),
        sign_ins: pages::PerMinute::default(),
    });
    let stop = CancellationToken::new();
    let mut notify = settings.notify.clone();
    if notify.link_base.is_empty() {
        notify.link_base = format!("http://{addr}");
    }
    tokio::spawn(check_chain_forever(
        Arc::clone(&store),
        chain,
        notify.clone(),
        stop.child_token(),
    ));
    tokio::spawn(notify::watch(store, notify, stop.child_token()));
    let accept = AcceptLimits {
        max_connections: settings.max_connections,
        header_read_timeout: settings.header_read_timeout,
        setting: "listen.max_connections",
        max_head_bytes: Some(MAX_HEAD_BYTES),
    };
    let handle = move |request| {
        let shared = Arc::clone(&shared);
        async move { pages::handle(&shared, request).await }
    };
    if let Some(twin) = twin {
        // Served too, so the port is held; its `Host` is not the console's, so a browser
        // that went there (`localhost`) is told to open the address the console printed.
        tokio::spawn(accept_loop(twin, accept, handle.clone(), stop.clone()));
    }
    let task = tokio::spawn(accept_loop(listener, accept, handle, stop.clone()));
    Ok(Console { addr, stop, task })
}

/// The store `settings` name: the fleet's database, each part's schema version checked, or
/// the state folder.
async fn open_store(settings: &ConsoleSettings) -> Result<store::Store, ConsoleError> {
    #[cfg(feature = "postgres")]
    if let Some(database) = &settings.database {
        let name = database.name().to_owned();
        return store::Database::open(
            database.clone(),
            settings.state_dir.clone(),
            settings.audit_file.clone(),
        )
            .await
            .map(|database| store::Store::Database(Box::new(database)))
            .map_err(|reason| ConsoleError::Store { store: name, reason });
    }
    Ok(store::Store::Folder {
        state_dir: settings.state_dir.clone(),
        audit_file: settings.audit_file.clone(),
    })
}

/// The other loopback address's same port, held while the console runs: a browser may send
/// `localhost` to `[::1]` while the console is on `127.0.0.1`, and a program (a hostile server)
/// bound there would pass its requests through and keep the token typed in (an outside attack
/// did). Taken by another program: the console does not start. No IPv6 (or IPv4) loopback on
/// the machine: nothing to hold.
async fn hold_other_loopback(addr: SocketAddr) -> Result<Option<TcpListener>, ConsoleError> {
    let other: std::net::IpAddr = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4 == std::net::Ipv4Addr::LOCALHOST => {
            std::net::Ipv6Addr::LOCALHOST.into()
        }
        std::net::IpAddr::V6(v6) if v6 == std::net::Ipv6Addr::LOCALHOST => {
            std::net::Ipv4Addr::LOCALHOST.into()
        }
        _ => return Ok(None),
    };
    let twin = SocketAddr::new(other, addr.port());
    match TcpListener::bind(twin).await {
        Ok(listener) => Ok(Some(listener)),
        Err(source) if source.kind() == std::io::ErrorKind::AddrInUse => {
            Err(ConsoleError::OtherLoopbackTaken { addr: twin, source })
        }
        Err(error) => {
            tracing::debug!("console: `{twin}` not held: {error}");
            Ok(None)
        }
    }
}

/// Checks the chain against its head now and every [`CHAIN_CHECK_INTERVAL`], keeping the
/// result for the audit page; warns when a check finds a problem the one before did not.
async fn check_chain_forever(
    store: Arc<store::Store>,
    chain: Arc<Mutex<ChainState>>,
    notify: NotifySettings,
    stop: CancellationToken,
) {
    let mut interval = tokio::time::interval(CHAIN_CHECK_INTERVAL);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = stop.cancelled() => return,
        }
        let checked = store.check_chain().await;
        let mut kept = chain.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(problem) = &checked.problem
            && kept.problem.as_ref() != Some(problem)
        {
            tracing::warn!("the audit chain: {problem}");
            notify::tell(
                &notify::Event::ChainBroken {
                    problem: problem.clone(),
                },
                &notify,
            );
        }
        *kept = checked;
    }
}
