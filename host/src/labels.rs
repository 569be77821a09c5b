//! What a session has seen: labels joined as results arrive (information-flow control),
//! kept per session, or per principal within a window for clients without sessions.
//!
//! On the model of FIDES (Microsoft's information-flow control for agents): a session
//! carries an integrity label (has untrusted content reached it?) and a confidentiality
//! label (the highest level of what reached it), both only ever raised within the session.
//! A policy component's review of each result says what that result brings
//! (`results@0.3.0`); the call path joins it into the session's labels when the result is
//! delivered, and every later decision of the session sees them (`call.labels`). A gateway
//! sees calls and results, not what the model does with them: per-session labels are the
//! finest it can keep (SECURITY.md).
//!
//! A client of the 2026-07-28 revision has no session: its calls accumulate labels per
//! principal, forgotten after [`LabelSettings::principal_window_ms`] without a delivered
//! result. A session's labels are forgotten after [`SESSION_IDLE_MS`] without one.
//!
//! Kept in the gateway's memory ([`MemoryLabels`]), or with `store.postgres` in the
//! database, so that every gateway of a fleet sees the same labels
//! (`crate::store::postgres::PgLabels`, table `toolward_labels`).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

pub use crate::component::Labels;
use crate::component::ReviewSettings;

/// The confidentiality levels when the operator names none, lowest first.
pub const DEFAULT_LEVELS: [&str; 2] = ["public", "private"];

/// How long a principal's labels last without a delivered result (clients without
/// sessions): one hour.
pub const DEFAULT_PRINCIPAL_WINDOW_MS: u64 = 60 * 60 * 1000;

/// How long a session's labels last without a delivered result: a day. A session idle
/// that long starts again with no labels (SECURITY.md).
pub const SESSION_IDLE_MS: u64 = 24 * 60 * 60 * 1000;

/// The most sessions and principals whose labels one in-memory store keeps; past it, a
/// new key's labels are not kept and its calls are refused (see [`LabelError::Full`]):
/// forgetting an old key's labels instead would let a session launder them.
pub const MAX_KEYS: usize = 100_000;

/// How labels are ordered and kept: the operator's confidentiality levels (`labels` in
/// the config) and the window of sessionless principals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSettings {
    /// The confidentiality levels, lowest first. A level a review names that is not here
    /// ranks above all of them (fail closed).
    pub levels: Vec<String>,
    /// How long a sessionless principal's labels last without a delivered result.
    pub principal_window_ms: u64,
}

impl Default for LabelSettings {
    fn default() -> Self {
        LabelSettings {
            levels: DEFAULT_LEVELS.iter().map(|level| (*level).to_owned()).collect(),
            principal_window_ms: DEFAULT_PRINCIPAL_WINDOW_MS,
        }
    }
}

impl LabelSettings {
    /// The settings a policy component's reviews give: its confidentiality levels (the
    /// defaults, `public` and `private`, when it names none) and the default principal window.
    /// Every label store of a gateway is built from these, so that the in-memory store and
    /// the PostgreSQL one rank levels alike.
    pub fn from_reviews(reviews: &ReviewSettings) -> LabelSettings {
        let mut settings = LabelSettings::default();
        if !reviews.levels.is_empty() {
            settings.levels = reviews.levels.clone();
        }
        settings
    }

    /// How long the labels of `key` last without a delivered result: a day (`SESSION_IDLE_MS`)
    /// for a session, [`LabelSettings::principal_window_ms`] for a sessionless principal.
    pub fn lapse_ms(&self, key: &LabelKey) -> u64 {
        match key {
            LabelKey::Session(_) => SESSION_IDLE_MS,
            LabelKey::Principal(_) => self.principal_window_ms,
        }
    }

    /// The rank of `level`: 0 for none (empty), its place in the levels from 1, and above
    /// every named level for an unknown one.
    pub fn rank(&self, level: &str) -> usize {
        if level.is_empty() {
            return 0;
        }
        self.levels
            .iter()
            .position(|known| known == level)
            .map_or(self.levels.len() + 1, |at| at + 1)
    }

    /// `a` joined with `b`: untrusted if either is, the higher confidentiality (the first
    /// of two unknown levels), the union of the tags.
    pub fn join(&self, a: &Labels, b: &Labels) -> Labels {
        let confidentiality = if self.rank(&b.confidentiality) > self.rank(&a.confidentiality)
        {
            b.confidentiality.clone()
        } else {
            a.confidentiality.clone()
        };
        let mut tags: Vec<String> = a.tags.iter().chain(&b.tags).cloned().collect();
        tags.sort();
        tags.dedup();
        Labels {
            untrusted: a.untrusted || b.untrusted,
            confidentiality,
            tags,
        }
    }
}

/// Whose labels a call reads and joins: its session's, or for a call without a session
/// (2026-07-28), its principal's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LabelKey {
    /// A client connection.
    Session(String),
    /// A principal whose client has no sessions.
    Principal(String),
}

impl LabelKey {
    /// The key of a call with `session` (empty: none) made by `principal`.
    pub fn of(session: &str, principal: &str) -> LabelKey {
        if session.is_empty() {
            LabelKey::Principal(principal.to_owned())
        } else {
            LabelKey::Session(session.to_owned())
        }
    }
}

impl fmt::Display for LabelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabelKey::Session(session) => write!(f, "session {session}"),
            LabelKey::Principal(principal) => write!(f, "principal {principal}"),
        }
    }
}

/// Why labels could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    /// The in-memory store holds the labels of 100,000 keys already.
    #[error("the label store holds the labels of {MAX_KEYS} sessions and principals already")]
    Full,
    /// The PostgreSQL store failed.
    #[error("session labels in PostgreSQL: {0}")]
    #[cfg(feature = "postgres")]
    Postgres(#[from] crate::database::PgError),
}

/// The future a [`LabelStore`] method returns: boxed (dyn-compatible) and `Send`.
pub type LabelFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LabelError>> + Send + 'a>>;

/// Where sessions' labels live: in the gateway's memory ([`MemoryLabels`], the default: a
/// session is one connection to one gateway) or in PostgreSQL, shared by a fleet.
pub trait LabelStore: Send + Sync + fmt::Debug {
    /// The labels of `key` at `now_ms`; none (the default) for a key never seen or whose
    /// labels lapsed.
    ///
    /// # Errors
    /// [`LabelError`] when the store cannot be reached: the call path refuses the call (no
    /// decision is made without the session's labels).
    fn get<'a>(&'a self, key: &'a LabelKey, now_ms: u64) -> LabelFuture<'a, Labels>;

    /// Joins `labels` into those of `key` at `now_ms`, atomically with respect to every
    /// other join, and returns the joined labels.
    ///
    /// # Errors
    /// [`LabelError`] when the store cannot be reached or is full: the call path then
    /// withholds the result (delivering it unlabelled would launder it).
    fn join<'a>(
        &'a self,
        key: &'a LabelKey,
        labels: &'a Labels,
        now_ms: u64,
    ) -> LabelFuture<'a, Labels>;
}

/// Labels in the gateway's memory.
#[derive(Debug, Default)]
pub struct MemoryLabels {
    settings: LabelSettings,
    entries: Mutex<HashMap<LabelKey, (Labels, u64)>>,
}

impl MemoryLabels {
    /// An empty store ordering levels and keeping principals by `settings`.
    pub fn new(settings: LabelSettings) -> MemoryLabels {
        MemoryLabels {
            settings,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lapse_ms(&self, key: &LabelKey) -> u64 {
        self.settings.lapse_ms(key)
    }

    fn get_now(&self, key: &LabelKey, now_ms: u64) -> Labels {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        match entries.get(key) {
            Some((labels, at)) if now_ms.saturating_sub(*at) <= self.lapse_ms(key) => {
                labels.clone()
            }
            _ => Labels::default(),
        }
    }

    fn join_now(&self, key: &LabelKey, labels: &Labels, now_ms: u64) -> Result<Labels, LabelError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_KEYS && !entries.contains_key(key) {
            // Lapsed entries make room; live ones are never dropped.
            entries.retain(|key, (_, at)| now_ms.saturating_sub(*at) <= self.lapse_ms(key));
            if entries.len() >= MAX_KEYS {
                return Err(LabelError::Full);
            }
        }
        let lapse = self.lapse_ms(key);
        let entry = entries
            .entry(key.clone())
            .or_insert_with(|| (Labels::default(), now_ms));
        let before = if now_ms.saturating_sub(entry.1) <= lapse {
            entry.0.clone()
        } else {
            Labels::default()
        };
        let joined = self.settings.join(&before, labels);
        *entry = (joined.clone(), now_ms);
        Ok(joined)
    }
}

impl LabelStore for MemoryLabels {
    fn get<'a>(&'a self, key: &'a LabelKey, now_ms: u64) -> LabelFuture<'a, Labels> {
        let labels = self.get_now(key, now_ms);
        Box::pin(async move { Ok(labels) })
    }

    fn join<'a>(
        &'a self,
        key: &'a LabelKey,
        labels: &'a Labels,
        now_ms: u64,
    ) -> LabelFuture<'a, Labels> {
        let joined = self.join_now(key, labels, now_ms);
        Box::pin(async move { joined })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(untrusted: bool, confidentiality: &str, tags: &[&str]) -> Labels {
        Labels {
            untrusted,
            confidentiality: confidentiality.to_owned(),
            tags: tags.iter().map(|tag| (*tag).to_owned()).collect(),
        }
    }

    #[test]
    fn untrusted_wins_and_the_higher_confidentiality_wins() {
        let settings = LabelSettings::default();
        let joined = settings.join(
            &labels(false, "private", &["b"]),
            &labels(true, "public", &["a", "b"]),
        );
        assert_eq!(joined, labels(true, "private", &["a", "b"]));
        let joined = settings.join(&labels(false, "", &[]), &labels(false, "public", &[]));
        assert_eq!(joined.confidentiality, "public");
    }

    #[test]
    fn an_unknown_level_ranks_above_every_named_one() {
        let settings = LabelSettings::default();
        let joined = settings.join(&labels(false, "secret", &[]), &labels(false, "private", &[]));
        assert_eq!(joined.confidentiality, "secret");
        let settings = LabelSettings {
            levels: vec!["public".into(), "internal".into(), "private".into()],
            ..LabelSettings::default()
        };
        let joined = settings.join(&labels(false, "private", &[]), &labels(false, "internal", &[]));
        assert_eq!(joined.confidentiality, "private");
    }

    #[test]
    fn settings_from_reviews_take_the_components_levels_or_else_the_defaults() {
        assert_eq!(
            LabelSettings::from_reviews(&ReviewSettings::default()),
            LabelSettings::default()
        );
        let named = LabelSettings::from_reviews(&ReviewSettings {
            reviews: vec![String::from("secrets")],
            levels: vec![String::from("low"), String::from("high")],
        });
        assert_eq!(named.levels, ["low", "high"]);
        assert_eq!((named.rank("low"), named.rank("high"), named.rank("private")), (1, 2, 3));
        assert_eq!(named.principal_window_ms, DEFAULT_PRINCIPAL_WINDOW_MS);
    }

    #[tokio::test]
    async fn a_session_keeps_its_labels_and_another_session_does_not_see_them() {
        let store = MemoryLabels::new(LabelSettings::default());
        let one = LabelKey::of("s1", "alice");
        let two = LabelKey::of("s2", "alice");
        store.join(&one, &labels(true, "public", &[]), 1).await.ok();
        store.join(&one, &labels(false, "private", &[]), 2).await.ok();
        let seen = store.get(&one, 3).await.ok();
        assert_eq!(seen, Some(labels(true, "private", &[])));
        assert_eq!(store.get(&two, 3).await.ok(), Some(Labels::default()));
    }

    #[tokio::test]
    async fn a_sessionless_principal_keeps_its_labels_within_the_window_only() {
        let settings = LabelSettings {
            principal_window_ms: 1_000,
            ..LabelSettings::default()
        };
        let store = MemoryLabels::new(settings);
        let alice = LabelKey::of("", "alice");
        store.join(&alice, &labels(true, "", &[]), 10_000).await.ok();
        assert!(store.get(&alice, 10_900).await.is_ok_and(|l| l.untrusted));
        assert!(store.get(&alice, 11_001).await.is_ok_and(|l| !l.untrusted));
        assert!(store.get(&LabelKey::of("", "bob"), 10_500).await.is_ok_and(|l| !l.untrusted));
    }
}
