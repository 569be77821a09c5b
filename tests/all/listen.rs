//! `toolward serve --listen`: the gateway over streamable HTTP keeps out whoever does not
//! belong (a non-loopback address unless allowed, an Origin not allowed → 403, no or a wrong
//! bearer token → 401), and a client with a token gets the tools, with the token's name as
//! the principal of its calls. The positive path is spoken by toolward's own streamable HTTP
//! client (`Upstream::connect_http`), the refusals by hand-written HTTP requests.
//! `sessions` holds each session to the principal that opened it; `abuse` keeps the listener
//! serving under idle sockets, too many connections or sessions, and no descriptors left;
//! `stateless` serves 2026-07-28 clients without sessions; `oauth` is the listener as an OAuth
//! resource server against a real authorization server.

mod abuse;
#[cfg(unix)]
pub(crate) mod oauth;
mod sessions;
pub(crate) mod stateless;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use toolward::Toolward;
use toolward::config::Config;
use toolward::gateway::GatewaySettings;
use toolward::listen::{ListenError, ListenLimits, ListenSettings, Listening, serve_http, tokens};
use toolward::transport::{HttpSpec, TransportLimits, Upstream};

const FAKE_SERVER: &str = env!("CARGO_BIN_EXE_toolward-fake-server");
const ALICE: &str = "alice-0123456789abcdef0123456789abcdef";
const BOB: &str = "bob-0123456789abcdef0123456789abcdef0";
/// The revision the hand-written clients speak.
const PROTOCOL_VERSION: &str = "2025-11-25";

/// Writes, in `dir`, a fake server `s` with tools `echo` (read-only) and `write`
/// (local-change: the default policy holds it for approval) that logs every call it receives
/// to `calls.jsonl`, its rules, and a config with tokens for `alice` and `bob`, origin
/// `http://localhost:6274` allowed, and `listen` and `limits` laid over; pins it. Returns the
/// config.
async fn write_config(dir: &std::path::Path, listen: Value, limits: Value) -> Config {
    // Made before the server starts: a confined server cannot create files directly in the
    // folder of the config it is withheld.
    std::fs::write(dir.join("calls.jsonl"), "").unwrap();
    std::fs::write(
        dir.join("s.json"),
        json!({
            "pages": [r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}, {"name": "write", "description": "Writes.", "inputSchema": {"type": "object"}}]}"#],
            "calls_log": dir.join("calls.jsonl"),
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("rules.json"),
        r#"{"servers": {"s": {"tools": {"echo": {"effect": "read-only"}, "write": {"effect": "local-change"}}}}}"#,
    )
    .unwrap();
    let mut listen_section = json!({"tokens": {"alice": ALICE, "bob": BOB}, "allowed_origins": ["http://localhost:6274"]});
    for (key, value) in listen.as_object().unwrap() {
        listen_section[key] = value.clone();
    }
    let document = json!({
        "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
        "rules": {"file": "rules.json"}, "manifest": "manifest.json", "state_dir": "state",
        "audit": {"file": "state/audit.jsonl", "sync": "none"},
        "listen": listen_section,
        "limits": limits,
    });
    std::fs::write(dir.join("toolward.json"), document.to_string()).unwrap();
    let config = Config::from_value(document, dir).unwrap();
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    pinned.manifest.write(&config.manifest).unwrap();
    config
}

/// toolward as [`write_config`] sets it up, listening on a free loopback port.
async fn start_with(dir: &std::path::Path, listen: Value, limits: Value) -> (Toolward, Listening) {
    let config = write_config(dir, listen, limits).await;
    let toolward = Toolward::start(config).await.unwrap();
    let config = toolward.config();
    let (tokens, file) =
        tokens(&config.listen, toolward.state().unwrap(), &config.principal).unwrap();
    assert_eq!(file, None, "named tokens need no file");
    let listening = serve_http(
        toolward.call_path().clone(),
        Vec::new(),
        GatewaySettings::from_config(config),
        ListenSettings {
            addr: "127.0.0.1:0".parse().unwrap(),
            allow_non_loopback: false,
            tokens,
            allowed_origins: config.listen.allowed_origins.clone(),
            limits: ListenLimits::from_config(&config.listen),
            oauth: None,
        },
    )
    .await
    .unwrap();
    (toolward, listening)
}

/// toolward with the default bounds.
async fn start(dir: &std::path::Path) -> (Toolward, Listening) {
    start_with(dir, json!({}), json!({})).await
}

/// Sends one request on a connection of its own, as a client of `token` would: `method` to
/// `/mcp`, in `session` when given, with `message` as the JSON body when given.
async fn send(
    addr: SocketAddr,
    method: &str,
    token: &str,
    session: Option<&str>,
    message: Option<Value>,
) -> hyper::Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", format!("127.0.0.1:{}", addr.port()))
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"));
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", PROTOCOL_VERSION);
    }
    let body = match message {
        Some(message) => {
            request = request.header("content-type", "application/json");
            Full::new(Bytes::from(message.to_string()))
        }
        None => Full::new(Bytes::new()),
    };
    tokio::time::timeout(
        Duration::from_secs(20),
        sender.send_request(request.body(body).unwrap()),
    )
    .await
    .expect("no answer within 20 s")
    .unwrap()
}

/// The whole body of a response that is not an event stream, as text.
async fn text(response: hyper::Response<Incoming>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The JSON-RPC messages of a server-sent event stream, one at a time.
struct Events {
    body: Incoming,
    buffer: String,
}

impl Events {
    fn new(response: hyper::Response<Incoming>) -> Events {
        Events {
            body: response.into_body(),
            buffer: String::new(),
        }
    }

    /// The next message (events without data, as rmcp's priming event, are skipped).
    async fn next(&mut self) -> Value {
        let read = async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..end + 2).collect();
                    let data: Vec<&str> = event
                        .lines()
                        .filter_map(|line| line.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect();
                    let data = data.join("\n");
                    if data.trim().is_empty() {
                        continue;
                    }
                    return serde_json::from_str::<Value>(&data).unwrap();
                }
                let frame = self.body.frame().await.expect("the stream ended").unwrap();
                if let Ok(data) = frame.into_data() {
                    self.buffer
                        .push_str(&String::from_utf8_lossy(&data).replace("\r\n", "\n"));
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("no message within 20 s")
    }

    /// The next message that answers request `id`, or asks `method` when `id` is null.
    async fn until(&mut self, id: &Value, method: &str) -> Value {
        loop {
            let message = self.next().await;
            if (!id.is_null() && message["id"] == *id && message.get("method").is_none())
                || (id.is_null() && message["method"] == method)
            {
                return message;
            }
        }
    }
}

/// Opens a session for `token` (`initialize`, then `notifications/initialized`), declaring
/// elicitation when `elicitation`; the session's id.
async fn open_session(addr: SocketAddr, token: &str, elicitation: bool) -> String {
    let response = initialize(addr, token, elicitation).await;
    assert_eq!(response.status(), 200, "initialize");
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer = Events::new(response).next().await;
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "toolward",
        "{answer}"
    );
    let initialized = send(
        addr,
        "POST",
        token,
        Some(&session),
        Some(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    )
    .await;
    assert_eq!(initialized.status(), 202, "notifications/initialized");
    session
}

/// An `initialize` for `token`, declaring elicitation when `elicitation`.
async fn initialize(addr: SocketAddr, token: &str, elicitation: bool) -> hyper::Response<Incoming> {
    let capabilities = if elicitation {
        json!({"elicitation": {}})
    } else {
        json!({})
    };
    send(
        addr,
        "POST",
        token,
        None,
        Some(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": capabilities,
            "clientInfo": {"name": "t", "version": "1"}}}),
        ),
    )
    .await
}

/// The audit log's records.
fn audit_records(dir: &std::path::Path) -> Vec<Value> {
    crate::support::audit_records(&dir.join("state/audit.jsonl"))
}

/// POSTs an `initialize` with `headers` by hand; the status code and the whole response.
fn post(addr: SocketAddr, headers: &[(&str, &str)]) -> (u16, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        addr.port(),
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    // An event stream stays open: the head and first event are enough.
    let mut chunk = [0u8; 4096];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        response.extend_from_slice(&chunk[..n]);
        if String::from_utf8_lossy(&response).contains("\r\n\r\n") && response.len() > 64 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_known_token_or_from_another_origin_a_request_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start(dir.path()).await;
    let addr = listening.addr;
    let bearer = format!("Bearer {ALICE}");
    let results = tokio::task::spawn_blocking(move || {
        let none = post(addr, &[]);
        let wrong = post(
            addr,
            &[(
                "Authorization",
                "Bearer not-a-token-of-toolward-at-all-0000",
            )],
        );
        let evil = post(
            addr,
            &[
                ("Authorization", &bearer),
                ("Origin", "http://evil.example"),
            ],
        );
        let evil_no_token = post(addr, &[("Origin", "http://evil.example")]);
        let allowed = post(
            addr,
            &[
                ("Authorization", &bearer),
                ("Origin", "http://localhost:6274"),
            ],
        );
        let plain = post(addr, &[("Authorization", &bearer)]);
        (none, wrong, evil, evil_no_token, allowed, plain)
    })
    .await
    .unwrap();
    let (none, wrong, evil, evil_no_token, allowed, plain) = results;
    assert_eq!(none.0, 401, "{}", none.1);
    assert!(
        none.1
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{}",
        none.1
    );
    assert_eq!(wrong.0, 401, "{}", wrong.1);
    assert_eq!(evil.0, 403, "{}", evil.1);
    assert_eq!(evil_no_token.0, 403, "{}", evil_no_token.1);
    assert_eq!(allowed.0, 200, "{}", allowed.1);
    assert_eq!(plain.0, 200, "{}", plain.1);
    listening.stop().await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_token_lists_and_calls_and_its_name_is_the_principal() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start(dir.path()).await;
    let spec = HttpSpec {
        url: listening.url(),
        headers: BTreeMap::from([(String::from("Authorization"), format!("Bearer {BOB}"))]),
        ..HttpSpec::default()
    };
    let client = Upstream::connect_http("gateway", &spec, &TransportLimits::default())
        .await
        .unwrap();
    assert_eq!(client.identity().name, "toolward");
    let page = client.list_tools_page(None).await.unwrap();
    let listing: serde_json::Value = serde_json::from_slice(&page).unwrap();
    assert_eq!(listing["tools"][0]["name"], "s__echo");
    let result = client
        .call_tool(
            "s__echo",
            json!({"n": 1}).as_object().cloned().unwrap(),
            std::time::Duration::from_secs(10),
            None,
        )
        .await
        .unwrap();
    assert_eq!(result["isError"], json!(false), "{result}");
    assert_eq!(result["content"][0]["text"], r#"{"n":1}"#);
    client.close().await;
    listening.stop().await;
    toolward.shutdown().await;

    let audit = crate::support::audit_records(&dir.path().join("state/audit.jsonl"));
    let decisions: Vec<&serde_json::Value> = audit
        .iter()
        .filter(|record| record["kind"] == "decision")
        .collect();
    assert_eq!(decisions.len(), 1, "{audit:?}");
    assert_eq!(decisions[0]["principal"], "bob", "{}", decisions[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_is_not_loopback_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start(dir.path()).await;
    let refused = serve_http(
        toolward.call_path().clone(),
        Vec::new(),
        GatewaySettings::from_config(toolward.config()),
        ListenSettings {
            addr: "0.0.0.0:0".parse().unwrap(),
            allow_non_loopback: false,
            tokens: BTreeMap::from([(String::from("a"), ALICE.to_owned())]),
            allowed_origins: Vec::new(),
            limits: ListenLimits::default(),
            oauth: None,
        },
    )
    .await;
    assert!(
        matches!(refused, Err(ListenError::NotLoopback { .. })),
        "{refused:?}"
    );
    listening.stop().await;
    toolward.shutdown().await;
}

#[test]
fn without_named_tokens_one_is_generated_owner_only_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let state = toolward::store::StateDir::open(&dir.path().join("state")).unwrap();
    let listen = toolward::config::ListenConfig::default();
    let (first, file) = tokens(&listen, &state, "operator").unwrap();
    let file = file.unwrap();
    let token = first["operator"].clone();
    assert!(token.len() >= 64, "{token}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap().trim(),
        token.as_str()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A token others may read is refused, not used.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = tokens(&listen, &state, "operator").unwrap_err();
        assert!(error.to_string().contains("run `chmod 0600"), "{error}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let (again, _) = tokens(&listen, &state, "operator").unwrap();
    assert_eq!(again, first, "a second start makes a new token");
}

#[test]
fn a_token_file_of_another_owner_or_a_symlink_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = toolward::store::StateDir::open(&dir.path().join("state")).unwrap();
    let listen = toolward::config::ListenConfig::default();
    let file = state.path().join(toolward::listen::TOKEN_FILE);
    // A symlink to a token file elsewhere (here a file the attacker chose) is not followed.
    let elsewhere = dir.path().join("chosen-token");
    std::fs::write(&elsewhere, "a".repeat(64)).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    let error = tokens(&listen, &state, "operator").unwrap_err().to_string();
    assert!(error.contains("is not a regular file"), "{error}");
    std::fs::remove_file(&file).unwrap();

    let Some(other) = crate::support::other_user() else {
        return;
    };
    std::fs::write(&file, format!("{}\n", "b".repeat(64))).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&file, Some(other), None).unwrap();
    let error = tokens(&listen, &state, "operator").unwrap_err().to_string();
    assert!(
        error.contains(&format!("is owned by uid {other}")) && error.contains("run `chown"),
        "{error}"
    );
}
