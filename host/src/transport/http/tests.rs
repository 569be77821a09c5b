//! Behaviour of the streamable HTTP transport against a fixture server on 127.0.0.1 whose
//! answers each test scripts.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::super::{
    FailureReason, HttpSpec, PROTOCOL_VERSION, TransportError, TransportLimits, Upstream,
};

type Body = BoxBody<Bytes, Infallible>;
type Reply = hyper::Response<Body>;

/// The `tools/list` result the fixture sends: odd whitespace, an escape, a line break (which
/// the event stream sends as two `data:` lines) and a number past `u64`.
const LISTING: &str = "{\"tools\" : [{\"name\":\"echo\", \"description\":\"caf\\u00e9\",\n \"inputSchema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"maximum\":18446744073709551617}}}}],  \"zeta\":1 }";

/// The session id the fixture gives.
const SESSION: &str = "session-0123";

/// One request the fixture received.
#[derive(Debug, Clone)]
struct Seen {
    method: hyper::Method,
    headers: hyper::HeaderMap,
    body: Vec<u8>,
}

impl Seen {
    fn message(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The JSON-RPC method, or `""`.
    fn rpc_method(&self) -> String {
        self.message()["method"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }
}

/// An HTTP server on 127.0.0.1 that records every request and answers as `script` says.
struct Fixture {
    address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Fixture {
    async fn start(script: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Fixture {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(script);
        let task = tokio::spawn({
            let seen = Arc::clone(&seen);
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let seen = Arc::clone(&seen);
                    let script = Arc::clone(&script);
                    let service = service_fn(move |request: hyper::Request<Incoming>| {
                        let seen = Arc::clone(&seen);
                        let script = Arc::clone(&script);
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.unwrap().to_bytes().to_vec();
                            let request = Seen {
                                method: parts.method,
                                headers: parts.headers,
                                body,
                            };
                            seen.lock().unwrap().push(request.clone());
                            Ok::<_, Infallible>(script(&request))
                        }
                    });
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        });
        Fixture {
            address,
            seen,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    fn spec(&self) -> HttpSpec {
        HttpSpec {
            url: self.url(),
            headers: BTreeMap::new(),
            ..HttpSpec::default()
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The `POST`s received, in order.
    fn posts(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.method == hyper::Method::POST)
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reply(status: u16, content_type: Option<&str>, body: impl Into<Bytes>) -> Reply {
    let mut builder = hyper::Response::builder().status(status);
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    builder.body(Full::new(body.into()).boxed()).unwrap()
}

fn json_reply(body: String) -> Reply {
    reply(200, Some("application/json"), body)
}

/// Each message as one event, each of its lines a `data:` line, after a comment and a priming
/// event (an id and empty data, as MCP 2025-11-25 servers send).
fn sse_reply(messages: &[String]) -> Reply {
    let mut text = String::from(": the fixture speaks\n\nid: 0\ndata:\n\n");
    for message in messages {
        for line in message.split('\n') {
            text.push_str(&format!("data: {line}\n"));
        }
        text.push('\n');
    }
    reply(200, Some("text/event-stream"), text)
}

/// `first`, then bytes of `fill` without end.
fn endless(content_type: &str, first: &'static [u8], fill: u8) -> Reply {
    let chunk = Bytes::from(vec![fill; 8192]);
    let stream = futures::stream::once(async move { Ok(Frame::data(Bytes::from_static(first))) })
        .chain(futures::stream::repeat_with(move || {
            Ok(Frame::data(chunk.clone()))
        }));
    hyper::Response::builder()
        .status(200)
        .header("content-type", content_type)
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Style {
    Json,
    EventStream,
}

/// A well-behaved MCP server: answers in `style`, gives [`SESSION`], lists [`LISTING`],
/// echoes `tools/call` (with one progress notification first when asked), has no `GET`
/// stream, and lets its session be ended.
fn mcp(request: &Seen, style: Style) -> Reply {
    match request.method {
        hyper::Method::GET => return reply(405, None, ""),
        hyper::Method::DELETE => return reply(200, None, ""),
        _ => {}
    }
    let message = request.message();
    let Some(id) = message
        .get("id")
        .filter(|_| message.get("method").is_some())
    else {
        return reply(202, None, "");
    };
    let answer =
        |result: &str| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\n\"result\":{result}}}");
    let mut messages = Vec::new();
    match request.rpc_method().as_str() {
        "initialize" => {
            let result = json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "fixture", "version": "1.0.0" },
            });
            messages.push(answer(&result.to_string()));
        }
        "tools/list" => messages.push(answer(LISTING)),
        "tools/call" => {
            let params = &message["params"];
            if let Some(token) = params.pointer("/_meta/progressToken") {
                let progress = json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": { "progressToken": token, "progress": 1, "total": 1 },
                });
                messages.push(progress.to_string());
            }
            let text = format!("echo {}", params["arguments"]);
            let result = json!({ "content": [{ "type": "text", "text": text }], "isError": false });
            messages.push(answer(&result.to_string()));
        }
        _ => {
            let error = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": "nope" } });
            messages.push(error.to_string());
        }
    }
    let mut reply = match style {
        Style::Json if messages.len() == 1 => json_reply(messages.remove(0)),
        Style::Json => json_reply(format!("[{}]", messages.join(" ,\n"))),
        Style::EventStream => sse_reply(&messages),
    };
    if request.rpc_method() == "initialize" {
        reply
            .headers_mut()
            .insert("mcp-session-id", SESSION.parse().unwrap());
    }
    reply
}

fn limits() -> TransportLimits {
    TransportLimits {
        start_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
        close_grace: Duration::from_secs(2),
        ..TransportLimits::default()
    }
}

fn arguments() -> Map<String, Value> {
    let mut arguments = Map::new();
    arguments.insert(String::from("n"), json!(7));
    arguments
}

/// Lists and calls through `up`: the listing bytes are [`LISTING`] exactly, and a call with
/// progress gets its progress first and its echo.
async fn lists_exactly_and_calls(up: &Upstream) {
    let page = up.list_tools_page(None).await.unwrap();
    assert_eq!(String::from_utf8(page).unwrap(), LISTING);
    let (sink, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let result = up
        .call_tool("echo", arguments(), Duration::from_secs(10), Some(sink))
        .await
        .unwrap();
    assert_eq!(result["content"][0]["text"], "echo {\"n\":7}");
    let update = progress.try_recv().unwrap();
    assert_eq!(update["progress"], 1);
    assert!(up.is_failed().is_none());
}

#[tokio::test]
async fn a_json_answer_keeps_the_exact_listing_bytes_and_a_batch_is_taken_message_by_message() {
    let fixture = Fixture::start(|request| mcp(request, Style::Json)).await;
    let up = Upstream::connect_http("web", &fixture.spec(), &limits())
        .await
        .unwrap();
    assert_eq!(up.identity().name, "fixture");
    assert_eq!(up.identity().protocol_version, PROTOCOL_VERSION);
    assert_eq!(up.process_id(), None);
    assert_eq!(up.stderr_tail(), "");
    lists_exactly_and_calls(&up).await;
    up.close().await;
}

#[tokio::test]
async fn an_event_stream_answer_keeps_the_exact_listing_bytes_and_delivers_progress_first() {
    let fixture = Fixture::start(|request| mcp(request, Style::EventStream)).await;
    let up = Upstream::connect_http("sse", &fixture.spec(), &limits())
        .await
        .unwrap();
    assert_eq!(up.identity().name, "fixture");
    lists_exactly_and_calls(&up).await;
    up.close().await;
}

#[tokio::test]
async fn session_and_version_headers_follow_initialize_and_operator_headers_reach_only_their_server()
 {
    let a = Fixture::start(|request| mcp(request, Style::Json)).await;
    let b = Fixture::start(|request| mcp(request, Style::Json)).await;
    let mut spec_a = a.spec();
    spec_a.headers.insert(
        String::from("Authorization"),
        String::from("Bearer secret-for-a"),
    );
    spec_a
        .headers
        .insert(String::from("X-Team"), String::from("a"));
    let mut spec_b = b.spec();
    spec_b
        .headers
        .insert(String::from("X-Team"), String::from("b"));
    assert!(!format!("{spec_a:?}").contains("secret-for-a"));

    let up_a = Upstream::connect_http("a", &spec_a, &limits())
        .await
        .unwrap();
    let up_b = Upstream::connect_http("b", &spec_b, &limits())
        .await
        .unwrap();
    up_a.list_tools_page(None).await.unwrap();
    up_b.list_tools_page(None).await.unwrap();
    up_a.close().await;
    up_b.close().await;

    let posts = a.posts();
    let methods: Vec<String> = posts.iter().map(Seen::rpc_method).collect();
    // The 2026-07-28 probe first (this server answers it "method not found"), then the
    // `initialize` handshake.
    assert_eq!(
        methods,
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list"
        ]
    );
    for post in &posts {
        assert_eq!(post.header("content-type"), Some("application/json"));
        assert_eq!(
            post.header("accept"),
            Some("application/json, text/event-stream")
        );
    }
    let probe = &posts[0];
    assert_eq!(probe.header("mcp-session-id"), None);
    assert_eq!(probe.header("mcp-protocol-version"), Some("2026-07-28"));
    let initialize = &posts[1];
    assert_eq!(initialize.header("mcp-session-id"), None);
    assert_eq!(initialize.header("mcp-protocol-version"), None);
    let after: Vec<Seen> = a
        .seen()
        .into_iter()
        .filter(|seen| !["initialize", "server/discover"].contains(&seen.rpc_method().as_str()))
        .collect();
    // `notifications/initialized`, `tools/list`, the `GET` if it was sent in time, `DELETE`.
    assert!(after.len() >= 3, "{after:?}");
    for seen in &after {
        assert_eq!(seen.header("mcp-session-id"), Some(SESSION), "{seen:?}");
        assert_eq!(
            seen.header("mcp-protocol-version"),
            Some(PROTOCOL_VERSION),
            "{seen:?}"
        );
    }
    for seen in a.seen() {
        assert_eq!(seen.header("authorization"), Some("Bearer secret-for-a"));
        assert_eq!(seen.header("x-team"), Some("a"));
    }
    let seen_b = b.seen();
    assert!(seen_b.len() >= 3);
    for seen in seen_b {
        assert_eq!(seen.header("authorization"), None, "{seen:?}");
        assert_eq!(seen.header("x-team"), Some("b"));
    }
}

#[tokio::test]
async fn a_redirect_is_refused_naming_its_status_and_location_and_never_followed() {
    let target = Fixture::start(|request| mcp(request, Style::Json)).await;
    let location = format!("{}?stolen=1", target.url());

    // At `initialize`: the server cannot be reached at all.
    let to = location.clone();
    let found = Fixture::start(move |_| {
        let mut answer = reply(302, None, "");
        answer.headers_mut().insert("location", to.parse().unwrap());
        answer
    })
    .await;
    let mut spec = found.spec();
    spec.headers
        .insert(String::from("Authorization"), String::from("Bearer s"));
    let error = Upstream::connect_http("moved", &spec, &limits())
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::Redirect { status: 302, .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("server `moved`")
            && message.contains("302")
            && message.contains(&format!("`{location}`")),
        "{message}"
    );

    // At `tools/list`: that request fails, the server stays up.
    let to = location.clone();
    let temporary = Fixture::start(move |request| {
        if request.rpc_method() == "tools/list" {
            let mut answer = reply(307, None, "");
            answer.headers_mut().insert("location", to.parse().unwrap());
            answer
        } else {
            mcp(request, Style::Json)
        }
    })
    .await;
    let up = Upstream::connect_http("moving", &temporary.spec(), &limits())
        .await
        .unwrap();
    let error = up.list_tools_page(None).await.unwrap_err();
    assert!(
        matches!(error, TransportError::Redirect { status: 307, .. }),
        "{error}"
    );
    assert!(error.to_string().contains(&location), "{error}");
    assert!(up.is_failed().is_none());
    up.close().await;

    assert_eq!(target.seen().len(), 0, "the redirect was followed");
}

#[tokio::test]
async fn an_endless_body_is_cut_at_the_limit_and_fails_the_server() {
    let fixture = Fixture::start(|request| {
        if request.rpc_method() == "tools/list" {
            endless(
                "application/json",
                b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":",
                b' ',
            )
        } else {
            mcp(request, Style::Json)
        }
    })
    .await;
    let limits = TransportLimits {
        max_http_body_bytes: 64 * 1024,
        ..limits()
    };
    let up = Upstream::connect_http("endless", &fixture.spec(), &limits)
        .await
        .unwrap();
    let started = Instant::now();
    let error = up.list_tools_page(None).await.unwrap_err();
    assert!(
        matches!(
            &error,
            TransportError::Failed {
                reason: FailureReason::BodyTooLarge { limit: 65536, seen },
                ..
            } if *seen > 65536 && *seen < 65536 + 1024 * 1024
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("server `endless` failed") && message.contains("limit of 65536 bytes"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(up.is_failed().unwrap().contains("65536"));
    up.close().await;
}

#[tokio::test]
async fn an_oversized_event_is_cut_at_the_limit_and_fails_the_server() {
    let fixture = Fixture::start(|request| {
        if request.rpc_method() == "tools/list" {
            endless("text/event-stream", b"data: ", b'x')
        } else {
            mcp(request, Style::EventStream)
        }
    })
    .await;
    let limits = TransportLimits {
        max_http_body_bytes: 64 * 1024,
        ..limits()
    };
    let up = Upstream::connect_http("flood", &fixture.spec(), &limits)
        .await
        .unwrap();
    let error = up.list_tools_page(None).await.unwrap_err();
    assert!(
        matches!(
            &error,
            TransportError::Failed {
                reason: FailureReason::EventTooLarge { limit: 65536, .. },
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("server `flood` failed")
            && message.contains("server-sent event past the limit of 65536 bytes"),
        "{message}"
    );
    up.close().await;
}

#[tokio::test]
async fn an_error_status_names_the_server_and_status_and_quotes_a_bounded_excerpt() {
    let fixture = Fixture::start(|request| {
        if request.rpc_method() == "tools/call" {
            let body = format!("boom\nat `here`{}", "y".repeat(100_000));
            reply(500, Some("text/plain"), body)
        } else {
            mcp(request, Style::Json)
        }
    })
    .await;
    let up = Upstream::connect_http("broken", &fixture.spec(), &limits())
        .await
        .unwrap();
    let error = up
        .call_tool("echo", arguments(), Duration::from_secs(10), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::HttpStatus { status: 500, .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with(
            "server `broken` answered `tools/call` with HTTP status 500: `boom\\nat 'here'yyy"
        ),
        "{message}"
    );
    assert!(message.len() < 1000 && !message.contains('\n'), "{message}");
    // One failed request does not fail the server.
    assert!(up.is_failed().is_none());
    let page = up.list_tools_page(None).await.unwrap();
    assert_eq!(page, LISTING.as_bytes());
    up.close().await;
}

#[tokio::test]
async fn a_404_to_a_request_with_the_session_id_fails_the_server_as_expired() {
    let fixture = Fixture::start(|request| {
        if request.rpc_method() == "tools/list" {
            reply(404, Some("text/plain"), "unknown session")
        } else {
            mcp(request, Style::Json)
        }
    })
    .await;
    let up = Upstream::connect_http("stale", &fixture.spec(), &limits())
        .await
        .unwrap();
    let error = up.list_tools_page(None).await.unwrap_err();
    assert!(
        matches!(
            &error,
            TransportError::Failed {
                reason: FailureReason::SessionExpired,
                ..
            }
        ),
        "{error}"
    );
    assert!(up.is_failed().unwrap().contains("session"));
    up.close().await;
    // An expired session is not ended again.
    assert!(
        fixture
            .seen()
            .iter()
            .all(|seen| seen.method != hyper::Method::DELETE)
    );
}

#[tokio::test]
async fn close_ends_the_session_with_delete_and_fails_what_waits() {
    let fixture = Fixture::start(|request| {
        if request.rpc_method() == "tools/call" {
            // An event stream that never brings the answer.
            endless("text/event-stream", b": waiting\n", b'\n')
        } else {
            mcp(request, Style::EventStream)
        }
    })
    .await;
    let up = Upstream::connect_http("closing", &fixture.spec(), &limits())
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let up = up.clone();
        async move {
            up.call_tool("echo", arguments(), Duration::from_secs(60), None)
                .await
        }
    });
    while fixture
        .posts()
        .iter()
        .all(|post| post.rpc_method() != "tools/call")
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let other = up.clone();
    up.close().await;
    let deletes: Vec<Seen> = fixture
        .seen()
        .into_iter()
        .filter(|seen| seen.method == hyper::Method::DELETE)
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].header("mcp-session-id"), Some(SESSION));
    let error = waiting.await.unwrap().unwrap_err();
    assert!(
        error
            .to_string()
            .contains("server `closing` failed: it was closed"),
        "{error}"
    );
    assert_eq!(other.is_failed().as_deref(), Some("it was closed"));
}

#[tokio::test]
async fn a_header_toolward_sets_itself_is_refused_before_anything_is_sent() {
    let fixture = Fixture::start(|request| mcp(request, Style::Json)).await;
    let mut spec = fixture.spec();
    spec.headers
        .insert(String::from("Mcp-Session-Id"), String::from("forged"));
    let error = Upstream::connect_http("forger", &spec, &limits())
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::InvalidHttpSpec { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("`mcp-session-id`"), "{error}");
    assert!(!error.to_string().contains("forged"), "{error}");
    assert!(fixture.seen().is_empty());
}

#[test]
fn standard_headers_name_the_method_and_the_tool_and_wrap_what_a_header_cannot_hold() {
    let headers = |message: Value| {
        super::standard_headers(message.to_string().as_bytes())
            .into_iter()
            .map(|(name, value)| (name, value.to_str().unwrap().to_owned()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        headers(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"name": "not this"}}})),
        [
            ("mcp-method", String::from("tools/call")),
            ("mcp-name", String::from("echo"))
        ]
    );
    assert_eq!(
        headers(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})),
        [("mcp-method", String::from("tools/list"))]
    );
    // RFC 4648's test vectors, and a name no header can hold as it is.
    for (plain, encoded) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(super::base64(plain.as_bytes()), encoded);
    }
    assert_eq!(
        headers(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "café", "arguments": {}}})),
        [
            ("mcp-method", String::from("tools/call")),
            ("mcp-name", String::from("=?base64?Y2Fmw6k=?="))
        ]
    );
    assert!(headers(json!({"jsonrpc": "2.0", "id": 4, "result": {}})).is_empty());
}

#[tokio::test]
async fn a_401_without_a_grant_fails_with_sign_in_naming_the_server_and_the_command() {
    let fixture = Fixture::start(|_| {
        hyper::Response::builder()
            .status(401)
            .header(
                "www-authenticate",
                "Bearer resource_metadata=\"http://127.0.0.1/.well-known/oauth-protected-resource/mcp\"",
            )
            .body(Full::new(Bytes::from_static(b"")).boxed())
            .unwrap()
    })
    .await;
    let error = Upstream::connect_http("remote", &fixture.spec(), &limits())
        .await
        .unwrap_err();
    assert!(matches!(error, TransportError::SignIn { .. }), "{error}");
    let text = error.to_string();
    assert!(text.starts_with("server `remote` needs sign-in"), "{text}");
    assert!(text.ends_with("run `toolward auth login remote`"), "{text}");
    assert!(
        fixture
            .seen()
            .iter()
            .all(|seen| seen.header("authorization").is_none())
    );
}

/// The fixture as an MCP server that accepts only `Bearer new`, and as its authorization
/// server's token endpoint (`/token`), which renews refresh token `r1` into `new`.
fn protected(request: &Seen, path: &str) -> Reply {
    if path == "/token" {
        return json_reply(
            json!({ "access_token": "new", "token_type": "Bearer", "expires_in": 3600 })
                .to_string(),
        );
    }
    if request.header("authorization") != Some("Bearer new") {
        return reply(401, None, "");
    }
    mcp(request, Style::Json)
}

#[tokio::test]
async fn a_grants_token_goes_to_its_server_and_a_401_renews_it_once_then_it_is_kept() {
    use crate::oauth::store::{ClientAuth, Grant, GrantKind, GrantStore, StateDirGrants};
    // The fixture's script sees no path: the token request is told apart by its body.
    let fixture = Fixture::start(|seen| {
        let body = String::from_utf8_lossy(&seen.body);
        let path = if body.contains("grant_type=refresh_token") {
            "/token"
        } else {
            "/mcp"
        };
        protected(seen, path)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = crate::config::Config::from_value(
        json!({
            "mcpServers": { "remote": { "url": fixture.url() } },
            "rules": { "file": "rules.json" },
        }),
        dir.path(),
    )
    .unwrap();
    let store = std::sync::Arc::new(GrantStore::StateDir(
        StateDirGrants::open(&config.state_dir).unwrap(),
    ));
    store
        .write(&Grant {
            server: String::from("remote"),
            principal: None,
            resource: fixture.url(),
            issuer: format!("http://{}/", fixture.address),
            token_endpoint: format!("http://{}/token", fixture.address),
            revocation_endpoint: None,
            client_id: String::from("client-1"),
            client_secret: None,
            client_auth: ClientAuth::None,
            kind: GrantKind::AuthorizationCode,
            access_token: String::from("old"),
            refresh_token: Some(String::from("r1")),
            expires_at: None,
            scopes: Vec::new(),
            obtained_at: 0,
        })
        .await
        .unwrap();
    let credentials = crate::oauth::Credentials::load(&store, &config.servers["remote"], None)
        .await
        .unwrap()
        .unwrap();
    let spec = HttpSpec {
        oauth: Some(credentials),
        ..fixture.spec()
    };
    let up = Upstream::connect_http("remote", &spec, &limits())
        .await
        .unwrap();
    lists_exactly_and_calls(&up).await;
    up.close().await;

    let posts = fixture.posts();
    let first = &posts[0];
    assert_eq!(first.header("authorization"), Some("Bearer old"));
    let renewal = &posts[1];
    let form = String::from_utf8_lossy(&renewal.body).into_owned();
    assert!(form.contains("refresh_token=r1"), "{form}");
    assert!(form.contains("resource="), "{form}");
    assert_eq!(renewal.header("authorization"), None, "{form}");
    // Every MCP request after the renewal carries the new token, and only it.
    for seen in posts.iter().skip(2) {
        assert_eq!(seen.header("authorization"), Some("Bearer new"));
    }
    assert_eq!(
        store
            .read("remote", None)
            .await
            .unwrap()
            .unwrap()
            .access_token,
        "new"
    );
}

/// A grant of `principal` (`None`: the operator's) for the fixture, written to a state folder
/// store, and the credentials the transport uses.
async fn fixture_credentials(
    fixture: &Fixture,
    dir: &std::path::Path,
    principal: Option<&str>,
    token: &str,
) -> std::sync::Arc<crate::oauth::Credentials> {
    use crate::oauth::store::{ClientAuth, Grant, GrantKind, GrantStore, StateDirGrants};
    let config = crate::config::Config::from_value(
        json!({
            "mcpServers": { "remote": { "url": fixture.url(), "oauth": { "per_principal": true } } },
            "rules": { "file": "rules.json" },
        }),
        dir,
    )
    .unwrap();
    let store = std::sync::Arc::new(GrantStore::StateDir(
        StateDirGrants::open(&config.state_dir).unwrap(),
    ));
    store
        .write(&Grant {
            server: String::from("remote"),
            principal: principal.map(str::to_owned),
            resource: fixture.url(),
            issuer: format!("http://{}/", fixture.address),
            token_endpoint: format!("http://{}/token", fixture.address),
            revocation_endpoint: None,
            client_id: String::from("client-1"),
            client_secret: None,
            client_auth: ClientAuth::None,
            kind: GrantKind::AuthorizationCode,
            access_token: token.to_owned(),
            refresh_token: None,
            expires_at: None,
            scopes: vec![String::from("files:read")],
            obtained_at: 0,
        })
        .await
        .unwrap();
    crate::oauth::Credentials::load(&store, &config.servers["remote"], principal)
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_403_for_insufficient_scope_names_the_sign_in_that_asks_for_the_scope() {
    let fixture = Fixture::start(|seen| {
        if seen.rpc_method() == "tools/call" {
            let tool = seen.message()["params"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let scope = match tool.as_str() {
                "write" => "files:read files:write",
                // Scope tokens a shell would read: quoted into one word.
                "shell" => "x'; rm -rf ~ #",
                // Not scope tokens (a `\`): never repeated into the command.
                _ => "a\\\\b",
            };
            return hyper::Response::builder()
                .status(403)
                .header(
                    "www-authenticate",
                    format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\""),
                )
                .body(Full::new(Bytes::from_static(b"")).boxed())
                .unwrap();
        }
        mcp(seen, Style::Json)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let credentials = fixture_credentials(&fixture, dir.path(), Some("alice"), "alice-token").await;
    let spec = HttpSpec {
        oauth: Some(credentials),
        ..fixture.spec()
    };
    let up = Upstream::connect_http("remote", &spec, &limits())
        .await
        .unwrap();
    let error = up
        .call_tool("write", arguments(), Duration::from_secs(10), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::InsufficientScope { .. }),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "server `remote` refused `tools/call` for want of scope for principal `alice` (it asks for `files:read files:write`): run `toolward auth login remote --principal alice --scope 'files:read files:write'`"
    );
    let error = up
        .call_tool("other", arguments(), Duration::from_secs(10), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("a `scope` that is not a list of scopes"),
        "{error}"
    );
    assert!(
        error.ends_with("run `toolward auth login remote --principal alice`"),
        "{error}"
    );
    let error = up
        .call_tool("shell", arguments(), Duration::from_secs(10), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.ends_with("--scope 'x'\\''; rm -rf ~ #'`"), "{error}");
    // Nothing was retried, nor signed in to: the session goes on.
    assert!(up.failure().is_none());
    up.close().await;
    let posts = fixture.posts();
    assert_eq!(
        posts
            .iter()
            .filter(|seen| seen.rpc_method() == "tools/call")
            .count(),
        3
    );
    assert!(
        posts
            .iter()
            .all(|seen| seen.header("authorization") == Some("Bearer alice-token"))
    );
}

#[tokio::test]
async fn a_principals_session_refused_at_initialize_names_the_principals_sign_in() {
    let fixture = Fixture::start(|_| reply(401, None, "")).await;
    let dir = tempfile::tempdir().unwrap();
    let credentials = fixture_credentials(&fixture, dir.path(), Some("bob"), "bob-token").await;
    let spec = HttpSpec {
        oauth: Some(credentials),
        ..fixture.spec()
    };
    let error = Upstream::connect_http("remote", &spec, &limits())
        .await
        .unwrap_err()
        .to_string();
    // No refresh token: not renewed, and the message names Bob's sign-in, not the operator's.
    assert!(
        error.starts_with("server `remote` needs sign-in for principal `bob` ("),
        "{error}"
    );
    assert!(
        error.ends_with("run `toolward auth login remote --principal bob`"),
        "{error}"
    );
}

/// A server behind the TLS fixture: answers `initialize`, takes notifications, lists no
/// tools, has no `GET` stream.
fn mcp_over_tls(method: &str, _target: &str, body: &[u8]) -> crate::tls_fixture::Answer {
    if method != "POST" {
        return (405, "text/plain", String::new());
    }
    let message: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let Some(id) = message.get("id").cloned() else {
        return (202, "text/plain", String::new());
    };
    let result = match message["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "private-ca", "version": "1" },
        }),
        _ => json!({ "tools": [] }),
    };
    (
        200,
        "application/json",
        json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string(),
    )
}

#[tokio::test]
async fn a_server_behind_a_private_ca_is_reached_only_with_its_ca_file() {
    let fixture = crate::tls_fixture::TlsFixture::start(mcp_over_tls);
    let spec = HttpSpec {
        url: format!("https://localhost:{}/mcp", fixture.port),
        ..HttpSpec::default()
    };
    let Err(error) = Upstream::connect_http("private", &spec, &limits()).await else {
        panic!("a certificate of an unknown CA is refused");
    };
    let error = crate::text::error_chain(&error);
    assert!(error.contains("certificate"), "{error}");
    assert_eq!(
        fixture.answered.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    let spec = HttpSpec {
        ca_file: Some(fixture.bundle()),
        ..spec
    };
    let up = Upstream::connect_http("private", &spec, &limits())
        .await
        .unwrap();
    assert_eq!(up.identity().name, "private-ca");
    assert_eq!(up.list_tools_page(None).await.unwrap(), br#"{"tools":[]}"#);
    up.close().await;
}
