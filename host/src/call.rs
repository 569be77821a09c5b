//! The call path: one `tools/call` from validation to the capped result, every step audited.
//!
//! For each call ([`CallPath::call`]), in this order:
//!
//! 1. **Lookup.** A name that is not a registered tool is refused.
//! 2. **Hidden parameters.** A denied or fixed parameter set by the call is refused by name,
//!    even where the narrowed schema would accept extra properties: it is never silently
//!    dropped or rewritten.
//! 3. **Validation.** The arguments are validated against the narrowed schema the model saw,
//!    under the tool's dialect; the fixed values are set; the final arguments are validated
//!    against the server's original schema. Validators are built once per tool, on its first
//!    call, with the `jsonschema` crate offline (its file and network reference resolution are
//!    compiled out and a reference outside the document is refused; load has already refused
//!    such schemas). Messages name the place (`instance path`) but not the value, so that a
//!    refusal quotes no argument into the audit log.
//! 4. **Decision.** The policy component decides on the canonical final arguments and their
//!    SHA-256. `deny` refuses with the policy's reason. `hold` asks the [`Approver`] of the
//!    call's [`CallContext`], bounded by the approval timeout (no answer in time is a deny);
//!    while it waits, a progress notification goes out every
//!    [`CallSettings::held_progress_interval`] when the client asked for progress.
//! 5. **Forward.** The call goes to the server with the fixed values set, bounded by the call
//!    timeout; dropping the future of [`CallPath::call`] cancels it upstream
//!    (`notifications/cancelled`). Progress notifications from the server pass through.
//! 6. **Result.** The server's result is untrusted: only `content`, `structuredContent` and
//!    `isError` are kept; `isError` becomes a tool error that quotes the server's text (capped);
//!    `structuredContent` must match the tool's `outputSchema` when it has one; what passes
//!    [`CallSettings::max_result_bytes`] is cut and marked `[toolward: truncated N bytes]`.
//!    The cap counts each content item's JSON, not only its text, so a million empty blocks
//!    cannot pass it; a `structuredContent` whose structure alone (keys, numbers,
//!    punctuation) is past the cap is left out, and the content says so. Text is passed on as
//!    the server sent it: hidden characters (escape sequences, zero-width and bidirectional
//!    characters) are not marked for the model.
//!
//! Every failure is a tool error (a `CallToolResult` with `isError: true`, as the MCP
//! specification 2025-11-25 asks for validation failures), never an `Err` a caller could
//! ignore, and every call leaves audit records: `call-received`, then `decision` (on disk
//! before anything is forwarded), `approval-asked` and `approval-answered` for a held call,
//! `forwarded`, and exactly one of `result` or `refusal` at the end. A call that cannot write
//! a record that must precede an action does not take that action.
//!
//! Records are grouped by what they precede, each group one `write`: an allowed call writes
//! `call-received`, `decision` and `forwarded` together and syncs once before forwarding
//! (with `audit.sync: always`), then `result` without waiting for a sync; a held call syncs
//! once before asking (`call-received`, `decision`, `approval-asked`) and once more before
//! going on (`approval-answered`, then `forwarded` or the refusal); a denied call syncs its
//! `decision` with its `refusal` before the answer. A call refused before its decision
//! writes its `call-received` and `refusal` together, unsynced (no action follows).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::identity::{Approvers, HeldCall};
use crate::ids::{new_ulid, now_ms};

use serde_json::{Map, Value as Json, json};
use tokio::sync::mpsc::UnboundedSender;

use crate::approval::{Answer, AnsweredBy, ApprovalAnswer, ApprovalRequest, Approver};
use crate::audit::AuditStore;
use crate::audit::{AuditDecision, AuditEvent, AuditKind, ComponentHashes};
use crate::canonical::{self, Value};
use crate::component::{CallView, Decision, Labels, Policy};
use crate::config::{self, Config};
use crate::facts::{Change, FactKeys, FactScopes, FactStore, Facts};
use crate::labels::{LabelKey, LabelSettings, LabelStore, MemoryLabels};
use crate::registry::{PrincipalRefusal, PrincipalUpstream, RegisteredTool, Registry};
use crate::schema::Dialect;
use crate::schema::validator::build_validator;
use crate::store::RequestStateLedger;
use crate::telemetry::{CallTrace, Telemetry};
use crate::text;
use crate::transport::Upstream;

/// How often a held call sends a progress notification while it waits for an approval, when
/// the client sent a `progressToken`: some clients give up on a call after 60 s of silence.
pub const HELD_PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// Most validation errors quoted in one refusal; the rest are counted.
pub const MAX_VALIDATION_ERRORS: usize = 5;

/// The name of the `tracing` span each call runs in ([`CallPath::call`]): `toolward.call`.
pub const CALL_SPAN: &str = "toolward.call";

pub use crate::text::MAX_QUOTED_BYTES;

/// The marker written where content was cut at the result cap; `{}` is the count of bytes
/// cut.
const TRUNCATION_MARKER: &str = "[toolward: truncated {} bytes]";

/// The text item added when `structuredContent` is left out because its structure alone
/// (keys, numbers, punctuation) is past the result cap; `{}` is its size in bytes.
const STRUCTURED_DROPPED_MARKER: &str =
    "[toolward: structured content of {} bytes left out at the result cap]";

/// The settings of the call path. Defaults: the `DEFAULT_*` limits of `crate::config`
/// (call timeout 300 s, approval timeout 120 s, result cap 1 MiB), arguments not recorded,
/// progress every `HELD_PROGRESS_INTERVAL` while held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSettings {
    /// How long the server has to answer one `tools/call`.
    pub call_timeout: Duration,
    /// How long a person has to answer an approval; no answer in time is a deny.
    pub approval_timeout: Duration,
    /// The cap on a result passed to the client, in bytes: applied to the `content` items
    /// together (each item's JSON, its text counted in UTF-8 bytes) and, separately, to
    /// `structuredContent` (servers often send the same text in both), whose strings are cut
    /// to fit with the rest of its JSON.
    pub max_result_bytes: usize,
    /// Whether audit records carry the canonical arguments themselves, not only their hash.
    pub record_arguments: bool,
    /// Result-decision records hold the reviewed result as received
    /// (`audit.record_results`).
    pub record_results: bool,
    /// How often a held call sends a progress notification.
    pub held_progress_interval: Duration,
    /// Per server, the call timeout and result cap its own `limits` set where they differ
    /// from the two above (`mcpServers.NAME.limits`); a server not here has those.
    pub servers: BTreeMap<String, ServerCallLimits>,
    /// Who may answer held calls (`approvers`): an approval by anyone else does not count,
    /// and a call whose client would answer its own is asked through the queue instead.
    pub approvers: Approvers,
}

/// A server's own call timeout and result cap ([`CallSettings::servers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerCallLimits {
    /// How long this server has to answer one `tools/call`.
    pub call_timeout: Duration,
    /// The cap on one of this server's results passed to the client, in bytes.
    pub max_result_bytes: usize,
}

impl Default for CallSettings {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_millis(config::DEFAULT_CALL_TIMEOUT_MS),
            approval_timeout: Duration::from_millis(config::DEFAULT_APPROVAL_TIMEOUT_MS),
            max_result_bytes: usize::try_from(config::DEFAULT_MAX_RESULT_BYTES)
                .unwrap_or(usize::MAX),
            record_arguments: false,
            record_results: false,
            held_progress_interval: HELD_PROGRESS_INTERVAL,
            servers: BTreeMap::new(),
            approvers: Approvers::default(),
        }
    }
}

impl CallSettings {
    /// The settings a config file gives: its limits (each server's own where it sets
    /// them) and `audit.record_arguments`, `audit.record_results`.
    pub fn from_config(config: &Config) -> Self {
        let limits_of = |limits: &config::Limits| ServerCallLimits {
            call_timeout: limits.call_timeout(),
            max_result_bytes: usize::try_from(limits.max_result_bytes).unwrap_or(usize::MAX),
        };
        let top = limits_of(&config.limits);
        let servers = config
            .servers
            .iter()
            .map(|(name, server)| (name.clone(), limits_of(&server.limits)))
            .filter(|(_, limits)| *limits != top)
            .collect();
        Self {
            call_timeout: top.call_timeout,
            approval_timeout: config.limits.approval_timeout(),
            max_result_bytes: top.max_result_bytes,
            record_arguments: config.audit.record_arguments,
            record_results: config.audit.record_results,
            held_progress_interval: HELD_PROGRESS_INTERVAL,
            servers,
            approvers: config.approvers.clone(),
        }
    }

    /// The call timeout and result cap of `server`: its own, or the top-level ones.
    pub fn limits_of(&self, server: &str) -> ServerCallLimits {
        self.servers
            .get(server)
            .copied()
            .unwrap_or(ServerCallLimits {
                call_timeout: self.call_timeout,
                max_result_bytes: self.max_result_bytes,
            })
    }

    /// The longest call timeout of any server.
    pub fn longest_call_timeout(&self) -> Duration {
        self.servers
            .values()
            .map(|limits| limits.call_timeout)
            .fold(self.call_timeout, Duration::max)
    }
}

/// Who makes a call and how to reach a person about it.
#[derive(Clone)]
pub struct CallContext {
    /// Who asked (the configured principal over stdio, the token's name over HTTP).
    pub principal: String,
    /// The principal's attributes, name and JSON text (claims of its OAuth access token over
    /// HTTP; empty otherwise): `principal-attributes` of every decision.
    pub principal_attributes: Vec<(String, String)>,
    /// The client connection the call came through.
    pub session: String,
    /// Who is asked when the policy holds the call.
    pub approver: Arc<dyn Approver>,
    /// Where `notifications/progress` parameters go (objects with `progress`, and optionally
    /// `total` and `message`; their `progressToken` is the sender's to replace), when the
    /// client asked for progress.
    pub progress: Option<UnboundedSender<Json>>,
    /// The W3C `traceparent` of the request's `params._meta`, when it had one: the call's
    /// span continues that trace (see `crate::telemetry`).
    pub traceparent: Option<String>,
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("principal", &self.principal)
            .field("principal_attributes", &self.principal_attributes)
            .field("session", &self.session)
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// Refused before the policy decided: unknown tool, hidden parameter, invalid arguments,
    /// an audit record that could not be written, a server that is not connected.
    Refused,
    /// The policy denied it.
    Denied,
    /// The policy held it and nobody approved it (denied or timed out).
    NotApproved,
    /// Forwarded after the policy allowed it.
    Allowed,
    /// Forwarded after the policy held it and a person approved it.
    Approved,
}

impl CallOutcome {
    /// Whether the call reached the server.
    pub fn forwarded(self) -> bool {
        matches!(self, CallOutcome::Allowed | CallOutcome::Approved)
    }

    /// The outcome's name in metrics and spans: `refused`, `denied`, `not-approved`,
    /// `allowed`, `approved`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Refused => "refused",
            CallOutcome::Denied => "denied",
            CallOutcome::NotApproved => "not-approved",
            CallOutcome::Allowed => "allowed",
            CallOutcome::Approved => "approved",
        }
    }
}

/// The end of one call.
#[derive(Debug, Clone)]
pub struct CallResult {
    /// A `CallToolResult` object: `content`, `isError`, and `structuredContent` when the
    /// server sent one. Refusals and failures are tool errors (`isError: true`).
    pub result: Json,
    /// The call's id (a ULID), as in the audit records.
    pub call_id: String,
    /// The tool's exposed name as the caller gave it (untrusted: escape it for display).
    pub tool: String,
    /// How it ended.
    pub outcome: CallOutcome,
}

impl CallResult {
    /// Whether `result` is a tool error.
    pub fn is_error(&self) -> bool {
        self.result.get("isError").and_then(Json::as_bool) == Some(true)
    }

    /// The text of `result`'s text content items, joined by line breaks.
    pub fn text(&self) -> String {
        content_text(&self.result)
    }
}

/// Why a call was refused or failed: the text of the tool error the client receives, and the
/// reason in the audit record. Each names the tool and server it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The name is not a registered tool.
    #[error(
        "unknown tool `{tool}`: toolward serves only the tools its operator classified and pinned"
    )]
    UnknownTool {
        /// The name as the client sent it (quoted safely).
        tool: String,
    },
    /// The name is a tool the load kept out, or one of a server that did not load.
    #[error("tool `{tool}` is not available: {reason}")]
    Unavailable {
        /// The name as the client sent it (quoted safely).
        tool: String,
        /// Why, from the load report.
        reason: String,
    },
    /// The call sets a parameter the operator denied.
    #[error(
        "tool `{tool}` on server `{server}` refuses parameter `{parameter}`: the operator denied it"
    )]
    DeniedParameter {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The parameter.
        parameter: String,
    },
    /// The call sets a parameter the operator fixed.
    #[error(
        "tool `{tool}` on server `{server}` refuses parameter `{parameter}`: the operator fixed it to `{value}`"
    )]
    FixedParameter {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The parameter.
        parameter: String,
        /// The fixed value, canonical JSON.
        value: String,
    },
    /// The arguments do not match a schema.
    #[error("arguments of tool `{tool}` on server `{server}` do not match its {which}: {problems}")]
    InvalidArguments {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// `input schema` or `original input schema (after fixed values were set)`.
        which: &'static str,
        /// The problems, by instance path.
        problems: String,
    },
    /// A schema could not be compiled into a validator.
    #[error(
        "the {which} of tool `{tool}` on server `{server}` cannot be used for validation: {reason}"
    )]
    Schema {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// Which schema.
        which: &'static str,
        /// The validator's message.
        reason: String,
    },
    /// The policy denied the call.
    #[error("the policy denied the call of tool `{tool}` on server `{server}`: {reason}")]
    Denied {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The policy's reason.
        reason: String,
    },
    /// The policy held the call and it was not approved.
    #[error("the call of tool `{tool}` on server `{server}` was held and not approved: {reason}")]
    NotApproved {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The answer, or the timeout.
        reason: String,
    },
    /// An audit record that must precede the next step could not be written.
    #[error(
        "the call of tool `{tool}` on server `{server}` was refused because the audit log failed: {reason}"
    )]
    Audit {
        /// Exposed tool name (or the name as sent).
        tool: String,
        /// Server name (empty for an unknown tool).
        server: String,
        /// The audit log's message.
        reason: String,
    },
    /// The fact counters the decision needs could not be read (`docs/facts.md`): no
    /// decision is made without its facts.
    #[error(
        "the call of tool `{tool}` on server `{server}` was refused because its facts could not be read: {reason}"
    )]
    Facts {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The store's message.
        reason: String,
    },
    /// The server of the tool has no live connection.
    #[error("server `{server}` of tool `{tool}` is not connected: {reason}")]
    NotConnected {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// Why: it failed and is being restarted, or it failed for good.
        reason: String,
    },
    /// The tool's server takes each principal's calls under that principal's own grant
    /// (`oauth.per_principal`), and the call's principal has none it accepts: the reason
    /// names the command that signs the principal in. Nothing was sent.
    #[error("tool `{tool}` on server `{server}` cannot be called as principal `{}`: {reason}", crate::text::quote(.principal, crate::text::MAX_QUOTED_BYTES))]
    SignIn {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The call's principal.
        principal: String,
        /// Why, and the command (`toolward auth login SERVER --principal P`).
        reason: String,
    },
    /// The tool was taken out of service after the load (its restarted server no longer
    /// matched its pin).
    #[error("tool `{tool}` on server `{server}` was withdrawn: {reason}")]
    Withdrawn {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// Why.
        reason: String,
    },
    /// Forwarding failed: the server died, timed out, or answered with a protocol error.
    #[error("the call of tool `{tool}` on server `{server}` failed: {reason}")]
    Upstream {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The transport's message.
        reason: String,
    },
    /// The policy component's review withheld the result (`results@0.3.0`), or the review
    /// failed, or its labels could not be kept: the server acted, the model does not see
    /// what it returned.
    #[error("the result of tool `{tool}` on server `{server}` was withheld: {reason}")]
    ResultWithheld {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// Why, from the review or the host.
        reason: String,
    },
    /// The session's labels could not be read; no decision is made without them.
    #[error(
        "the call of tool `{tool}` on server `{server}` was refused because its session's labels could not be read: {reason}"
    )]
    Labels {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The store's message.
        reason: String,
    },
    /// The server's result is not a `CallToolResult`.
    #[error(
        "server `{server}` answered the call of tool `{tool}` with a malformed result: {reason}"
    )]
    MalformedResult {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server reported a tool error (`isError: true`).
    #[error("tool `{tool}` on server `{server}` reported an error: {text}")]
    ToolError {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The server's text, capped.
        text: String,
    },
    /// The result's `structuredContent` does not match the tool's `outputSchema`.
    #[error(
        "tool `{tool}` on server `{server}` returned structured content that does not match its output schema: {problems}"
    )]
    OutputMismatch {
        /// Exposed tool name.
        tool: String,
        /// Server name.
        server: String,
        /// The problems.
        problems: String,
    },
}

/// Validators of one tool, built on its first call.
struct ToolValidators {
    input: Result<jsonschema::Validator, String>,
    original: Result<jsonschema::Validator, String>,
    output: Option<Result<jsonschema::Validator, String>>,
}

/// The call path over one registry and one policy. `Send + Sync`; share it behind an `Arc`,
/// one for every connection.
pub struct CallPath {
    registry: Arc<Registry>,
    policy: Arc<Policy>,
    audit: Option<Arc<dyn AuditStore>>,
    settings: CallSettings,
    components: ComponentHashes,
    /// The approvals store's approver, when the start named one (the gateway asks it when
    /// the client cannot be asked through elicitation).
    queue: Option<Arc<dyn Approver>>,
    validators: HashMap<String, OnceLock<ToolValidators>>,
    facts: Option<Arc<dyn FactStore>>,
    /// The scopes whose facts the policy reads: only these are counted.
    fact_scopes: FactScopes,
    telemetry: Option<Arc<Telemetry>>,
    ledger: Option<Arc<dyn RequestStateLedger>>,
    /// Where sessions' labels live (`crate::labels`).
    labels: Arc<dyn LabelStore>,
    /// Whether the policy component reviews results ([`Policy::reviews`] names some):
    /// when not, no result is copied into it.
    reviews: bool,
    /// Calls between the start and the end of [`CallPath::call`]: a call alone syncs the
    /// audit log on its own thread (see [`Run::record`]).
    in_flight: AtomicUsize,
}

impl fmt::Debug for CallPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallPath")
            .field("tools", &self.validators.len())
            .field("policy", &self.policy)
            .field("audit", &self.audit.as_ref().map(|store| store.name()))
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl CallPath {
    /// A call path over the tools of `registry`, deciding with `policy`, recording to `audit`
    /// (none: no records; for tests and embedders that audit otherwise). `components` is
    /// stamped on every record the path writes.
    pub fn new(
        registry: Arc<Registry>,
        policy: Arc<Policy>,
        audit: Option<Arc<dyn AuditStore>>,
        settings: CallSettings,
        components: ComponentHashes,
    ) -> Self {
        let validators = registry
            .tools()
            .map(|tool| (tool.exposed_name.clone(), OnceLock::new()))
            .collect();
        let reviewed = policy.reviews();
        let reviews = !reviewed.reviews.is_empty();
        let label_settings = LabelSettings::from_reviews(reviewed);
        Self {
            registry,
            policy,
            audit,
            settings,
            components,
            queue: None,
            validators,
            facts: None,
            fact_scopes: FactScopes::ALL,
            telemetry: None,
            ledger: None,
            labels: Arc::new(MemoryLabels::new(label_settings)),
            reviews,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Keeps sessions' labels in `store` (default: in memory, ranking confidentiality by the
    /// levels the policy component names).
    #[must_use]
    pub fn with_labels(mut self, store: Arc<dyn LabelStore>) -> Self {
        self.labels = store;
        self
    }

    /// Counts calls in `store` and gives every decision its facts (`docs/facts.md`).
    /// Without a store, decisions get no facts: a policy limit then cannot be checked and
    /// denies.
    #[must_use]
    pub fn with_facts(mut self, store: Arc<dyn FactStore>) -> Self {
        self.facts = Some(store);
        self
    }

    /// Counts (and gives the policy) only the facts of `scopes`, those the configured
    /// policy reads (`crate::load::Components::fact_scopes`); `FactScopes::NONE`: no
    /// counter is touched and decision records carry no `facts`. Default: every scope.
    #[must_use]
    pub fn with_fact_scopes(mut self, scopes: FactScopes) -> Self {
        self.fact_scopes = scopes;
        self
    }

    /// The same path, whose gateways redeem 2026-07-28 `requestState`s in `ledger` (the
    /// PostgreSQL store's, shared by a fleet) instead of the state folder's.
    #[must_use]
    pub fn with_ledger(mut self, ledger: Arc<dyn RequestStateLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// The `requestState` ledger the start set, when it set one.
    pub fn ledger(&self) -> Option<&Arc<dyn RequestStateLedger>> {
        self.ledger.as_ref()
    }

    /// The same path, whose gateways ask `queue` (the approvals store's approver) when the
    /// client cannot be asked through elicitation.
    #[must_use]
    pub fn with_queue(mut self, queue: Arc<dyn Approver>) -> Self {
        self.queue = Some(queue);
        self
    }

    /// The approvals store's approver, when the start set one.
    pub fn queue(&self) -> Option<&Arc<dyn Approver>> {
        self.queue.as_ref()
    }

    /// The path tracing every call to `telemetry` (see `crate::telemetry`); `None`: off.
    /// Apart from it, every call runs in a `tracing` span ([`CALL_SPAN`]).
    #[must_use]
    pub fn with_telemetry(mut self, telemetry: Option<Arc<Telemetry>>) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// The registry the path calls into.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The settings.
    pub fn settings(&self) -> &CallSettings {
        &self.settings
    }

    /// The audit log the path records to, if any (the approvals queue records forged
    /// answers there).
    pub fn audit(&self) -> Option<&Arc<dyn AuditStore>> {
        self.audit.as_ref()
    }

    /// One call of the tool the model calls `exposed_name`, through every step of the module
    /// documentation. Never fails: a refusal or a failure is a tool error in
    /// [`CallResult::result`], and is audited. Dropping the future cancels the call (upstream
    /// too) and records that it was cancelled.
    ///
    /// The call runs in a `tracing` span, [`CALL_SPAN`], a child of the caller's current
    /// span (so an embedder's subscriber sees each call inside its own request's span), with
    /// the fields `call_id`, `tool`, `server` and `principal` (names escaped as text: a
    /// server or a caller wrote them); every event of the call path is inside it.
    pub async fn call(
        &self,
        exposed_name: &str,
        arguments: Option<Map<String, Json>>,
        ctx: &CallContext,
    ) -> CallResult {
        use tracing::Instrument as _;
        let call_id = new_ulid();
        let tool = self.registry.get(exposed_name);
        let span = tracing::info_span!(
            CALL_SPAN,
            call_id = %call_id,
            tool = %crate::text::escape(exposed_name),
            server = %crate::text::escape(tool.map_or("", |tool| tool.server.as_str())),
            principal = %crate::text::escape(&ctx.principal),
        );
        self.call_in_span(call_id, exposed_name, tool, arguments, ctx)
            .instrument(span)
            .await
    }

    /// [`call`](Self::call) inside its span.
    async fn call_in_span(
        &self,
        call_id: String,
        exposed_name: &str,
        tool: Option<&RegisteredTool>,
        arguments: Option<Map<String, Json>>,
        ctx: &CallContext,
    ) -> CallResult {
        let _in_flight = InFlight::enter(&self.in_flight);
        let trace = CallTrace::start(
            self.telemetry.as_ref(),
            ctx.traceparent.as_deref(),
            exposed_name,
            tool.map_or("", |tool| tool.server.as_str()),
            &ctx.principal,
        );
        let mut run = Run {
            path: self,
            staged: std::sync::Mutex::new(Vec::new()),
            call_id: call_id.clone(),
            ctx,
            tool,
            exposed_name: quote(exposed_name),
            started: Instant::now(),
            finished: false,
            trace,
        };
        let (result, outcome) = match run.steps(arguments.unwrap_or_default()).await {
            Ok((result, outcome)) => (result, outcome),
            Err((error, outcome)) => {
                run.refuse(&error, outcome).await;
                (error_result(&error.to_string()), outcome)
            }
        };
        run.finished = true;
        std::mem::replace(&mut run.trace, CallTrace::off()).finish(outcome.as_str());
        CallResult {
            result,
            call_id,
            tool: exposed_name.to_owned(),
            outcome,
        }
    }

    /// The validators of `tool`, built on first use.
    fn validators(&self, tool: &RegisteredTool) -> Option<&ToolValidators> {
        let cell = self.validators.get(&tool.exposed_name)?;
        Some(cell.get_or_init(|| ToolValidators {
            input: build_validator(&tool.input_schema, tool.dialect),
            original: build_validator(&tool.original_schema, tool.dialect),
            output: tool.output_schema.as_ref().map(|schema| {
                let dialect = Dialect::of(schema).unwrap_or(tool.dialect);
                build_validator(schema, dialect)
            }),
        }))
    }
}

type StepError = (CallError, CallOutcome);

/// One call counted in [`CallPath::in_flight`] until dropped (a cancelled call included).
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The state of one call in flight.
struct Run<'a> {
    path: &'a CallPath,
    /// Records not yet written: the group the next action needs on record.
    staged: std::sync::Mutex<Vec<AuditEvent>>,
    call_id: String,
    ctx: &'a CallContext,
    tool: Option<&'a RegisteredTool>,
    exposed_name: String,
    started: Instant,
    finished: bool,
    /// The call's span, when telemetry is on.
    trace: CallTrace,
}

impl Drop for Run<'_> {
    /// A call dropped before it finished was cancelled (by the client, or its connection
    /// went away): its end goes on record all the same.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some(audit) = &self.path.audit {
            let mut event = self.event(AuditKind::Refusal);
            event.reason = Some(String::from(
                "the call was cancelled before it finished (the client cancelled it or went away)",
            ));
            event.duration_ms = Some(self.elapsed_ms());
            let mut group = self.take_staged();
            group.push(event);
            // Never waits: a drop runs on the async worker.
            if let Err(error) = audit.write(group) {
                tracing::error!(call_id = %self.call_id, "cannot record the cancellation of call `{}`: {error}", self.call_id);
            }
        }
    }
}

/// The connection a call goes out on: the server's (the operator's), or the call's
/// principal's own session with it (`oauth.per_principal`), held until the call ends.
enum Route {
    Shared(Upstream),
    Principal(PrincipalUpstream),
}

impl Route {
    fn upstream(&self) -> Option<&Upstream> {
        match self {
            Route::Shared(upstream) => Some(upstream),
            Route::Principal(held) => held.upstream(),
        }
    }
}

impl Run<'_> {
    /// The live connection a call of `tool` goes out on: its server's, or for a server that
    /// takes each principal's calls under its own grant, the call's principal's session,
    /// opened at its first call.
    async fn connected(&self, tool: &RegisteredTool) -> Result<Route, CallError> {
        let not_connected = |reason| CallError::NotConnected {
            tool: tool.exposed_name.clone(),
            server: tool.server.clone(),
            reason,
        };
        if let Some(route) = self
            .path
            .registry
            .principal_upstream(&tool.server, &self.ctx.principal)
            .await
        {
            return match route {
                Ok(held) => Ok(Route::Principal(held)),
                Err(PrincipalRefusal::SignIn(reason)) => Err(CallError::SignIn {
                    tool: tool.exposed_name.clone(),
                    server: tool.server.clone(),
                    principal: self.ctx.principal.clone(),
                    reason,
                }),
                Err(PrincipalRefusal::NotConnected(reason)) => Err(not_connected(reason)),
            };
        }
        match self.path.registry.upstream(&tool.server) {
            Some(Ok(upstream)) => Ok(Route::Shared(upstream)),
            Some(Err(reason)) => Err(not_connected(reason)),
            None => Err(not_connected(String::from("the load did not connect it"))),
        }
    }

    fn tool_name(&self) -> String {
        self.exposed_name.clone()
    }

    fn server_name(&self) -> String {
        self.tool.map(|t| t.server.clone()).unwrap_or_default()
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// An event of `kind` with the call's and the tool's fields.
    fn event(&self, kind: AuditKind) -> AuditEvent {
        let mut event = AuditEvent::new(kind);
        event.call_id = Some(self.call_id.clone());
        event.principal = Some(self.ctx.principal.clone());
        event.session = (!self.ctx.session.is_empty()).then(|| self.ctx.session.clone());
        event.tool = Some(self.exposed_name.clone());
        event.components = Some(self.path.components.clone());
        if let Some(tool) = self.tool {
            event.server = Some(tool.server.clone());
            event.upstream_tool = Some(tool.upstream_name.clone());
            event.effect = Some(tool.effect.as_str().to_owned());
            event.description_sha256 = Some(tool.description_sha256.clone());
            event.input_schema_sha256 = Some(tool.input_schema_sha256.clone());
        }
        event
    }

    /// Adds `event` to the group the next action needs on record.
    fn stage(&self, event: AuditEvent) {
        self.staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event);
    }

    fn take_staged(&self) -> Vec<AuditEvent> {
        std::mem::take(
            &mut *self
                .staged
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Writes the staged group with `event` in one `write`; with `audit.sync: always` it is
    /// on disk when this returns (one sync, shared with the calls in flight).
    async fn record(&self, event: AuditEvent) -> Result<(), String> {
        self.stage(event);
        let group = self.take_staged();
        let Some(audit) = self.path.audit.clone() else {
            return Ok(());
        };
        // Without a sync an append is one buffered write: cheaper here than the hop to a
        // blocking thread and back. A call alone syncs here too: the hop there and back adds
        // two cross-thread wake-ups to its sync (`BENCHMARKS.md` §0c), and with no other call
        // in flight there is nothing for the blocked thread to run and no group to commit
        // with. A log that waits for more than its disk (PostgreSQL) never blocks the worker.
        let alone = audit.syncs_inline() && self.path.in_flight.load(Ordering::Relaxed) <= 1;
        if !audit.waits() || alone {
            return audit
                .append_batch(group)
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        // Calls in flight: fsync blocks, so keep it off the async worker, where the others'
        // records join this one's sync (group commit).
        match tokio::task::spawn_blocking(move || audit.append_batch(group)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(error) => Err(format!("the audit writer stopped: {error}")),
        }
    }

    /// Writes the staged group with `event` in one `write`, without waiting for a sync (the
    /// next sync, or the log's timer, puts it on disk): for records no action waits for.
    fn record_unsynced(&self, event: AuditEvent) -> Result<(), String> {
        self.stage(event);
        let group = self.take_staged();
        let Some(audit) = &self.path.audit else {
            return Ok(());
        };
        audit.write(group).map_err(|e| e.to_string())
    }

    /// Writes a record that must precede the next step; failing, the call is refused.
    async fn record_or_refuse(&self, event: AuditEvent) -> Result<(), StepError> {
        self.record(event).await.map_err(|reason| {
            (
                CallError::Audit {
                    tool: self.tool_name(),
                    server: self.server_name(),
                    reason,
                },
                CallOutcome::Refused,
            )
        })
    }

    /// Records the refusal that ends the call.
    async fn refuse(&mut self, error: &CallError, outcome: CallOutcome) {
        let mut event = self.event(if outcome.forwarded() {
            AuditKind::Result
        } else {
            AuditKind::Refusal
        });
        event.reason = Some(error.to_string());
        event.duration_ms = Some(self.elapsed_ms());
        if outcome.forwarded() {
            event.is_error = Some(true);
        }
        // A refusal that answers a decision or an approval's answer goes on disk with them
        // before the answer; any other refusal precedes no action.
        let decided = self
            .staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|e| matches!(e.kind, AuditKind::Decision | AuditKind::ApprovalAnswered));
        let recorded = if decided {
            self.record(event).await
        } else {
            self.record_unsynced(event)
        };
        if let Err(reason) = recorded {
            tracing::error!(call_id = %self.call_id, "cannot record the end of call `{}`: {reason}", self.call_id);
        }
        self.finished = true;
    }

    async fn steps(
        &mut self,
        arguments: Map<String, Json>,
    ) -> Result<(Json, CallOutcome), StepError> {
        let refused = |error| (error, CallOutcome::Refused);
        let received =
            canonical::to_canonical(&Value::from_serde_json(&Json::Object(arguments.clone())));
        let mut event = self.event(AuditKind::CallReceived);
        event.arguments_sha256 = Some(canonical::sha256_hex(received.as_bytes()));
        if self.path.settings.record_arguments {
            event.arguments = Some(received);
        }
        // Written with the decision, or with the refusal that comes before one.
        self.stage(event);

        let Some(tool) = self.tool else {
            let tool = self.tool_name();
            return Err(refused(
                match self.path.registry.why_absent(&self.exposed_name) {
                    Some(reason) => CallError::Unavailable { tool, reason },
                    None => CallError::UnknownTool { tool },
                },
            ));
        };
        let name = || tool.exposed_name.clone();
        let server = || tool.server.clone();
        if let Some(reason) = self.path.registry.withdrawn(&tool.exposed_name) {
            return Err(refused(CallError::Withdrawn {
                tool: name(),
                server: server(),
                reason,
            }));
        }
        // A server that is down, or a principal that cannot be signed in to it, gets no
        // decision and no approval asked for nothing. A principal's session is held until
        // the call ends: it is not closed as idle while the call waits for an approval.
        let early = self.connected(tool).await.map_err(refused)?;

        self.trace.effect(tool.effect.as_str());
        let validating = self.trace.step("validate");
        // Step 2: hidden parameters, by name.
        for parameter in arguments.keys() {
            if tool.denied.iter().any(|denied| denied == parameter) {
                return Err(refused(CallError::DeniedParameter {
                    tool: name(),
                    server: server(),
                    parameter: quote(parameter),
                }));
            }
            if let Some((_, value)) = tool.fixed.iter().find(|(fixed, _)| fixed == parameter) {
                return Err(refused(CallError::FixedParameter {
                    tool: name(),
                    server: server(),
                    parameter: quote(parameter),
                    value: quote(&canonical::to_canonical(value)),
                }));
            }
        }

        // Step 3: validation, fixed values, validation against the original.
        let Some(validators) = self.path.validators(tool) else {
            return Err(refused(CallError::UnknownTool { tool: name() }));
        };
        let mut arguments = Json::Object(arguments);
        check(&validators.input, &arguments, "input schema", tool).map_err(refused)?;
        if let Json::Object(map) = &mut arguments {
            for (parameter, value) in &tool.fixed {
                map.insert(parameter.clone(), value.to_serde_json());
            }
        }
        check(
            &validators.original,
            &arguments,
            "original input schema (after fixed values were set)",
            tool,
        )
        .map_err(refused)?;
        let Json::Object(arguments) = arguments else {
            return Err(refused(CallError::InvalidArguments {
                tool: name(),
                server: server(),
                which: "input schema",
                problems: String::from("the arguments are not an object"),
            }));
        };
        // Hashed from the very map that is forwarded, so the hash describes what the server
        // receives.
        let canonical_arguments =
            canonical::to_canonical(&Value::from_serde_json(&Json::Object(arguments.clone())));
        let arguments_sha256 = canonical::sha256_hex(canonical_arguments.as_bytes());
        drop(validating);

        // Step 4: the decision, on the facts read (and this call reserved) at its time;
        // only of the scopes the policy reads, and none at all (no counter touched) when it
        // reads none.
        let time_ms = now_ms();
        let keys = FactKeys::of(
            &tool.server,
            &tool.upstream_name,
            &self.ctx.principal,
            &self.ctx.session,
        )
        .only(self.path.fact_scopes);
        let facts = match &self.path.facts {
            _ if self.path.fact_scopes.is_empty() => None,
            Some(store) if !keys.is_empty() => {
                Some(store.reserve(&keys, time_ms).await.map_err(|error| {
                    refused(CallError::Facts {
                        tool: name(),
                        server: server(),
                        reason: error.to_string(),
                    })
                })?)
            }
            _ => Some(Facts::default()),
        };
        let key = LabelKey::of(&self.ctx.session, &self.ctx.principal);
        let labels = match key {
            // Labels are joined only where results are reviewed, and a session is one
            // client connection to this gateway: when this path reviews nothing, the
            // session has none, and the store (a database round trip in a fleet) is not
            // asked. A principal's labels may come from another gateway of the fleet.
            LabelKey::Session(_) if !self.path.reviews => Labels::default(),
            _ => self.path.labels.get(&key, time_ms).await.map_err(|error| {
                refused(CallError::Labels {
                    tool: name(),
                    server: server(),
                    reason: error.to_string(),
                })
            })?,
        };
        let view = CallView {
            id: self.call_id.clone(),
            server: server(),
            tool: tool.upstream_name.clone(),
            effect: tool.effect,
            arguments: canonical_arguments.clone(),
            arguments_sha256: arguments_sha256.clone(),
            principal: self.ctx.principal.clone(),
            session: self.ctx.session.clone(),
            principal_attributes: self.ctx.principal_attributes.clone(),
            labels,
            time_ms,
            facts: facts.as_ref().map(Facts::to_pairs).unwrap_or_default(),
        };
        // Inline, not on the blocking pool: a decision takes microseconds
        // (`benches/decide.rs`), less than the hop to another thread and back, and fuel
        // bounds the worst (`DEFAULT_DECIDE_FUEL` ends an endless loop in tens of ms).
        let deciding = self.trace.step("decide");
        let answer = self.path.policy.answer(&view);
        drop(deciding);
        let decision = answer.decision;
        let with_arguments = |mut event: AuditEvent| {
            event.arguments_sha256 = Some(arguments_sha256.clone());
            if self.path.settings.record_arguments {
                event.arguments = Some(canonical_arguments.clone());
            }
            event
        };
        let mut event = with_arguments(self.event(AuditKind::Decision));
        let (verdict, reason) = match &decision {
            Decision::Allow => (AuditDecision::Allow, None),
            Decision::Deny(reason) => (AuditDecision::Deny, Some(reason.clone())),
            Decision::Hold(reason) => (AuditDecision::Hold, Some(reason.clone())),
        };
        self.trace.decision(match verdict {
            AuditDecision::Allow => "allow",
            AuditDecision::Deny => "deny",
            AuditDecision::Hold => "hold",
        });
        event.decision = Some(verdict);
        event.reason = reason;
        event.determined_by = answer.determined_by;
        event.policy_time_ms = Some(time_ms);
        event.facts = facts.as_ref().map(|facts| facts.as_map().clone());
        if view.labels != Labels::default() {
            event.labels = Some(view.labels.clone());
        }
        // The reservation stands for an allowed call; a held one counts as held, a denied
        // one not at all.
        match &decision {
            Decision::Allow => {}
            Decision::Deny(_) => self.count(&keys, time_ms, Change::Release).await,
            Decision::Hold(_) => self.count(&keys, time_ms, Change::Hold).await,
        }
        // Written (and synced) with what follows it: `forwarded`, `approval-asked` or the
        // refusal, before that action.
        self.stage(event);

        let outcome = match decision {
            Decision::Allow => CallOutcome::Allowed,
            Decision::Deny(reason) => {
                return Err((
                    CallError::Denied {
                        tool: name(),
                        server: server(),
                        reason,
                    },
                    CallOutcome::Denied,
                ));
            }
            Decision::Hold(reason) => {
                let request = ApprovalRequest {
                    call_id: self.call_id.clone(),
                    exposed_tool: name(),
                    server: server(),
                    tool: tool.upstream_name.clone(),
                    effect: tool.effect.as_str().to_owned(),
                    arguments: canonical_arguments.clone(),
                    arguments_sha256: arguments_sha256.clone(),
                    reason: with_labels(&reason, &view.labels),
                    description_sha256: tool.description_sha256.clone(),
                    input_schema_sha256: tool.input_schema_sha256.clone(),
                    principal: self.ctx.principal.clone(),
                    session: self.ctx.session.clone(),
                    time_ms: now_ms(),
                    result: None,
                };
                let mut event = with_arguments(self.event(AuditKind::ApprovalAsked));
                event.decision = Some(AuditDecision::Hold);
                event.reason = Some(reason);
                self.record_or_refuse(event).await?;
                let asked = Instant::now();
                let waiting = self.trace.step("approval wait");
                let answer = self.ask(request, tool).await;
                drop(waiting);
                let mut event = with_arguments(self.event(AuditKind::ApprovalAnswered));
                event.duration_ms =
                    Some(u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX));
                let refusal = match &answer.verdict {
                    ApprovalAnswer::Approved => {
                        event.decision = Some(AuditDecision::Allow);
                        event.reason = Some(format!("approved ({})", answer.by));
                        self.count(&keys, now_ms(), Change::Forward).await;
                        None
                    }
                    ApprovalAnswer::Denied(reason) => {
                        event.decision = Some(AuditDecision::Deny);
                        event.reason = Some(format!("denied ({}): {reason}", answer.by));
                        Some(format!("denied: {reason}"))
                    }
                    ApprovalAnswer::TimedOut => {
                        let reason = format!(
                            "no answer within {} ms",
                            self.path.settings.approval_timeout.as_millis()
                        );
                        event.decision = Some(AuditDecision::Deny);
                        event.reason = Some(reason.clone());
                        Some(reason)
                    }
                };
                event.answered_by = Some(answer.by);
                // Synced with what follows: `forwarded`, or the refusal before the answer.
                self.stage(event);
                if let Some(reason) = refusal {
                    return Err((
                        CallError::NotApproved {
                            tool: name(),
                            server: server(),
                            reason,
                        },
                        CallOutcome::NotApproved,
                    ));
                }
                CallOutcome::Approved
            }
        };

        // Step 5: forward (the server may have failed while the call was held).
        let route = self.connected(tool).await.map_err(refused)?;
        drop(early);
        let Some(upstream) = route.upstream() else {
            return Err(refused(CallError::NotConnected {
                tool: name(),
                server: server(),
                reason: String::from("its session was closed"),
            }));
        };
        let mut event = with_arguments(self.event(AuditKind::Forwarded));
        event.decision = Some(AuditDecision::Allow);
        self.record_or_refuse(event).await?;
        let forwarding = self.trace.step("forward");
        let mut meta = Map::new();
        if let Some(traceparent) = forwarding.traceparent() {
            meta.insert(String::from("traceparent"), Json::String(traceparent));
        }
        let answer = upstream
            .call_tool_with_meta(
                &tool.upstream_name,
                arguments,
                self.path.settings.limits_of(&tool.server).call_timeout,
                self.ctx.progress.clone(),
                meta,
            )
            .await;
        self.trace.upstream(forwarding.elapsed());
        drop(forwarding);
        let raw = answer.map_err(|error| {
            (
                CallError::Upstream {
                    tool: name(),
                    server: server(),
                    reason: error.to_string(),
                },
                outcome,
            )
        })?;

        // Step 6: the untrusted result, reviewed when the policy reviews results.
        let received_bytes = serde_json::to_vec(&raw).unwrap_or_default();
        let (result, truncated) = self
            .result(raw, tool, validators, &view, &received_bytes)
            .await
            .map_err(|error| (error, outcome))?;
        let mut event = self.event(AuditKind::Result);
        event.is_error = Some(false);
        event.result_sha256 = Some(canonical::sha256_hex(&received_bytes));
        event.result_bytes = Some(received_bytes.len() as u64);
        event.truncated = Some(truncated);
        event.duration_ms = Some(self.elapsed_ms());
        if let Err(reason) = self.record_unsynced(event) {
            // The server has acted; withholding its answer would only hide that it did.
            tracing::error!(call_id = %self.call_id, "cannot record the result of call `{}`: {reason}", self.call_id);
        }
        self.finished = true;
        Ok((result, outcome))
    }

    /// Settles this call's counts; a store that fails leaves them off by this call (the
    /// decision stands), which is logged.
    async fn count(&self, keys: &FactKeys, at_ms: u64, change: Change) {
        let Some(store) = &self.path.facts else {
            return;
        };
        if keys.is_empty() {
            return;
        }
        if let Err(error) = store.record(keys, at_ms, change).await {
            tracing::warn!(call_id = %self.call_id, "cannot count call `{}` ({change:?}): {error}", self.call_id);
        }
    }

    /// Asks the approver, bounded by the approval timeout, sending progress meanwhile. With
    /// approvers named, a client that would answer its own call (elicitation, the calling
    /// terminal) is passed over for the queue, and an approval by someone the rules do not
    /// name for the call is a deny saying so.
    async fn ask(&self, request: ApprovalRequest, tool: &RegisteredTool) -> Answer {
        let settings = &self.path.settings;
        let approvers = &settings.approvers;
        let holder_uid = Some(crate::identity::euid());
        fn held(request: &ApprovalRequest, holder_uid: Option<u32>) -> HeldCall<'_> {
            HeldCall {
                server: &request.server,
                effect: &request.effect,
                principal: &request.principal,
                holder_uid,
            }
        }
        let mut approver = &self.ctx.approver;
        if approvers.named()
            && let Some(who) = approver.answerer(&request)
            && let Err(why) = approvers.may_answer(&who, &held(&request, holder_uid))
            && let Some(queue) = &self.path.queue
        {
            tracing::info!(call_id = %self.call_id, "call `{}` is asked through the queue, not {}: {why}", self.call_id, who.channel.as_str());
            approver = queue;
        }
        let judged = approvers.named().then(|| request.clone());
        let answer = self.ask_bounded(approver, request, tool).await;
        let Some(request) = judged else {
            return answer;
        };
        if answer.verdict != ApprovalAnswer::Approved {
            return answer;
        }
        match approvers.may_answer(&answer.by, &held(&request, holder_uid)) {
            Ok(()) => answer,
            Err(why) => {
                tracing::warn!(call_id = %self.call_id, "the approval of call `{}` does not count: {why}", self.call_id);
                Answer {
                    verdict: ApprovalAnswer::Denied(format!("the approval does not count: {why}")),
                    by: answer.by,
                }
            }
        }
    }

    /// Asks `approver`, bounded by the approval timeout, sending progress meanwhile.
    async fn ask_bounded(
        &self,
        approver: &Arc<dyn Approver>,
        request: ApprovalRequest,
        tool: &RegisteredTool,
    ) -> Answer {
        let settings = &self.path.settings;
        let timed_out = || Answer {
            verdict: ApprovalAnswer::TimedOut,
            by: AnsweredBy::nobody(approver.channel()),
        };
        let asking = tokio::time::timeout(settings.approval_timeout, approver.ask(request));
        let Some(progress) = self.ctx.progress.clone() else {
            return asking.await.unwrap_or_else(|_| timed_out());
        };
        let message = format!(
            "waiting for an approval of tool `{}` on server `{}`",
            tool.exposed_name, tool.server
        );
        let keep_alive = async {
            let mut ticks = tokio::time::interval(settings.held_progress_interval);
            ticks.tick().await;
            let mut count: u64 = 0;
            loop {
                ticks.tick().await;
                count += 1;
                let _ = progress.send(json!({ "progress": count, "message": message }));
            }
        };
        tokio::select! {
            answer = asking => answer.unwrap_or_else(|_| timed_out()),
            () = keep_alive => timed_out(),
        }
    }
}

/// Validates `instance`; the problems, each with its instance path, values masked.
fn problems(validator: &jsonschema::Validator, instance: &Json) -> String {
    let mut shown = Vec::new();
    let mut more = 0usize;
    for error in validator.iter_errors(instance) {
        if shown.len() < MAX_VALIDATION_ERRORS {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() {
                String::from("/")
            } else {
                path
            };
            shown.push(format!(
                "at `{}`: {}",
                quote(&at),
                quote(&error.masked().to_string())
            ));
        } else {
            more += 1;
        }
    }
    let mut text = shown.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

fn check(
    validator: &Result<jsonschema::Validator, String>,
    arguments: &Json,
    which: &'static str,
    tool: &RegisteredTool,
) -> Result<(), CallError> {
    let validator = validator.as_ref().map_err(|reason| CallError::Schema {
        tool: tool.exposed_name.clone(),
        server: tool.server.clone(),
        which,
        reason: reason.clone(),
    })?;
    let problems = problems(validator, arguments);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CallError::InvalidArguments {
            tool: tool.exposed_name.clone(),
            server: tool.server.clone(),
            which,
            problems,
        })
    }
}

/// A `CallToolResult` that is a tool error with `text`.
fn error_result(text: &str) -> Json {
    json!({ "content": [{ "type": "text", "text": text }], "isError": true })
}

/// A hold's reason, with the session's labels when it has any, for the approver: a call
/// held because of what the session has seen says so.
fn with_labels(reason: &str, labels: &Labels) -> String {
    if *labels == Labels::default() {
        return reason.to_owned();
    }
    let mut seen = Vec::new();
    if labels.untrusted {
        seen.push(String::from("untrusted content"));
    }
    if !labels.confidentiality.is_empty() {
        seen.push(format!("{} data", labels.confidentiality));
    }
    if !labels.tags.is_empty() {
        seen.push(format!("tags {}", labels.tags.join(", ")));
    }
    format!("{reason} (this session has seen: {})", seen.join("; "))
}

/// Untrusted text for a one-line message: [`text::quote`] at [`MAX_QUOTED_BYTES`].
fn quote(text: &str) -> String {
    text::quote(text, MAX_QUOTED_BYTES)
}

mod result;

use result::content_text;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn call_settings_from_config_keep_each_servers_own_call_limits() {
        let config = Config::from_value(
            serde_json::json!({
                "mcpServers": {
                    "slow": { "command": "slow", "limits": { "call_timeout_ms": 900000, "max_result_bytes": 2048 } },
                    "same": { "command": "same", "limits": { "max_result_bytes": 4096 } },
                    "plain": { "command": "plain" }
                },
                "rules": { "file": "rules.json" },
                "limits": { "max_result_bytes": 4096 }
            }),
            Path::new("/"),
        )
        .unwrap();
        let settings = CallSettings::from_config(&config);
        let slow = ServerCallLimits {
            call_timeout: Duration::from_millis(900_000),
            max_result_bytes: 2048,
        };
        // Only a server whose limits differ from the top level's is kept apart.
        assert_eq!(
            settings.servers,
            BTreeMap::from([(String::from("slow"), slow)])
        );
        assert_eq!(settings.limits_of("slow"), slow);
        assert_eq!(settings.limits_of("plain").max_result_bytes, 4096);
        assert_eq!(
            settings.limits_of("same").call_timeout,
            settings.call_timeout
        );
        assert_eq!(settings.longest_call_timeout(), slow.call_timeout);
    }

    /// A held result is asked under its call's id with a suffix the approvals queue and
    /// `toolward approvals` take as a call id (a `/` was refused there, so a held result
    /// never reached the queue), and that no call's own id can be.
    #[test]
    fn a_held_results_approval_id_is_a_call_id_and_not_the_calls() {
        let call = crate::ids::new_ulid();
        let held = format!("{call}{}", result::RESULT_ID_SUFFIX);
        assert!(crate::approval::check_call_id(&held).is_ok(), "{held}");
        assert_ne!(held.len(), call.len());
    }
}
