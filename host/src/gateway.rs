//! The gateway: toolward as an MCP server, in front of the registered tools.
//!
//! Built on rmcp's server side. Over one connection (one stdio process, one duplex stream to
//! a client in the same process, or one HTTP session):
//!
//! - `initialize` is answered with the `tools` capability (and `logging`, which the MCP
//!   specification requires of a server that sends log notifications); no resources, no
//!   prompts.
//! - `tools/list` answers every registered tool in one page: `name` is the exposed name
//!   (`server__tool`), `description` the operator's override or the server's text,
//!   `inputSchema` the narrowed schema, `outputSchema` the server's, `annotations` as the
//!   server sent them. Schemas are converted from their exact form with
//!   [`Value::to_serde_json`](crate::canonical::Value::to_serde_json), which is lossy for
//!   numbers that are not `i64`/`u64` and not exact `f64`s (`9007199254740993` is sent as
//!   `9007199254740992`); the pins hash the exact text, and the call path validates under
//!   the same conversion.
//! - `tools/call` runs [`CallPath::call`] with this connection's session id (a ULID), the
//!   configured principal, and an approver: the embedder's on a connection served in process
//!   ([`serve_in_process`]), else MCP elicitation when the client declared the
//!   `elicitation` capability (form mode), the state directory's queue
//!   ([`QueueApprover`]) otherwise. A `progressToken` in the request gets the call's progress
//!   notifications (the server's, and the keep-alive ones sent while the call is held). A
//!   `notifications/cancelled` from the client drops the call, which cancels it upstream.
//! - After `notifications/initialized`, each load message (why a tool is missing) goes to the
//!   client as a `notifications/message` at level `warning`.
//!
//! Clients of the 2026-07-28 revision have no `initialize` and no session (SEP-2567): they
//! ask `server/discover`, and every request carries its protocol version, client info and
//! capabilities in `_meta`; rmcp's streamable HTTP service serves each such request on its
//! own handler, so any gateway with the same config answers any request. For them:
//!
//! - `server/discover` answers the revisions 2024-11-05 to 2026-07-28 and, in its `_meta`
//!   under [`STATUS_META_KEY`], what older clients hear as log messages: the load report's
//!   warnings, each server's connection, and the latest warnings since the load (see
//!   `docs/protocol.md`);
//! - a held call is asked through `input_required` when the request's `_meta` declares
//!   elicitation ([`input_required`]), through the queue otherwise.
//!
//! Requests from servers to the client (sampling, roots, elicitation) are never proxied:
//! toolward's upstream client declares no capability (see [`crate::transport`]). Logs go to
//! standard error through `tracing`; standard output carries only the protocol.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CustomRequest, CustomResult,
    DiscoverResult, ElicitRequestParams, ElicitationAction, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, Tool,
};
#[expect(
    deprecated,
    reason = "MCP logging (SEP-2577 deprecates it) is how clients up to 2025-11-25 show a server's warnings"
)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, SetLevelRequestParams};
use rmcp::service::{ElicitationMode, NotificationContext, RequestContext, ServiceExt};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast;
use tokio_util::sync::{CancellationToken, DropGuard};

pub mod input_required;
mod stdio;

use crate::approval::{
    Answer, AnsweredBy, ApprovalAnswer, ApprovalRequest, Approver, Channel, QueueApprover,
    display_arguments, display_result,
};
use crate::call::{CallContext, CallPath, CallResult};
use crate::config::{self, Config};
use crate::ids::new_ulid;
use crate::registry::Connection;
use crate::registry::RegisteredTool;
use crate::text;
use input_required::{InputRequiredApprover, RequestStates, Retry};

/// The `serverInfo.name` the gateway gives clients.
pub const SERVER_NAME: &str = "toolward";

/// The `_meta` key of `server/discover`'s result that carries toolward's status for clients
/// of 2026-07-28, which receive no log messages: `dev.toolward/status`.
pub const STATUS_META_KEY: &str = "dev.toolward/status";

/// Errors of the gateway. The call path has none: its failures are tool errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The client's `initialize` handshake failed.
    #[error("the mcp client did not complete `initialize`")]
    Initialize {
        /// rmcp's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The connection's task ended abnormally.
    #[error("the mcp connection stopped abnormally")]
    Connection {
        /// The task's error.
        #[source]
        source: tokio::task::JoinError,
    },
    /// Standard input or output could not be set up (duplicated, examined, or registered
    /// with the runtime).
    #[error("cannot use standard input and output for mcp")]
    Stdio {
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The settings of a gateway. Defaults: principal [`config::DEFAULT_PRINCIPAL`], state
/// directory [`config::DEFAULT_STATE_DIR`] (relative to the working directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    /// The principal of every call over this connection.
    pub principal: String,
    /// Where the approval queue lives when the client cannot be asked through elicitation.
    pub state_dir: PathBuf,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            principal: String::from(config::DEFAULT_PRINCIPAL),
            state_dir: PathBuf::from(config::DEFAULT_STATE_DIR),
        }
    }
}

impl GatewaySettings {
    /// The settings a config file gives.
    pub fn from_config(config: &Config) -> Self {
        Self {
            principal: config.principal.clone(),
            state_dir: config.state_dir.clone(),
        }
    }
}

/// Serves MCP on standard input and output until the client closes them.
///
/// # Errors
/// As [`serve`].
pub async fn serve_stdio(
    call_path: Arc<CallPath>,
    load_messages: Vec<String>,
    settings: GatewaySettings,
) -> Result<(), GatewayError> {
    let io = |source| GatewayError::Stdio { source };
    let input = stdio::Input::stdin().map_err(io)?;
    let output = stdio::Output::stdout().map_err(io)?;
    serve_parts(call_path, load_messages, settings, input, output).await
}

/// Serves MCP over `stream` (newline-delimited JSON-RPC, as on stdio) until the client
/// closes it. Tests pass one end of [`tokio::io::duplex`].
///
/// # Errors
/// [`GatewayError::Initialize`] when the client does not complete `initialize`;
/// [`GatewayError::Connection`] when the connection's task fails.
pub async fn serve<S>(
    call_path: Arc<CallPath>,
    load_messages: Vec<String>,
    settings: GatewaySettings,
    stream: S,
) -> Result<(), GatewayError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (reader, writer) = tokio::io::split(stream);
    serve_parts(call_path, load_messages, settings, reader, writer).await
}

/// Bytes a [`serve_in_process`] duplex buffers each way before the writer waits for the
/// reader: 64 KiB, as a pipe's buffer.
pub const IN_PROCESS_BUFFER_BYTES: usize = 64 * 1024;

/// Serves MCP in this process, to a client in it: the gateway on one end of a
/// [`tokio::io::duplex`] (newline-delimited JSON-RPC, as on stdio, with the same bound on a
/// message), the other end returned for the runtime's own rmcp client
/// (`().serve(stream)`). Every held call is asked of `approver`, whatever the client declared
/// (no elicitation, no queue). The connection is served in a task of its own until the
/// client closes its end.
pub fn serve_in_process(
    call_path: Arc<CallPath>,
    load_messages: Vec<String>,
    settings: GatewaySettings,
    approver: Arc<dyn Approver>,
) -> tokio::io::DuplexStream {
    let (client, server) = tokio::io::duplex(IN_PROCESS_BUFFER_BYTES);
    let gateway =
        Gateway::new(call_path, Arc::new(load_messages), settings).with_approver(approver);
    let (reader, writer) = tokio::io::split(server);
    tokio::spawn(async move {
        if let Err(error) = serve_gateway(gateway, reader, writer).await {
            tracing::warn!(
                "the in-process mcp client's connection ended: {}",
                text::escape(&crate::text::error_chain(&error))
            );
        }
    });
    client
}

async fn serve_parts<R, W>(
    call_path: Arc<CallPath>,
    load_messages: Vec<String>,
    settings: GatewaySettings,
    reader: R,
    writer: W,
) -> Result<(), GatewayError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let gateway = Gateway::new(call_path, Arc::new(load_messages), settings);
    serve_gateway(gateway, reader, writer).await
}

/// Serves one connection with `gateway` until the client closes it.
async fn serve_gateway<R, W>(gateway: Gateway, reader: R, writer: W) -> Result<(), GatewayError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    tracing::info!(session = %gateway.session, "mcp client connected");
    let transport = AsyncRwTransport::new_server(stdio::OversizeGuard::new(reader), writer)
        .with_max_line_length(stdio::MAX_MESSAGE_BYTES);
    let running = gateway
        .serve(transport)
        .await
        .map_err(|error| GatewayError::Initialize {
            source: Box::new(error),
        })?;
    let quit = running
        .waiting()
        .await
        .map_err(|source| GatewayError::Connection { source })?;
    tracing::info!("mcp client disconnected: {quit:?}");
    Ok(())
}

/// One connection's handler: one per stdio process, one per HTTP session.
#[derive(Clone)]
pub(crate) struct Gateway {
    call_path: Arc<CallPath>,
    load_messages: Arc<Vec<String>>,
    session: String,
    settings: GatewaySettings,
    queue: Arc<dyn Approver>,
    tools: Arc<Vec<Tool>>,
    /// The `requestState` key and ledger, shared by every request's handler.
    states: Arc<RequestStates>,
    /// Cancelled when the session ends, that is when its last handler is dropped: what the
    /// session started for its client (the forwarding of later messages) ends with it, and
    /// a closed session keeps no task, channel or peer.
    ended: CancellationToken,
    _cancel_when_dropped: Arc<DropGuard>,
    /// Whether the client opened this connection with `initialize` (a revision before
    /// 2026-07-28): every request on it is then the session's, whatever its `_meta` says.
    initialized: Arc<AtomicBool>,
    /// Who is asked about every held call, when the embedder gave one
    /// ([`serve_in_process`]): then neither the client nor the queue is.
    approver: Option<Arc<dyn Approver>>,
}

/// A registered tool as rmcp's `Tool`, as `tools/list` answers it: `name` the exposed name,
/// `description` the operator's override or the server's text, `inputSchema` the narrowed
/// schema, `outputSchema` the server's, `annotations` as the server sent them (see the module
/// documentation for how numbers in schemas convert).
impl From<&RegisteredTool> for Tool {
    fn from(tool: &RegisteredTool) -> Tool {
        let object = |value: Json| match value {
            Json::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let mut tool_json = json!({
            "name": tool.exposed_name,
            "description": tool.description,
            "inputSchema": Json::Object(object(tool.input_schema.to_serde_json())),
        });
        if let Json::Object(map) = &mut tool_json {
            if let Some(schema) = &tool.output_schema {
                map.insert(
                    String::from("outputSchema"),
                    Json::Object(object(schema.to_serde_json())),
                );
            }
            let annotations = serde_json::to_value(&tool.annotations).unwrap_or(Json::Null);
            if annotations.as_object().is_some_and(|a| !a.is_empty()) {
                map.insert(String::from("annotations"), annotations);
            }
        }
        serde_json::from_value(tool_json).unwrap_or_else(|error| {
            tracing::error!(
                "tool `{}` on server `{}` cannot be described to the client: {}",
                text::escape(&tool.exposed_name),
                text::escape(&tool.server),
                text::escape(&error.to_string())
            );
            Tool::new(
                tool.exposed_name.clone(),
                tool.description.clone(),
                Arc::new(serde_json::Map::from_iter([(
                    String::from("type"),
                    Json::String(String::from("object")),
                )])),
            )
        })
    }
}

/// A call's result as rmcp's `CallToolResult`, as `tools/call` answers it. A result that
/// does not follow the MCP schema (a server's content block rmcp cannot decode) becomes a
/// tool error naming the tool and where in the JSON, the details in the log.
impl From<&CallResult> for CallToolResult {
    fn from(call: &CallResult) -> CallToolResult {
        call_tool_result(&call.tool, call.result.clone())
    }
}

/// `result` (a `CallToolResult` object) of the call of `tool` as rmcp's type.
fn call_tool_result(tool: &str, result: Json) -> CallToolResult {
    // serde's message quotes the value it could not take (a server's string): the client
    // gets where, not what.
    serde_json::from_value(result).unwrap_or_else(|error| {
        tracing::warn!(
            "the result of tool `{}` cannot be encoded as an MCP CallToolResult: {}",
            text::escape(tool),
            text::escape(&error.to_string())
        );
        CallToolResult::error(vec![rmcp::model::ContentBlock::text(format!(
            "the result of tool `{}` cannot be encoded as an MCP CallToolResult (line {}, column {} of its JSON): a content block does not follow the MCP schema; the details are in toolward's log",
            text::escape(tool),
            error.line(),
            error.column()
        ))])
    })
}

impl Gateway {
    /// The error answering a request whose line was over [`stdio::MAX_MESSAGE_BYTES`]
    /// (`params` as [`stdio::OVERSIZED_METHOD`] gives them): invalid request, naming the
    /// tool and its server when the line said which, and the size and the limit.
    fn oversized(&self, params: Option<&Json>) -> McpError {
        let text = |key: &str| {
            params
                .and_then(|p| p.get(key))
                .and_then(Json::as_str)
                .map(text::escape)
        };
        let number = |key: &str| params.and_then(|p| p.get(key)).and_then(Json::as_u64);
        let what = match (text("method").as_deref(), text("tool")) {
            (Some("tools/call"), Some(tool)) => match self.call_path.registry().get(&tool) {
                Some(registered) => format!(
                    "the call of tool `{tool}` (server `{}`) was not made",
                    registered.server
                ),
                None => format!("the call of tool `{tool}` was not made"),
            },
            (Some(method), _) => format!("the `{method}` request was not handled"),
            (None, _) => String::from("the request was not handled"),
        };
        let message = format!(
            "{what}: its message is {} bytes, over toolward's limit of {} bytes a message",
            number("bytes").unwrap_or(0),
            number("limit").unwrap_or(0)
        );
        tracing::warn!("{message}");
        McpError::invalid_request(message, None)
    }

    /// A handler for one new session over `call_path`.
    pub(crate) fn new(
        call_path: Arc<CallPath>,
        load_messages: Arc<Vec<String>>,
        settings: GatewaySettings,
    ) -> Gateway {
        let tools = tool_list(&call_path);
        let states = Arc::new(RequestStates::new(call_path.ledger().cloned()));
        Gateway::with_tools(call_path, load_messages, settings, tools, states)
    }

    /// A handler for one new session that answers `tools/list` with `tools`, built once by
    /// [`tool_list`] and shared: over HTTP every session has a handler, and rebuilding the
    /// list for each made a session cost as much memory as the whole listing. `states` is
    /// shared the same way: a 2026-07-28 request has a handler of its own.
    pub(crate) fn with_tools(
        call_path: Arc<CallPath>,
        load_messages: Arc<Vec<String>>,
        settings: GatewaySettings,
        tools: Arc<Vec<Tool>>,
        states: Arc<RequestStates>,
    ) -> Gateway {
        let ended = CancellationToken::new();
        Gateway {
            _cancel_when_dropped: Arc::new(ended.clone().drop_guard()),
            ended,
            // The start's approvals store (PostgreSQL for a fleet), else the state folder's.
            queue: call_path.queue().cloned().unwrap_or_else(|| {
                Arc::new(
                    QueueApprover::new(settings.state_dir.clone())
                        .with_audit(call_path.audit().cloned()),
                )
            }),
            call_path,
            load_messages,
            session: new_ulid(),
            settings,
            tools,
            states,
            initialized: Arc::new(AtomicBool::new(false)),
            approver: None,
        }
    }

    /// This handler, asking `approver` about every held call.
    pub(crate) fn with_approver(mut self, approver: Arc<dyn Approver>) -> Gateway {
        self.approver = Some(approver);
        self
    }

    /// What clients of 2026-07-28 read instead of log messages (`docs/protocol.md`): the
    /// load report's warnings, each server's connection, and the latest warnings since.
    fn status(&self) -> Json {
        let registry = self.call_path.registry();
        let servers: Vec<Json> = registry
            .servers()
            .map(|server| {
                let (state, reason) = match registry.connection(server) {
                    Some(Connection::Up(_)) => ("up", None),
                    Some(Connection::Restarting { reason }) => ("restarting", Some(reason)),
                    Some(Connection::Down { reason }) => ("down", Some(reason)),
                    None => ("down", None),
                };
                let mut entry = json!({ "name": server, "state": state });
                if let Some(reason) = reason {
                    entry["reason"] = Json::String(reason);
                }
                entry
            })
            .collect();
        let recent: Vec<Json> = registry
            .recent_client_messages()
            .into_iter()
            .map(|(time_ms, message)| json!({ "time_ms": time_ms, "message": message }))
            .collect();
        json!({
            "load": self.load_messages.as_ref(),
            "servers": servers,
            "recent": recent,
        })
    }
}

/// Whether a request speaks the 2026-07-28 revision or later (its `_meta`, or the version
/// its stdio connection opened with), so it has no session and no server-to-client requests.
/// A request on a connection that was initialized (`initialized`: an older revision's
/// session) is the session's, whatever its `_meta` says: a client cannot step out of its
/// session's labels, facts and approvals by marking one call 2026-07-28.
fn stateless(context: &RequestContext<RoleServer>, initialized: bool) -> bool {
    !initialized
        && context
            .protocol_version()
            .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The form an approval is asked with: one boolean, `approve`, default `false`.
pub(crate) fn approval_schema() -> Json {
    json!({
        "type": "object",
        "properties": {
            "approve": {
                "type": "boolean",
                "title": "Approve this call",
                "description": "Let this one call with these exact arguments go ahead",
                "default": false,
            }
        },
        "required": ["approve"],
    })
}

/// The registered tools of `call_path` as MCP `Tool`s, in the registry's order. The tool set
/// is fixed at load, so one list serves every session.
pub(crate) fn tool_list(call_path: &CallPath) -> Arc<Vec<Tool>> {
    Arc::new(call_path.registry().tools().map(Tool::from).collect())
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> InitializeResult {
        let capabilities: ServerCapabilities =
            serde_json::from_value(json!({ "tools": {}, "logging": {} })).unwrap_or_default();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        self.initialized.store(true, Ordering::Release);
        self.negotiate_initialize(&request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        // 2026-07-28 without sessions: approvals through `input_required`, status through
        // `server/discover` (see the module documentation).
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut result = DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        );
        result
            .meta
            .get_or_insert_default()
            .insert(String::from(STATUS_META_KEY), self.status());
        Ok(result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    #[expect(deprecated, reason = "MCP logging, as for the imports")]
    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // toolward sends only the load report's warnings, once, right after `initialized`.
        Ok(())
    }

    #[expect(deprecated, reason = "MCP logging, as for the imports")]
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let registry = Arc::clone(self.call_path.registry());
        // Subscribed first, so that nothing said after the state below is missed.
        let mut later = registry.client_messages();
        let mut now: Vec<String> = self.load_messages.as_ref().clone();
        for server in registry.servers() {
            match registry.connection(server) {
                Some(Connection::Restarting { reason } | Connection::Down { reason }) => {
                    now.push(reason);
                }
                Some(Connection::Up(_)) | None => {}
            }
        }
        let peer = context.peer.clone();
        let warn = |message: String| {
            LoggingMessageNotificationParam::new(LoggingLevel::Warning, Json::String(message))
                .with_logger("toolward")
        };
        for message in now {
            if let Err(error) = peer.notify_logging_message(warn(message)).await {
                tracing::warn!("cannot send a load message to the client: {error}");
                return;
            }
        }
        // What happens after the load (a server failed, restarted, changed its tool list)
        // goes to the client while it is connected, and no longer: the task ends with the
        // session (closed by the client, expired, or the process stopping), not at the next
        // message, which may never come.
        let ended = self.ended.clone();
        tokio::spawn(async move {
            loop {
                let received = tokio::select! {
                    () = ended.cancelled() => return,
                    received = later.recv() => received,
                };
                let message = match received {
                    Ok(message) => message,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        format!(
                            "{missed} toolward messages were dropped: the client read too slowly"
                        )
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if peer.notify_logging_message(warn(message)).await.is_err() {
                    return;
                }
            }
        });
    }

    /// rmcp hands over a request it could not decode as this; a `tools/call` lands here when
    /// its `params` do not have the specified shape (`arguments` not an object, `name` not a
    /// string), and gets invalid params (-32602) naming what is wrong, not "method not found".
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        if request.method == stdio::OVERSIZED_METHOD {
            return Err(self.oversized(request.params.as_ref()));
        }
        if request.method != "tools/call" {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "method `{}` is not served: toolward serves tools only",
                    text::escape(&request.method)
                ),
                None,
            ));
        }
        let params = request.params.unwrap_or(Json::Null);
        let tool = match params.get("name") {
            Some(Json::String(name)) => format!("tool `{}`", text::escape(name)),
            _ => String::from("a tool"),
        };
        let kind = config::type_name;
        let problem = match (params.get("name"), params.get("arguments")) {
            (None, _) => String::from("`params.name` is missing"),
            (Some(name), _) if !name.is_string() => {
                format!("`params.name` must be a string, found {}", kind(name))
            }
            (_, Some(arguments)) if !arguments.is_object() => format!(
                "`params.arguments` must be an object, found {}",
                kind(arguments)
            ),
            _ => String::from("`params` do not have the shape of a `tools/call`"),
        };
        let message = format!("the call of {tool} is malformed: {problem}");
        tracing::warn!("{message}");
        Err(McpError::invalid_params(message, None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let stateless = stateless(&context, self.initialized.load(Ordering::Acquire));
        // A 2026-07-28 client declares elicitation in each request's `_meta`, and is asked
        // through `input_required`; a retry carries its answer and the `requestState`.
        let retry = request
            .request_state
            .clone()
            .filter(|_| stateless)
            .map(|state| Retry {
                state,
                response: request
                    .input_responses
                    .as_ref()
                    .and_then(|responses| responses.get(input_required::APPROVAL_INPUT))
                    .cloned(),
            });
        let declares_form = |capabilities: Option<rmcp::model::ClientCapabilities>| {
            capabilities
                .and_then(|c| c.elicitation)
                .is_some_and(|e| e.form.is_some() || e.url.is_none())
        };
        let input_required = (self.approver.is_none()
            && stateless
            && (retry.is_some() || declares_form(context.client_capabilities())))
        .then(|| {
            Arc::new(InputRequiredApprover::new(
                Arc::clone(&self.states),
                self.settings.state_dir.clone(),
                self.call_path.settings().approval_timeout,
                retry,
            ))
        });
        let elicitation = !stateless
            && context
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form);
        let approver: Arc<dyn Approver> = if let Some(approver) = &self.approver {
            approver.clone()
        } else if let Some(approver) = &input_required {
            approver.clone()
        } else if elicitation {
            Arc::new(ElicitationApprover {
                peer: context.peer.clone(),
            })
        } else {
            self.queue.clone()
        };
        let (progress, forwarder) = match context.meta.get_progress_token() {
            Some(token) => {
                let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
                let forwarder =
                    tokio::spawn(forward_progress(context.peer.clone(), token, receiver));
                (Some(sender), Some(forwarder))
            }
            None => (None, None),
        };
        // Over HTTP, the token's name or its OAuth claim, with the principal's attributes
        // (set by `listen` on the request); over stdio, the configured principal.
        let parts = context.extensions.get::<http::request::Parts>();
        let principal = parts
            .and_then(|parts| parts.extensions.get::<crate::identity::Principal>())
            .map_or_else(|| self.settings.principal.clone(), |p| p.0.clone());
        let principal_attributes = parts
            .and_then(|parts| {
                parts
                    .extensions
                    .get::<crate::identity::PrincipalAttributes>()
            })
            .map(|attributes| attributes.0.clone())
            .unwrap_or_default();
        // W3C Trace Context in `params._meta` (see `crate::telemetry`).
        let traceparent = context
            .meta
            .0
            .get("traceparent")
            .and_then(Json::as_str)
            .map(str::to_owned);
        let ctx = CallContext {
            principal,
            principal_attributes,
            // A 2026-07-28 request has no session: its handler is its own, and its handler's
            // id would make every request a session of one call. Without one, its facts have
            // no `session` scope and its labels are the principal's (`docs/facts.md`,
            // `docs/results.md`).
            session: if stateless {
                String::new()
            } else {
                self.session.clone()
            },
            approver,
            progress,
            traceparent,
        };
        let call = self.call_path.call(&request.name, request.arguments, &ctx);
        let outcome = tokio::select! {
            result = call => Some(result),
            () = context.ct.cancelled() => None,
        };
        // The sender in `ctx` goes with it, so the forwarder ends after the last notification.
        drop(ctx);
        if let Some(forwarder) = forwarder {
            let _ = forwarder.await;
        }
        if let Some(asked) = input_required
            .as_ref()
            .and_then(|approver| approver.input_required(elicitation_message))
        {
            return Ok(CallToolResponse::InputRequired(asked));
        }
        let result = match outcome {
            Some(result) => result.result,
            None => json!({
                "content": [{ "type": "text", "text": format!(
                    "the call of tool `{}` was cancelled by the client",
                    text::escape(&request.name)
                ) }],
                "isError": true,
            }),
        };
        Ok(CallToolResponse::Complete(call_tool_result(
            &request.name,
            result,
        )))
    }
}

/// Sends the call's progress parameters to the client under its `progressToken`. MCP asks
/// for increasing `progress` values; the keep-alive notifications of a held call and the
/// server's own count separately, so a value that would not increase is sent as one more
/// than the last.
async fn forward_progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    mut receiver: tokio::sync::mpsc::UnboundedReceiver<Json>,
) {
    let mut last: Option<f64> = None;
    while let Some(params) = receiver.recv().await {
        let Some(mut progress) = params.get("progress").and_then(Json::as_f64) else {
            continue;
        };
        let mut total = params.get("total").and_then(Json::as_f64);
        if let Some(last) = last
            && progress <= last
        {
            progress = last + 1.0;
            total = None;
        }
        last = Some(progress);
        let mut notification = ProgressNotificationParam::new(token.clone(), progress);
        if let Some(total) = total {
            notification = notification.with_total(total);
        }
        if let Some(message) = params.get("message").and_then(Json::as_str) {
            notification = notification.with_message(message.to_owned());
        }
        if peer.notify_progress(notification).await.is_err() {
            return;
        }
    }
}

/// Asks the person at the client through MCP elicitation (form mode): a single boolean,
/// `approve`. Decline, cancel, `false` or a failed request are a deny. The answerer is the
/// call's principal: the person at the client of that connection.
struct ElicitationApprover {
    peer: Peer<RoleServer>,
}

impl fmt::Debug for ElicitationApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElicitationApprover")
            .finish_non_exhaustive()
    }
}

impl Approver for ElicitationApprover {
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            let nobody = |reason: String| Answer {
                verdict: ApprovalAnswer::Denied(reason),
                by: AnsweredBy::nobody(Channel::Elicitation),
            };
            let answered = |verdict: ApprovalAnswer| Answer {
                verdict,
                by: AnsweredBy::principal(&request.principal),
            };
            let params: ElicitRequestParams = match serde_json::from_value(json!({
                "mode": "form",
                "message": elicitation_message(&request),
                "requestedSchema": approval_schema(),
            })) {
                Ok(params) => params,
                Err(error) => {
                    return nobody(format!("the approval request could not be built: {error}"));
                }
            };
            match self.peer.create_elicitation(params).await {
                Ok(result) => match result.action {
                    ElicitationAction::Accept => {
                        let approved = result
                            .content
                            .as_ref()
                            .and_then(|content| content.get("approve"))
                            .and_then(Json::as_bool)
                            == Some(true);
                        if approved {
                            answered(ApprovalAnswer::Approved)
                        } else {
                            answered(ApprovalAnswer::Denied(String::from(
                                "the person at the client did not approve it",
                            )))
                        }
                    }
                    ElicitationAction::Decline => answered(ApprovalAnswer::Denied(String::from(
                        "the person at the client declined it",
                    ))),
                    _ => answered(ApprovalAnswer::Denied(String::from(
                        "the person at the client cancelled the approval",
                    ))),
                },
                Err(error) => nobody(format!(
                    "the client could not be asked for an approval: {error}"
                )),
            }
        })
    }

    fn channel(&self) -> Channel {
        Channel::Elicitation
    }

    fn answerer(&self, request: &ApprovalRequest) -> Option<AnsweredBy> {
        Some(AnsweredBy::principal(&request.principal))
    }
}

/// `approve tool `fs__write_file` on server `fs`: effect local-change; …` and then the
/// arguments as [`display_arguments`] shows them, every value escaped for display.
fn elicitation_message(request: &ApprovalRequest) -> String {
    let message = format!(
        "approve tool `{}` on server `{}`: effect {}; the policy held it: {}\narguments (sha256 {}):\n{}",
        text::escape(&request.exposed_tool),
        text::escape(&request.server),
        text::escape(&request.effect),
        text::escape(&request.reason),
        text::escape(&request.arguments_sha256),
        display_arguments(&request.arguments),
    );
    match &request.result {
        Some(result) => format!("{message}\n{}", display_result(result)),
        None => message,
    }
}
