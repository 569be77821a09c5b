//! Approvals through the 2026-07-28 revision's `input_required` round trip (MCP 2026-07-28,
//! SEP-2322 "Multi round-trip requests"), for clients that declare elicitation in their
//! request's `_meta`.
//!
//! That revision has no server-to-client requests: a server that needs the client's input
//! answers the `tools/call` with an `InputRequiredResult` (an `elicitation/create` request
//! under `inputRequests`, and an opaque `requestState`), and the client calls again with the
//! same name and arguments, its answers under `inputResponses` and the `requestState`
//! echoed. Any gateway of a fleet may receive the retry, so nothing of the first round is
//! kept in memory:
//!
//! 1. **First round.** The policy holds the call; `InputRequiredApprover` seals a
//!    [`RequestStateClaims`] (the call id, the principal, the exposed tool, the SHA-256 of
//!    the final arguments and an expiry, the approval timeout from now) with an HMAC-SHA256
//!    under `<state_dir>/request-state-key` ([`REQUEST_STATE_KEY`]; with the PostgreSQL
//!    store, the database's key, shared by the fleet), and answers nobody
//!    (the call path records the approval as not given on this request). The gateway then
//!    answers `input_required` instead of the tool error.
//! 2. **Retry.** The policy decides again (the call is a new call with a new id); when it
//!    holds again, the approver checks the echoed `requestState`: its MAC (a tampered or
//!    forged state is refused), its expiry, that the principal, tool and arguments hash are
//!    this call's, and then redeems the first call's id in the one-use ledger
//!    ([`crate::store::RequestStateLedger`]) before reading the answer, so a state is used
//!    once whatever the answer was. Only `accept` with `approve: true` approves. Every
//!    refusal is a deny whose reason (in the `approval-answered` and `refusal` records)
//!    names what failed.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use rmcp::model::{InputRequest, InputRequests, InputRequiredResult};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::approval::{Answer, AnsweredBy, ApprovalAnswer, ApprovalRequest, Approver, Channel};
use crate::ids::now_ms;
use crate::store::{Key, Redemption, RequestStateLedger, StateDir, StateDirLedger};
use crate::text;

/// The key (in the state folder) that MACs `requestState`s: `request-state-key`. With the
/// PostgreSQL store the key is the database's instead (`toolward_keys`, shared by every
/// gateway on it: [`crate::store::postgres::PgLedger::key`]); gateways sharing a state
/// folder's ledger share this file.
pub const REQUEST_STATE_KEY: &str = "request-state-key";

/// Longest `requestState` read, in bytes: 4 KiB. A sealed state is about 600 bytes; a longer
/// one is refused before it is decoded.
pub const MAX_REQUEST_STATE_BYTES: usize = 4096;

/// The key of the approval under `inputRequests` and `inputResponses`.
pub const APPROVAL_INPUT: &str = "approval";

/// What a sealed state starts with (its format's version).
const STATE_PREFIX: &str = "tw1.";

/// What the MAC of a state starts with, so it can never pass for another MAC of toolward's.
const STATE_MAC_DOMAIN: &[u8] = b"toolward request state v1";

/// What a `requestState` carries, MAC'd: the call it was issued for and who may redeem it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestStateClaims {
    /// The id of the call that was held (a ULID): the ledger's one-use key.
    pub call_id: String,
    /// The principal of that call: only the same principal's retry may use it.
    pub principal: String,
    /// The exposed name of the tool called.
    pub tool: String,
    /// SHA-256 of the final canonical arguments, lowercase hex.
    pub arguments_sha256: String,
    /// When it stops being accepted, milliseconds since the Unix epoch.
    pub expires_ms: u64,
}

/// Why an echoed `requestState` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateProblem {
    /// Longer than [`MAX_REQUEST_STATE_BYTES`].
    #[error("the `requestState` is {bytes} bytes, over the limit of {MAX_REQUEST_STATE_BYTES}")]
    TooLong {
        /// Its length.
        bytes: usize,
    },
    /// Not a state toolward wrote, or changed since: no or a wrong MAC.
    #[error(
        "the `requestState` was not issued by toolward or was changed: its MAC does not verify under the gateway's `request-state-key` (the state folder's, or the PostgreSQL store's)"
    )]
    Tampered,
    /// Past its expiry.
    #[error(
        "the `requestState` of call `{call_id}` expired {ago_ms} ms ago: call again for a new approval"
    )]
    Expired {
        /// The call it was issued for.
        call_id: String,
        /// How long ago.
        ago_ms: u64,
    },
    /// Issued to another principal.
    #[error(
        "the `requestState` of call `{call_id}` was issued to another principal, not to `{principal}`"
    )]
    OtherPrincipal {
        /// The call it was issued for.
        call_id: String,
        /// The principal of this request.
        principal: String,
    },
    /// Issued for another tool or other arguments.
    #[error(
        "the `requestState` of call `{call_id}` was issued for another {what}: an approval covers one call with its exact arguments"
    )]
    OtherCall {
        /// The call it was issued for.
        call_id: String,
        /// `tool` or `arguments`.
        what: &'static str,
    },
    /// Redeemed before.
    #[error("the `requestState` of call `{call_id}` was used already: an approval is used once")]
    Replayed {
        /// The call it was issued for.
        call_id: String,
    },
    /// The key or the ledger cannot be used (fail closed).
    #[error("the `requestState` cannot be checked: {reason}")]
    Unavailable {
        /// What failed, naming the state folder.
        reason: String,
    },
}

/// `claims` sealed: `tw1.` + the hex of their JSON + `.` + the hex HMAC-SHA256 of that JSON.
pub fn seal(key: &Key, claims: &RequestStateClaims) -> String {
    let payload = serde_json::to_vec(claims).unwrap_or_default();
    let mac = key.mac_hex(&[STATE_MAC_DOMAIN, &payload]);
    format!("{STATE_PREFIX}{}.{mac}", hex::encode(&payload))
}

/// The claims of `state` when its MAC verifies under `key`; expiry and binding are the
/// caller's to check.
///
/// # Errors
/// [`StateProblem::TooLong`] or [`StateProblem::Tampered`].
pub fn open(key: &Key, state: &str) -> Result<RequestStateClaims, StateProblem> {
    if state.len() > MAX_REQUEST_STATE_BYTES {
        return Err(StateProblem::TooLong { bytes: state.len() });
    }
    let (payload_hex, mac) = state
        .strip_prefix(STATE_PREFIX)
        .and_then(|rest| rest.split_once('.'))
        .ok_or(StateProblem::Tampered)?;
    // Only the lowercase hex `seal` writes: one state has one spelling (a case-changed
    // copy would otherwise verify, since the MAC covers the decoded payload).
    if !payload_hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(StateProblem::Tampered);
    }
    let payload = hex::decode(payload_hex).map_err(|_| StateProblem::Tampered)?;
    if !key.verify_hex(&[STATE_MAC_DOMAIN, &payload], mac) {
        return Err(StateProblem::Tampered);
    }
    serde_json::from_slice(&payload).map_err(|_| StateProblem::Tampered)
}

/// The state folder's `request-state-key` and ledger, opened once per gateway process on
/// the first held call of a 2026-07-28 client and shared by every request's handler.
#[derive(Debug, Default)]
pub(crate) struct RequestStates {
    opened: OnceLock<(Key, Arc<dyn RequestStateLedger>)>,
    /// The start's ledger when it has one (PostgreSQL for a fleet), used instead of the
    /// state folder's.
    shared: Option<Arc<dyn RequestStateLedger>>,
}

impl RequestStates {
    /// Request states redeemed in `shared` (the start's ledger, [`CallPath::ledger`]), else
    /// in the state folder's.
    ///
    /// [`CallPath::ledger`]: crate::call::CallPath::ledger
    pub(crate) fn new(shared: Option<Arc<dyn RequestStateLedger>>) -> RequestStates {
        RequestStates {
            opened: OnceLock::new(),
            shared,
        }
    }

    fn get(
        &self,
        state_dir: &std::path::Path,
    ) -> Result<(Key, Arc<dyn RequestStateLedger>), StateProblem> {
        if let Some((key, ledger)) = self.opened.get() {
            return Ok((key.clone(), Arc::clone(ledger)));
        }
        let unavailable = |reason: String| StateProblem::Unavailable { reason };
        // A ledger that keeps its own key (a fleet's, shared by every gateway on it; a
        // toolward's without a state folder, in memory) needs no state folder; else the state
        // folder's key and ledger.
        let (key, ledger): (Key, Arc<dyn RequestStateLedger>) =
            match self.shared.as_ref().and_then(|shared| Some((shared.key()?, shared))) {
                Some((key, shared)) => (key, Arc::clone(shared)),
                None => {
                    let state =
                        StateDir::open(state_dir).map_err(|e| unavailable(e.to_string()))?;
                    let key = state
                        .key(REQUEST_STATE_KEY)
                        .map_err(|e| unavailable(e.to_string()))?;
                    let ledger: Arc<dyn RequestStateLedger> = match &self.shared {
                        Some(shared) => Arc::clone(shared),
                        None => Arc::new(
                            StateDirLedger::open(&state).map_err(|e| unavailable(e.to_string()))?,
                        ),
                    };
                    (key, ledger)
                }
            };
        let (key, ledger) = self.opened.get_or_init(|| (key, ledger));
        Ok((key.clone(), Arc::clone(ledger)))
    }
}

/// A client's retry: the echoed `requestState` and its answer to [`APPROVAL_INPUT`].
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    pub(crate) state: String,
    pub(crate) response: Option<Json>,
}

/// Asks through `input_required` (first round) or checks the retry's answer (see the module
/// documentation).
pub(crate) struct InputRequiredApprover {
    states: Arc<RequestStates>,
    state_dir: std::path::PathBuf,
    lifetime: Duration,
    retry: Option<Retry>,
    /// The first round's question: the request and its sealed state.
    asked: Mutex<Option<(ApprovalRequest, String)>>,
}

impl fmt::Debug for InputRequiredApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputRequiredApprover")
            .field("retry", &self.retry.is_some())
            .finish_non_exhaustive()
    }
}

impl InputRequiredApprover {
    /// An approver for one request; `lifetime` is how long a state it issues is accepted.
    pub(crate) fn new(
        states: Arc<RequestStates>,
        state_dir: std::path::PathBuf,
        lifetime: Duration,
        retry: Option<Retry>,
    ) -> InputRequiredApprover {
        InputRequiredApprover {
            states,
            state_dir,
            lifetime,
            retry,
            asked: Mutex::new(None),
        }
    }

    /// The `InputRequiredResult` to answer with, when this request's call was held and the
    /// client must be asked: `inputRequests.approval` (`elicitation/create`, form mode, one
    /// boolean `approve`) and the sealed `requestState`.
    pub(crate) fn input_required(
        &self,
        message: impl Fn(&ApprovalRequest) -> String,
    ) -> Option<InputRequiredResult> {
        let (request, state) = self
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        let elicitation: InputRequest = match serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": message(&request),
                "requestedSchema": super::approval_schema(),
            },
        })) {
            Ok(elicitation) => elicitation,
            Err(error) => {
                tracing::error!(
                    "the approval request for call `{}` cannot be built: {error}",
                    request.call_id
                );
                return None;
            }
        };
        let mut requests = InputRequests::new();
        requests.insert(String::from(APPROVAL_INPUT), elicitation);
        Some(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// Checks the retry's state against `request` and redeems it; the claims when it may be
    /// used.
    async fn check(
        &self,
        state: &str,
        request: &ApprovalRequest,
    ) -> Result<RequestStateClaims, StateProblem> {
        let (key, ledger) = self.states.get(&self.state_dir)?;
        let claims = open(&key, state)?;
        let now = now_ms();
        if claims.expires_ms < now {
            return Err(StateProblem::Expired {
                call_id: claims.call_id,
                ago_ms: now - claims.expires_ms,
            });
        }
        if claims.principal != request.principal {
            return Err(StateProblem::OtherPrincipal {
                call_id: claims.call_id,
                principal: request.principal.clone(),
            });
        }
        let other = |what| StateProblem::OtherCall {
            call_id: claims.call_id.clone(),
            what,
        };
        if claims.tool != request.exposed_tool {
            return Err(other("tool"));
        }
        if claims.arguments_sha256 != request.arguments_sha256 {
            return Err(other("arguments"));
        }
        match ledger.redeem(&claims.call_id, claims.expires_ms, now).await {
            Ok(Redemption::First) => Ok(claims),
            Ok(Redemption::AlreadyUsed) => Err(StateProblem::Replayed {
                call_id: claims.call_id,
            }),
            Err(error) => Err(StateProblem::Unavailable {
                reason: error.to_string(),
            }),
        }
    }
}

impl Approver for InputRequiredApprover {
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            let nobody = |reason: String| Answer {
                verdict: ApprovalAnswer::Denied(reason),
                by: AnsweredBy::nobody(Channel::Elicitation),
            };
            let Some(retry) = &self.retry else {
                let (key, _) = match self.states.get(&self.state_dir) {
                    Ok(opened) => opened,
                    Err(problem) => return nobody(problem.to_string()),
                };
                let lifetime = u64::try_from(self.lifetime.as_millis()).unwrap_or(u64::MAX);
                let claims = RequestStateClaims {
                    call_id: request.call_id.clone(),
                    principal: request.principal.clone(),
                    tool: request.exposed_tool.clone(),
                    arguments_sha256: request.arguments_sha256.clone(),
                    expires_ms: now_ms().saturating_add(lifetime),
                };
                let state = seal(&key, &claims);
                let reason = format!(
                    "asked the client through `input_required` (MCP 2026-07-28); its answer comes back as a new call carrying the `requestState` of call `{}`, accepted once within {} ms",
                    claims.call_id, lifetime
                );
                *self.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some((request, state));
                return nobody(reason);
            };
            let claims = match self.check(&retry.state, &request).await {
                Ok(claims) => claims,
                Err(problem) => {
                    tracing::warn!(
                        "refused a `requestState` from principal `{}` for tool `{}`: {problem}",
                        text::escape(&request.principal),
                        text::escape(&request.exposed_tool)
                    );
                    return nobody(problem.to_string());
                }
            };
            let answered = |verdict| Answer {
                verdict,
                by: AnsweredBy::principal(&request.principal),
            };
            let response = retry.response.as_ref();
            let action = response
                .and_then(|r| r.get("action"))
                .and_then(Json::as_str);
            let approve = response
                .and_then(|r| r.get("content"))
                .and_then(|c| c.get("approve"))
                .and_then(Json::as_bool);
            match (action, approve) {
                (Some("accept"), Some(true)) => answered(ApprovalAnswer::Approved),
                (Some("accept"), _) => answered(ApprovalAnswer::Denied(format!(
                    "the person at the client did not approve it (the `requestState` of call `{}`)",
                    claims.call_id
                ))),
                (Some("decline"), _) => answered(ApprovalAnswer::Denied(format!(
                    "the person at the client declined it (the `requestState` of call `{}`)",
                    claims.call_id
                ))),
                (Some(_), _) => answered(ApprovalAnswer::Denied(format!(
                    "the person at the client cancelled the approval (the `requestState` of call `{}`)",
                    claims.call_id
                ))),
                (None, _) => nobody(format!(
                    "the retry carried the `requestState` of call `{}` but no answer under `inputResponses.{APPROVAL_INPUT}`; the state is used up",
                    claims.call_id
                )),
            }
        })
    }

    fn channel(&self) -> Channel {
        Channel::Elicitation
    }

    fn answers_later(&self) -> bool {
        true
    }

    fn answerer(&self, request: &ApprovalRequest) -> Option<AnsweredBy> {
        Some(AnsweredBy::principal(&request.principal))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> RequestStateClaims {
        RequestStateClaims {
            call_id: String::from("01J0000000000000000000000A"),
            principal: String::from("alice"),
            tool: String::from("s__write"),
            arguments_sha256: "ab".repeat(32),
            expires_ms: 1_000,
        }
    }

    #[test]
    fn a_sealed_state_opens_to_its_claims_under_its_key_only() {
        let key = Key::from_bytes([7; 32]);
        let sealed = seal(&key, &claims());
        assert_eq!(open(&key, &sealed).unwrap(), claims());
        let other = Key::from_bytes([8; 32]);
        assert_eq!(open(&other, &sealed).unwrap_err(), StateProblem::Tampered);
    }

    #[test]
    fn a_state_changed_anywhere_is_refused_as_tampered() {
        let key = Key::from_bytes([7; 32]);
        let sealed = seal(&key, &claims());
        // Another principal written into the payload, the MAC kept.
        let mut changed = claims();
        changed.principal = String::from("bob");
        let forged_payload = hex::encode(serde_json::to_vec(&changed).unwrap());
        let mac = sealed.rsplit('.').next().unwrap();
        let forged = format!("{STATE_PREFIX}{forged_payload}.{mac}");
        assert_eq!(open(&key, &forged).unwrap_err(), StateProblem::Tampered);
        for garbage in [
            "",
            "tw1.",
            "tw1.zz.00",
            "not a state",
            &sealed[..sealed.len() - 1],
        ] {
            assert_eq!(
                open(&key, garbage).unwrap_err(),
                StateProblem::Tampered,
                "{garbage}"
            );
        }
        // The same payload in uppercase hex: one state has one spelling.
        let (payload, mac) = sealed
            .strip_prefix(STATE_PREFIX)
            .unwrap()
            .split_once('.')
            .unwrap();
        let shouted = format!("{STATE_PREFIX}{}.{mac}", payload.to_uppercase());
        assert_eq!(open(&key, &shouted).unwrap_err(), StateProblem::Tampered);
        let long = "a".repeat(MAX_REQUEST_STATE_BYTES + 1);
        assert!(matches!(
            open(&key, &long),
            Err(StateProblem::TooLong { .. })
        ));
    }
}
