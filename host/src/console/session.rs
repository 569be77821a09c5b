//! Who is signed in: the users (token names) and their tokens' digests, the sessions and
//! their keys, the sign-in forms' nonces. In memory: a restart signs everyone out.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::{LOGIN_NONCE_TTL, MAX_LOGIN_NONCES, MAX_SESSIONS, SESSION_TTL};

/// A signed-in user's session.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// The user: the name of the token they signed in with.
    pub(super) user: String,
    /// The session's key: every request of the session carries it in [`KEY_HEADER`], besides
    /// the cookie. It reaches the browser once, in the answer to the sign-in, and the page's
    /// script keeps it in the origin's own storage; a cookie alone, which the browser also
    /// sends to every other port of the host, neither reads a page nor answers a call.
    ///
    /// [`KEY_HEADER`]: super::KEY_HEADER
    pub(super) key: String,
    /// When it was made.
    made: Instant,
    /// A message for the next page (what the last answer did).
    pub(super) flash: Option<String>,
}

#[derive(Debug, Default)]
struct Tables {
    sessions: HashMap<String, Session>,
    nonces: HashMap<String, Instant>,
}

/// The users and the live sessions.
#[derive(Debug)]
pub(super) struct Sessions {
    /// SHA-256 of each token, with its user.
    users: Vec<([u8; 32], String)>,
    tables: Mutex<Tables>,
}

/// 32 random bytes as hex: a session id, a session key, a nonce. `None` when the system has
/// no randomness to give (then nobody signs in).
pub(super) fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex::encode(bytes))
}

/// Equal in time independent of where the two differ (same length assumed by callers
/// comparing digests; unequal lengths are unequal).
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    /// Users from token by name.
    pub(super) fn new(users: &BTreeMap<String, String>) -> Sessions {
        Sessions {
            users: users
                .iter()
                .map(|(name, token)| (Sha256::digest(token.as_bytes()).into(), name.clone()))
                .collect(),
            tables: Mutex::new(Tables::default()),
        }
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The user whose token is `token`. Every token is compared, so the time taken does not
    /// say which one came close.
    pub(super) fn user_of(&self, token: &str) -> Option<String> {
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        let mut found = None;
        for (known, name) in &self.users {
            if same(known, &digest) {
                found = Some(name.clone());
            }
        }
        found
    }

    /// A new sign-in form's nonce.
    pub(super) fn new_nonce(&self) -> Option<String> {
        let nonce = random_token()?;
        let mut tables = self.tables();
        tables.nonces.retain(|_, made| made.elapsed() < LOGIN_NONCE_TTL);
        if tables.nonces.len() >= MAX_LOGIN_NONCES
            && let Some(oldest) = tables
                .nonces
                .iter()
                .min_by_key(|(_, made)| **made)
                .map(|(nonce, _)| nonce.clone())
        {
            tables.nonces.remove(&oldest);
        }
        tables.nonces.insert(nonce.clone(), Instant::now());
        Some(nonce)
    }

    /// Whether `nonce` was issued and is still valid (not taking it): a second look at the
    /// sign-in form keeps the first form's nonce, so two tabs, or a browser fetching the page
    /// twice, do not undo each other.
    pub(super) fn nonce_alive(&self, nonce: &str) -> bool {
        self.tables()
            .nonces
            .get(nonce)
            .is_some_and(|made| made.elapsed() < LOGIN_NONCE_TTL)
    }

    /// Takes the nonce `nonce`: whether it was issued, and is still valid. Used once.
    pub(super) fn take_nonce(&self, nonce: &str) -> bool {
        self.tables()
            .nonces
            .remove(nonce)
            .is_some_and(|made| made.elapsed() < LOGIN_NONCE_TTL)
    }

    /// A new session for `user`, with a new id (never one the browser brought): its id.
    pub(super) fn start(&self, user: String) -> Option<String> {
        let id = random_token()?;
        let key = random_token()?;
        let mut tables = self.tables();
        tables
            .sessions
            .retain(|_, session| session.made.elapsed() < SESSION_TTL);
        if tables.sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = tables
                .sessions
                .iter()
                .min_by_key(|(_, session)| session.made)
                .map(|(id, _)| id.clone())
        {
            tables.sessions.remove(&oldest);
        }
        tables.sessions.insert(
            id.clone(),
            Session {
                user,
                key,
                made: Instant::now(),
                flash: None,
            },
        );
        Some(id)
    }

    /// The live session of id `id`.
    pub(super) fn get(&self, id: &str) -> Option<Session> {
        let mut tables = self.tables();
        let session = tables.sessions.get(id)?;
        if session.made.elapsed() >= SESSION_TTL {
            tables.sessions.remove(id);
            return None;
        }
        Some(session.clone())
    }

    /// Takes the message the session's next page shows.
    pub(super) fn take_flash(&self, id: &str) -> Option<String> {
        self.tables().sessions.get_mut(id)?.flash.take()
    }

    /// Sets the message the session's next page shows.
    pub(super) fn flash(&self, id: &str, message: String) {
        if let Some(session) = self.tables().sessions.get_mut(id) {
            session.flash = Some(message);
        }
    }

    /// Ends the session `id`.
    pub(super) fn end(&self, id: &str) {
        self.tables().sessions.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        Sessions::new(&BTreeMap::from([(
            String::from("alice"),
            String::from("a-token-of-at-least-32-characters-long"),
        )]))
    }

    #[test]
    fn only_a_named_token_signs_in_and_names_its_user() {
        let s = sessions();
        assert_eq!(
            s.user_of("a-token-of-at-least-32-characters-long").as_deref(),
            Some("alice")
        );
        assert_eq!(s.user_of("a-token-of-at-least-32-characters-lonG"), None);
        assert_eq!(s.user_of(""), None);
    }

    #[test]
    fn a_nonce_is_good_once_and_only_when_issued() {
        let s = sessions();
        let nonce = s.new_nonce().unwrap();
        assert!(!s.take_nonce("made-up"));
        assert!(s.nonce_alive(&nonce));
        assert!(s.take_nonce(&nonce));
        assert!(!s.nonce_alive(&nonce));
        assert!(!s.take_nonce(&nonce));
    }

    #[test]
    fn each_sign_in_gets_a_new_session_id_and_key() {
        let s = sessions();
        let first = s.start(String::from("alice")).unwrap();
        let second = s.start(String::from("alice")).unwrap();
        assert_ne!(first, second);
        let (a, b) = (s.get(&first).unwrap(), s.get(&second).unwrap());
        assert_ne!(a.key, b.key);
        assert_ne!(a.key, first);
        s.end(&first);
        assert!(s.get(&first).is_none());
        assert!(s.get(&second).is_some());
        assert!(s.get("not-a-session").is_none());
    }
}
