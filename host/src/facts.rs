//! Fact counters: how many calls were forwarded and held in the last minute and hour, per
//! tool, server, principal and session, kept behind one interface ([`FactStore`]) so that
//! every gateway sharing a store counts the same calls.
//!
//! The call path reads the counts a decision needs and hands them to the policy in
//! `call.facts` (WIT `types.fact`): `{scope}.{outcome}.{window}` = a non-negative integer as
//! JSON text, for example `tool.forwarded.minute` = `3`. Names, windows, which calls count and
//! what concurrent calls see are specified in `docs/facts.md`; in short:
//!
//! - **scope** `tool` (this tool of this server), `server` (every tool of the server),
//!   `principal` (every call of the principal), `session` (every call of the client
//!   connection; only where the call has a session);
//! - **outcome** `forwarded` (allowed by the policy, or held and then approved; a call that
//!   then failed upstream still counts) or `held` (held by the policy, whatever the answer);
//! - **window** `minute` or `hour`, sliding at the granularity of the implementation
//!   ([`state_dir`]: the current second and the 59 before it, the current minute and the 59
//!   before it).
//!
//! # Concurrency
//!
//! Reading and recording are separate steps with a decision between them, so the store
//! *reserves*: [`FactStore::reserve`] reads the counts and, in the same atomic step, counts
//! the call as forwarded; once the policy has decided, [`FactStore::record`] keeps the
//! reservation (allow), moves it to `held` (hold) or removes it (deny). A call therefore sees
//! every call reserved before it, on this process and on every other process sharing the
//! store: `forwarded` limits are never passed by calls in flight at once; a call in flight that
//! is then denied may make another see one call too many for a moment (a denial a moment
//! early, never a pass). A `held` count moves at the decision, so calls in flight at the same
//! moment may each see the held count before the others (a `held_*` limit may be passed by at
//! most the calls decided at once).

pub mod state_dir;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

pub use state_dir::StateFacts;

/// Length of the `minute` window, milliseconds.
pub const MINUTE_MS: u64 = 60_000;
/// Length of the `hour` window, milliseconds.
pub const HOUR_MS: u64 = 3_600_000;

/// Whose calls a count counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// One tool of one server.
    Tool,
    /// Every tool of one server.
    Server,
    /// Every call of one principal.
    Principal,
    /// Every call of one client session.
    Session,
}

impl Scope {
    /// Every scope, in the order facts are listed.
    pub const ALL: [Scope; 4] = [Scope::Tool, Scope::Server, Scope::Principal, Scope::Session];

    /// The first part of a fact's name: `tool`, `server`, `principal`, `session`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tool => "tool",
            Scope::Server => "server",
            Scope::Principal => "principal",
            Scope::Session => "session",
        }
    }
}

/// What happened to a call, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// Forwarded to the server (allowed, or held and approved).
    Forwarded,
    /// Held for approval by the policy.
    Held,
}

impl Outcome {
    /// Both outcomes.
    pub const ALL: [Outcome; 2] = [Outcome::Forwarded, Outcome::Held];

    /// The second part of a fact's name: `forwarded`, `held`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Held => "held",
        }
    }
}

/// The window a count covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Window {
    /// The last minute.
    Minute,
    /// The last hour.
    Hour,
}

impl Window {
    /// Both windows.
    pub const ALL: [Window; 2] = [Window::Minute, Window::Hour];

    /// The third part of a fact's name: `minute`, `hour`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Minute => "minute",
            Window::Hour => "hour",
        }
    }
}

/// The scopes whose facts a configured policy can read: only their counters are reserved
/// and settled for a call, and only their facts reach the policy and the decision record
/// (`docs/facts.md`, "Which policies are given facts"). Empty: no counter is touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FactScopes(u8);

impl FactScopes {
    /// No scope: the policy reads no fact.
    pub const NONE: FactScopes = FactScopes(0);
    /// Every scope: what a policy that cannot say which facts it reads is given.
    pub const ALL: FactScopes = FactScopes(0b1111);

    fn bit(scope: Scope) -> u8 {
        match scope {
            Scope::Tool => 1,
            Scope::Server => 2,
            Scope::Principal => 4,
            Scope::Session => 8,
        }
    }

    /// The scopes named (`tool`, `server`, `principal`, `session`, as a component's
    /// `facts@0.2.0` export or the rules' limits name them). A name that is none of these
    /// gives every scope: a policy is never given fewer facts than it may read.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> FactScopes {
        let mut scopes = FactScopes::NONE;
        for name in names {
            match Scope::ALL.iter().find(|scope| scope.as_str() == name) {
                Some(scope) => scopes.0 |= FactScopes::bit(*scope),
                None => return FactScopes::ALL,
            }
        }
        scopes
    }

    /// Whether `scope` is one of these.
    pub fn contains(self, scope: Scope) -> bool {
        self.0 & FactScopes::bit(scope) != 0
    }

    /// Whether there is no scope (the policy reads no fact).
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The scopes' names, in the order facts are listed.
    pub fn names(self) -> Vec<&'static str> {
        Scope::ALL
            .iter()
            .filter(|scope| self.contains(**scope))
            .map(|scope| scope.as_str())
            .collect()
    }
}

/// The counters one call touches: one key per scope (no session key for a call without a
/// session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactKeys {
    keys: Vec<(Scope, String)>,
}

impl FactKeys {
    /// The keys of a call of `tool` on `server` by `principal` in `session` (empty: none).
    /// A tool's key names its server, so `read` of two servers are counted apart.
    pub fn of(server: &str, tool: &str, principal: &str, session: &str) -> FactKeys {
        let mut keys = vec![
            (Scope::Tool, format!("{server}\u{0}{tool}")),
            (Scope::Server, server.to_owned()),
            (Scope::Principal, principal.to_owned()),
        ];
        if !session.is_empty() {
            keys.push((Scope::Session, session.to_owned()));
        }
        FactKeys { keys }
    }

    /// The same keys, less those of scopes not in `scopes` (see [`FactScopes`]).
    #[must_use]
    pub fn only(mut self, scopes: FactScopes) -> FactKeys {
        self.keys.retain(|(scope, _)| scopes.contains(*scope));
        self
    }

    /// Whether the call touches no counter.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Each scope with its key text (a tool's is `server`, NUL, `tool`).
    pub fn iter(&self) -> impl Iterator<Item = (Scope, &str)> {
        self.keys.iter().map(|(scope, key)| (*scope, key.as_str()))
    }
}

/// The counts one decision saw, by fact name (`tool.forwarded.minute`, ...): every
/// combination of the call's scopes, both outcomes and both windows, zeros included.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts(BTreeMap<String, u64>);

impl Facts {
    /// The name of a fact: `{scope}.{outcome}.{window}`.
    pub fn name(scope: Scope, outcome: Outcome, window: Window) -> String {
        format!(
            "{}.{}.{}",
            scope.as_str(),
            outcome.as_str(),
            window.as_str()
        )
    }

    /// Sets one count.
    pub fn set(&mut self, scope: Scope, outcome: Outcome, window: Window, count: u64) {
        self.0.insert(Facts::name(scope, outcome, window), count);
    }

    /// The count of fact `name`, if the call has it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.get(name).copied()
    }

    /// The counts by name, as the decision record's `facts` object holds them.
    pub fn as_map(&self) -> &BTreeMap<String, u64> {
        &self.0
    }

    /// The facts as WIT `call.facts` carries them: name and JSON text.
    pub fn to_pairs(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .map(|(name, count)| (name.clone(), count.to_string()))
            .collect()
    }
}

/// What [`FactStore::record`] does with a call reserved by [`FactStore::reserve`] at the
/// same time, once the policy has decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The call was not forwarded (denied, or refused before it could be): the reservation
    /// is taken back.
    Release,
    /// The policy held the call: the reservation moves from `forwarded` to `held`.
    Hold,
    /// A held call was approved: one `forwarded` call is counted at the time given (the
    /// approval's), beside its `held`.
    Forward,
}

/// Why the counts could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FactError {
    /// The state folder, or the counters file in it, cannot be opened or trusted.
    #[error("fact counters: {0}")]
    State(#[from] crate::state_dir::StateError),
    /// Reading, writing or locking the counters file failed.
    #[error("fact counters `{path}`: cannot {action}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `lock`).
        action: &'static str,
        /// The counters file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The counters file is not one this version wrote.
    #[error(
        "fact counters `{path}`: {reason}; remove the file to start counting afresh (the counts of the last hour are lost)"
    )]
    Format {
        /// The counters file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The work could not finish (the blocking task was lost).
    #[error("fact counters: {0}")]
    Stopped(String),
    /// The PostgreSQL store's counters cannot be reached or written.
    #[error("fact counters in {0}")]
    #[cfg(feature = "postgres")]
    Postgres(#[from] crate::database::PgError),
}

/// The future a [`FactStore`] method returns: boxed, so the trait stays dyn-compatible, and
/// `Send`, so the call path can hold it across awaits.
pub type FactFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, FactError>> + Send + 'a>>;

/// Where fact counts live: the state folder ([`StateFacts`], shared by every process on the
/// machine) or a store shared by a fleet. Methods return boxed futures, so an implementation
/// may do I/O; one that blocks (file locks) must not block the async workers for longer than
/// a short critical section (the state folder's moves the wait to the blocking pool).
pub trait FactStore: Send + Sync + fmt::Debug {
    /// Reads the counts of `keys` at `now_ms` (milliseconds since the Unix epoch, the time
    /// the policy sees) and, in the same atomic step with respect to every other call of
    /// every process sharing the store, counts the call as forwarded at `now_ms` for each key.
    /// The counts returned are those before the reservation: the call does not see itself.
    ///
    /// # Errors
    /// [`FactError`] when the store cannot be reached; the call path then refuses the call
    /// (no decision is made without its facts).
    fn reserve<'a>(&'a self, keys: &'a FactKeys, now_ms: u64) -> FactFuture<'a, Facts>;

    /// Settles the call reserved at `at_ms` ([`Change::Release`], [`Change::Hold`]) or counts
    /// an approved call as forwarded at `at_ms` ([`Change::Forward`]), for each key,
    /// atomically with respect to every other call. A reservation whose bucket has already
    /// left its window is not touched.
    ///
    /// # Errors
    /// [`FactError`] when the store cannot be reached; the counts are then off by this call
    /// (the decision already made stands).
    fn record<'a>(&'a self, keys: &'a FactKeys, at_ms: u64, change: Change) -> FactFuture<'a, ()>;
}
