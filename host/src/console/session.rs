//! Who is signed in: the users (token names) and their tokens' digests, the sessions and
//! their keys, the sign-in forms' nonces. In memory: a restart signs everyone out.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use sha2::{Digest, Sha256};

use hmac::{Hmac, KeyInit, Mac};

use super::{LOGIN_NONCE_TTL, MAX_SESSIONS_PER_USER, SESSION_TTL};

/// A signed-in user's session.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// The user: the name of the token they signed in with, or the `user_claim` of the ID
    /// token of their OpenID Connect sign-in (the provider's words: escape it to show it).
    pub(super) user: String,
    /// The user's groups: the ID token's `groups_claim` (strings only, at most
    /// [`MAX_GROUPS`], each at most [`MAX_GROUP_CHARS`] characters); none for a token's
    /// user.
    ///
    /// [`MAX_GROUPS`]: super::MAX_GROUPS
    /// [`MAX_GROUP_CHARS`]: super::MAX_GROUP_CHARS
    pub(super) groups: Vec<String>,
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

/// What a nonce made by [`Sessions`] is for: its MAC says so.
#[derive(Debug, Clone, Copy)]
enum Purpose {
    /// The sign-in form's nonce (`LOGIN_COOKIE`).
    LoginForm,
    /// An OpenID Connect sign-in's flow.
    OidcFlow,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::LoginForm => b"login-form",
            Purpose::OidcFlow => b"oidc-flow",
        }
    }
}

#[derive(Debug, Default)]
struct Tables {
    sessions: HashMap<String, Session>,
}

/// The users and the live sessions.
#[derive(Debug)]
pub(super) struct Sessions {
    /// SHA-256 of each token, with its user.
    users: Vec<([u8; 32], String)>,
    /// The key of the sign-in forms' nonces' MACs, made at start; `None` without randomness
    /// (then nobody signs in).
    nonce_key: Option<[u8; 32]>,
    tables: Mutex<Tables>,
}

/// 32 random bytes as hex: a session id, a session key, a nonce's random part. `None` when
/// the system has no randomness to give (then nobody signs in).
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
        let mut nonce_key = [0u8; 32];
        Sessions {
            users: users
                .iter()
                .map(|(name, token)| (Sha256::digest(token.as_bytes()).into(), name.clone()))
                .collect(),
            nonce_key: getrandom::fill(&mut nonce_key).is_ok().then_some(nonce_key),
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

    /// The MAC of a nonce's random part and time, for `purpose` (a sign-in form's nonce is
    /// never taken as an OpenID Connect sign-in's flow, nor the other way).
    fn nonce_mac(&self, purpose: Purpose, random: &str, made_ms: u64) -> Option<String> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.nonce_key?).ok()?;
        mac.update(purpose.label());
        mac.update(b".");
        mac.update(random.as_bytes());
        mac.update(b".");
        mac.update(made_ms.to_string().as_bytes());
        Some(hex::encode(mac.finalize().into_bytes()))
    }

    /// A new sign-in form's nonce: `<random>.<made, ms>.<MAC of both>`. Nothing is kept, so
    /// no number of forms asked for pushes out another's (an outside attack flooded a table
    /// of them so that nobody could sign in).
    pub(super) fn new_nonce(&self) -> Option<String> {
        self.new_made(Purpose::LoginForm)
    }

    /// A new OpenID Connect sign-in's flow: made as a form's nonce, for its own purpose. The
    /// page's script keeps it in the console origin's storage until the provider sends the
    /// browser back; the flow's `state`, `nonce` and PKCE verifier are derived from it
    /// ([`Sessions::flow_secret`]), so nothing is kept here.
    pub(super) fn new_flow(&self) -> Option<String> {
        self.new_made(Purpose::OidcFlow)
    }

    fn new_made(&self, purpose: Purpose) -> Option<String> {
        let random = random_token()?;
        let made_ms = crate::ids::now_ms();
        let mac = self.nonce_mac(purpose, &random, made_ms)?;
        Some(format!("{random}.{made_ms}.{mac}"))
    }

    /// Whether `flow` is an OpenID Connect sign-in flow this console made in the last
    /// [`LOGIN_NONCE_TTL`].
    pub(super) fn flow_alive(&self, flow: &str) -> bool {
        self.made_alive(Purpose::OidcFlow, flow)
    }

    /// A secret of the flow `flow` for `what` (`state`, `nonce`, `pkce`): the console's MAC
    /// of both, base64url (43 characters, a valid PKCE verifier). Only the console can
    /// derive it, and only from the flow the browser kept.
    pub(super) fn flow_secret(&self, flow: &str, what: &str) -> Option<String> {
        use base64::Engine as _;
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.nonce_key?).ok()?;
        mac.update(b"oidc-secret.");
        mac.update(what.as_bytes());
        mac.update(b".");
        mac.update(flow.as_bytes());
        Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
    }

    /// Whether `nonce` is one this console made in the last [`LOGIN_NONCE_TTL`]. A second look
    /// at the sign-in form keeps the first form's nonce, so two tabs, or a browser fetching
    /// the page twice, do not undo each other.
    pub(super) fn nonce_alive(&self, nonce: &str) -> bool {
        self.made_alive(Purpose::LoginForm, nonce)
    }

    fn made_alive(&self, purpose: Purpose, nonce: &str) -> bool {
        let mut parts = nonce.splitn(3, '.');
        let (Some(random), Some(made), Some(mac)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let Ok(made_ms) = made.parse::<u64>() else {
            return false;
        };
        let ttl_ms = u64::try_from(LOGIN_NONCE_TTL.as_millis()).unwrap_or(u64::MAX);
        let age_ms = crate::ids::now_ms().saturating_sub(made_ms);
        self.nonce_mac(purpose, random, made_ms)
            .is_some_and(|expected| same(mac.as_bytes(), expected.as_bytes()))
            && age_ms < ttl_ms
    }

    /// A new session for `user` in `groups`, with a new id (never one the browser brought):
    /// its id.
    pub(super) fn start(&self, user: String, groups: Vec<String>) -> Option<String> {
        let id = random_token()?;
        let key = random_token()?;
        let mut tables = self.tables();
        tables
            .sessions
            .retain(|_, session| session.made.elapsed() < SESSION_TTL);
        let users = tables
            .sessions
            .values()
            .filter(|session| session.user == user)
            .count();
        if users >= MAX_SESSIONS_PER_USER
            && let Some(oldest) = tables
                .sessions
                .iter()
                .filter(|(_, session)| session.user == user)
                .min_by_key(|(_, session)| session.made)
                .map(|(id, _)| id.clone())
        {
            tables.sessions.remove(&oldest);
        }
        tables.sessions.insert(
            id.clone(),
            Session {
                user,
                groups,
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
    fn a_nonce_is_good_only_when_this_console_made_it_lately() {
        let s = sessions();
        let nonce = s.new_nonce().unwrap();
        assert!(s.nonce_alive(&nonce));
        assert!(!s.nonce_alive("made-up"));
        assert!(!s.nonce_alive(""));
        // Another console's, or this one's with its time moved: the MAC differs.
        assert!(!sessions().nonce_alive(&nonce));
        let (random, rest) = nonce.split_once('.').unwrap();
        let (made, mac) = rest.split_once('.').unwrap();
        let later = made.parse::<u64>().unwrap() + 1;
        assert!(!s.nonce_alive(&format!("{random}.{later}.{mac}")));
        // An old one, even with its MAC right.
        let old = crate::ids::now_ms() - u64::try_from(LOGIN_NONCE_TTL.as_millis()).unwrap() - 1;
        let stale = format!(
            "{random}.{old}.{}",
            s.nonce_mac(Purpose::LoginForm, random, old).unwrap()
        );
        assert!(!s.nonce_alive(&stale));
        // A form's nonce is not a sign-in flow, nor a flow a form's nonce.
        assert!(!s.flow_alive(&nonce));
        let flow = s.new_flow().unwrap();
        assert!(s.flow_alive(&flow));
        assert!(!s.nonce_alive(&flow));
        // However many are made, the first stays good: there is nothing to flood out.
        for _ in 0..5000 {
            s.new_nonce().unwrap();
        }
        assert!(s.nonce_alive(&nonce));
    }

    #[test]
    fn many_sign_ins_of_one_user_end_only_that_users_oldest_sessions() {
        let s = Sessions::new(&BTreeMap::from([
            (
                String::from("alice"),
                String::from("a-token-of-at-least-32-characters-long"),
            ),
            (
                String::from("mallory"),
                String::from("another-token-of-at-least-32-characters"),
            ),
        ]));
        let alice = s.start(String::from("alice"), Vec::new()).unwrap();
        let first = s.start(String::from("mallory"), Vec::new()).unwrap();
        for _ in 0..2000 {
            s.start(String::from("mallory"), Vec::new()).unwrap();
        }
        assert!(s.get(&alice).is_some(), "another user's sign-ins ended alice's session");
        assert!(s.get(&first).is_none());
    }

    #[test]
    fn each_sign_in_gets_a_new_session_id_and_key() {
        let s = sessions();
        let first = s.start(String::from("alice"), Vec::new()).unwrap();
        let second = s.start(String::from("alice"), Vec::new()).unwrap();
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

#[cfg(test)]
mod flow_tests {
    use super::*;

    #[test]
    fn a_flows_secrets_differ_by_purpose_and_flow_and_only_this_console_derives_them() {
        let s = Sessions::new(&BTreeMap::new());
        let flow = s.new_flow().unwrap();
        let state = s.flow_secret(&flow, "state").unwrap();
        assert_eq!(state, s.flow_secret(&flow, "state").unwrap());
        assert_eq!(state.len(), 43, "a PKCE verifier is 43 to 128 characters");
        assert_ne!(state, s.flow_secret(&flow, "nonce").unwrap());
        assert_ne!(state, s.flow_secret(&s.new_flow().unwrap(), "state").unwrap());
        let other = Sessions::new(&BTreeMap::new());
        assert_ne!(state, other.flow_secret(&flow, "state").unwrap());
        assert!(!other.flow_alive(&flow));
    }
}
