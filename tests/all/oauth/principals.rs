//! Each principal's calls under its own grant (issue 31, item 4): with
//! `oauth.per_principal`, `serve --listen`'s principals reach an OAuth-protected server each
//! in an upstream session of its own, opened with its own token; pinning and loading use the
//! operator's grant; a principal without a grant gets a tool error naming the command; the
//! client's own bearer token never travels upstream.
//!
//! The upstream is a fixture on loopback that records the `Authorization` and
//! `Mcp-Session-Id` of every request it receives and, like real MCP servers, binds each
//! session to the token that opened it (a request of the session with another token is
//! answered `404`). Where the grants come from:
//!
//! - written through the grant store's own code (`GrantStore::write`), in the tests that run
//!   everywhere;
//! - from a real authorization server, the MCP TypeScript SDK's example (`--oauth`: metadata,
//!   dynamic registration, PKCE), through `toolward auth login demo --principal P` and a
//!   `GET` playing the browser, when it is installed (`tests/real-servers/install.sh`). Its
//!   demo authorization server signs everyone in as one demo user, so the two principals
//!   there are two grants with tokens of their own, not two accounts;
//! - from `oidc-provider` (npm) with the provider script of `tests/real-servers/oidc/`
//!   (which comes with the listener's OAuth tests), whose accounts `alice` and `bob` sign in
//!   by the authorization request's `login_hint`: two principals, two accounts, and the JWTs
//!   the upstream receives name each account as `sub`. Skipped, saying why, while the script
//!   or the module is missing.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use toolward::Toolward;
use toolward::config::Config;
use toolward::gateway::GatewaySettings;
use toolward::listen::{ListenLimits, ListenSettings, Listening, serve_http, tokens};
use toolward::oauth::store::ClientAuth;
use toolward::oauth::{Grant, GrantKind, GrantStore, StateDirGrants};
use toolward::transport::{HttpSpec, TransportLimits, Upstream};

/// The listener's bearer tokens of the three principals: what the clients send toolward.
const ALICE: &str = "inbound-alice-0123456789abcdef0123456789";
const BOB: &str = "inbound-bob-0123456789abcdef0123456789ab";
const CAROL: &str = "inbound-carol-0123456789abcdef012345678";

/// One request the protected fixture received.
#[derive(Debug, Clone)]
struct Seen {
    http_method: String,
    rpc: String,
    tool: String,
    authorization: Option<String>,
    session: Option<String>,
}

/// The protected fixture: an MCP server over streamable HTTP on loopback that answers `401`
/// without a bearer token, gives each `initialize` a session of its own bound to its token,
/// and answers `404` to a request of a session carrying another token. Tools: `whoami`
/// (answers which token it saw) and `admin` (always `403 insufficient_scope`, asking for
/// `admin:write`).
pub(super) struct Protected {
    pub(super) url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Protected {
    /// Starts it; with `issuer`, its protected-resource metadata names that authorization
    /// server. Its URL names `localhost`, as the SDK's authorization server names itself:
    /// the origin rule lets sign-in reach the server's own host, and no other internal one.
    async fn start(issuer: Option<String>) -> Protected {
        Protected::start_at("localhost", issuer).await
    }

    /// As [`Protected::start`], its URL naming `host` (a name or address of 127.0.0.1).
    pub(super) async fn start_at(host: &str, issuer: Option<String>) -> Protected {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("http://{host}:{port}/mcp");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sessions: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let record = Arc::clone(&seen);
        let resource = url.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (record, sessions, resource, issuer) = (
                    Arc::clone(&record),
                    Arc::clone(&sessions),
                    resource.clone(),
                    issuer.clone(),
                );
                let service = service_fn(move |request: hyper::Request<Incoming>| {
                    let (record, sessions, resource, issuer) = (
                        Arc::clone(&record),
                        Arc::clone(&sessions),
                        resource.clone(),
                        issuer.clone(),
                    );
                    async move {
                        Ok::<_, Infallible>(
                            answer(request, &record, &sessions, &resource, issuer.as_deref()).await,
                        )
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Protected { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Every request that carried `Bearer token`.
    fn with_token(&self, token: &str) -> Vec<Seen> {
        let bearer = format!("Bearer {token}");
        self.seen()
            .into_iter()
            .filter(|seen| seen.authorization.as_deref() == Some(bearer.as_str()))
            .collect()
    }
}

fn reply(status: u16) -> hyper::http::response::Builder {
    hyper::Response::builder().status(status)
}

async fn answer(
    request: hyper::Request<Incoming>,
    record: &Mutex<Vec<Seen>>,
    sessions: &Mutex<HashMap<String, String>>,
    resource: &str,
    issuer: Option<&str>,
) -> hyper::Response<Full<Bytes>> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    let (authorization, session) = (header("authorization"), header("mcp-session-id"));
    let http_method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rpc = message["method"].as_str().unwrap_or_default().to_owned();
    record.lock().unwrap().push(Seen {
        http_method: http_method.clone(),
        rpc: rpc.clone(),
        tool: message["params"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        authorization: authorization.clone(),
        session: session.clone(),
    });
    let empty = || Full::new(Bytes::new());
    if path.starts_with("/.well-known/oauth-protected-resource") {
        return match issuer {
            Some(issuer) => reply(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(
                    json!({ "resource": resource, "authorization_servers": [issuer] }).to_string(),
                )))
                .unwrap(),
            None => reply(404).body(empty()).unwrap(),
        };
    }
    let Some(token) = authorization
        .as_deref()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned)
    else {
        let metadata = resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
        return reply(401)
            .header(
                "www-authenticate",
                format!("Bearer resource_metadata=\"{metadata}\""),
            )
            .body(empty())
            .unwrap();
    };
    if rpc != "initialize" {
        // A session is its user's: another token in it is not that session.
        let owner = session
            .as_deref()
            .and_then(|id| sessions.lock().unwrap().get(id).cloned());
        if owner.as_deref() != Some(token.as_str()) {
            return reply(404).body(empty()).unwrap();
        }
    }
    match http_method.as_str() {
        "DELETE" => return reply(200).body(empty()).unwrap(),
        "GET" => return reply(405).body(empty()).unwrap(),
        _ => {}
    }
    let Some(id) = message.get("id").filter(|_| !rpc.is_empty()) else {
        return reply(202).body(empty()).unwrap();
    };
    let mut response = reply(200).header("content-type", "application/json");
    let result = match rpc.as_str() {
        "initialize" => {
            let mut sessions = sessions.lock().unwrap();
            let id = format!("session-{}", sessions.len() + 1);
            sessions.insert(id.clone(), token.clone());
            response = response.header("mcp-session-id", id);
            json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "protected", "version": "1.0.0" },
            })
        }
        "tools/list" => json!({ "tools": [
            { "name": "whoami", "description": "Says which token it saw.", "inputSchema": { "type": "object" } },
            { "name": "admin", "description": "Needs more scope.", "inputSchema": { "type": "object" } },
        ] }),
        "tools/call" if message["params"]["name"] == "admin" => {
            return reply(403)
                .header(
                    "www-authenticate",
                    "Bearer error=\"insufficient_scope\", scope=\"admin:write\"",
                )
                .body(empty())
                .unwrap();
        }
        "tools/call" => json!({
            "content": [{ "type": "text", "text": format!("token {}", &token[..token.len().min(12)]) }],
            "isError": false,
        }),
        _ => json!({}),
    };
    response
        .body(Full::new(Bytes::from(
            json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string(),
        )))
        .unwrap()
}

/// A config in `dir` with the fixture as server `demo` (both tools read-only), `oauth` as
/// given, and listener tokens for alice, bob and carol.
pub(super) fn config(dir: &std::path::Path, url: &str, oauth: Value) -> Config {
    std::fs::write(
        dir.join("rules.json"),
        json!({ "servers": { "demo": { "tools": {
            "whoami": { "effect": "read-only" },
            "admin": { "effect": "read-only" },
        } } } })
        .to_string(),
    )
    .unwrap();
    let document = json!({
        "mcpServers": { "demo": { "type": "http", "url": url, "oauth": oauth } },
        "rules": { "file": "rules.json" }, "manifest": "manifest.json", "state_dir": "state",
        "audit": { "file": "state/audit.jsonl", "sync": "none" },
        "listen": { "tokens": { "alice": ALICE, "bob": BOB, "carol": CAROL } },
    });
    std::fs::write(dir.join("toolward.json"), document.to_string()).unwrap();
    Config::from_value(document, dir).unwrap()
}

/// A grant of `demo` at `url` whose access token is `token`, the operator's or `principal`'s.
fn grant(url: &str, principal: Option<&str>, token: &str) -> Grant {
    Grant {
        server: String::from("demo"),
        principal: principal.map(str::to_owned),
        resource: url.to_owned(),
        issuer: String::from("http://localhost:1/"),
        token_endpoint: String::from("http://localhost:1/token"),
        revocation_endpoint: None,
        client_id: String::from("client-1"),
        client_secret: None,
        client_auth: ClientAuth::None,
        kind: GrantKind::AuthorizationCode,
        access_token: token.to_owned(),
        refresh_token: None,
        expires_at: None,
        scopes: vec![String::from("mcp:tools")],
        obtained_at: 0,
    }
}

/// Pins, starts and listens on a free loopback port.
async fn serve(config: Config) -> (Toolward, Listening) {
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
    pinned.manifest.write(&config.manifest).unwrap();
    let toolward = Toolward::start(config).await.unwrap();
    let config = toolward.config();
    let (tokens, _) = tokens(&config.listen, toolward.state().unwrap(), &config.principal).unwrap();
    let listening = serve_http(
        toolward.call_path().clone(),
        Vec::new(),
        GatewaySettings::from_config(config),
        ListenSettings {
            addr: "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
            allow_non_loopback: false,
            tokens,
            allowed_origins: Vec::new(),
            limits: ListenLimits::from_config(&config.listen),
            oauth: None,
        },
    )
    .await
    .unwrap();
    (toolward, listening)
}

/// A client of the listener with bearer token `token`.
async fn client(listening: &Listening, token: &str) -> Upstream {
    let spec = HttpSpec {
        url: listening.url(),
        headers: BTreeMap::from([(String::from("Authorization"), format!("Bearer {token}"))]),
        ..HttpSpec::default()
    };
    Upstream::connect_http("gateway", &spec, &TransportLimits::default())
        .await
        .unwrap()
}

/// Calls `tool` through `client`; the text of its result, and whether it is a tool error.
async fn call(client: &Upstream, tool: &str) -> (String, bool) {
    let result = client
        .call_tool(tool, serde_json::Map::new(), Duration::from_secs(20), None)
        .await
        .unwrap();
    (
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        result["isError"] == json!(true),
    )
}

/// The sessions `seen` requests were made in (one each, `None` left out), sorted.
fn sessions(seen: &[Seen]) -> Vec<String> {
    let mut sessions: Vec<String> = seen.iter().filter_map(|s| s.session.clone()).collect();
    sessions.sort();
    sessions.dedup();
    sessions
}

/// No request the fixture received carried a token the clients sent toolward.
fn assert_no_inbound_token_upstream(protected: &Protected) {
    let seen = protected.seen();
    assert!(!seen.is_empty());
    for request in &seen {
        if let Some(authorization) = &request.authorization {
            for inbound in [ALICE, BOB, CAROL] {
                assert!(
                    !authorization.contains(inbound),
                    "a client's own token went upstream: {request:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_principal_calls_in_a_session_of_its_own_under_its_own_grant_and_no_inbound_token_goes_upstream()
 {
    let protected = Protected::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &protected.url, json!({ "per_principal": true }));
    let store = GrantStore::StateDir(StateDirGrants::open(&config.state_dir).unwrap());
    for (principal, token) in [
        (None, "upstream-operator-token"),
        (Some("alice"), "upstream-alice-token"),
        (Some("bob"), "upstream-bob-token"),
    ] {
        store
            .write(&grant(&protected.url, principal, token))
            .await
            .unwrap();
    }
    let (toolward, listening) = serve(config).await;
    // Pinning and loading: the operator's grant alone.
    assert!(
        protected
            .seen()
            .iter()
            .all(|seen| seen.authorization.as_deref() == Some("Bearer upstream-operator-token")),
        "{:?}",
        protected.seen()
    );

    let alice = client(&listening, ALICE).await;
    let bob = client(&listening, BOB).await;
    let carol = client(&listening, CAROL).await;
    assert_eq!(
        call(&alice, "demo__whoami").await,
        (String::from("token upstream-ali"), false)
    );
    assert_eq!(
        call(&bob, "demo__whoami").await,
        (String::from("token upstream-bob"), false)
    );
    assert_eq!(
        call(&alice, "demo__whoami").await,
        (String::from("token upstream-ali"), false)
    );

    // A principal without a grant: a tool error naming the command, and nothing sent.
    let before = protected.seen().len();
    let (text, is_error) = call(&carol, "demo__whoami").await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("cannot be called as principal `carol`")
            && text.contains("run `toolward auth login demo --principal carol`"),
        "{text}"
    );
    assert_eq!(
        protected.seen().len(),
        before,
        "carol's call reached the server"
    );

    // More scope: a tool error naming the sign-in of that principal with that scope.
    let (text, is_error) = call(&bob, "demo__admin").await;
    assert!(is_error, "{text}");
    assert!(
        text.contains("run `toolward auth login demo --principal bob --scope admin:write`"),
        "{text}"
    );
    assert!(
        protected
            .with_token("upstream-bob-token")
            .iter()
            .any(|seen| seen.tool == "admin")
    );

    // Each principal's session was opened by its own `initialize`, once, with its own token,
    // and is not the operator's.
    let operator = protected.with_token("upstream-operator-token");
    let alices = protected.with_token("upstream-alice-token");
    let bobs = protected.with_token("upstream-bob-token");
    for (seen, calls) in [(&alices, 2), (&bobs, 2)] {
        assert_eq!(
            seen.iter().filter(|s| s.rpc == "initialize").count(),
            1,
            "{seen:?}"
        );
        assert_eq!(
            seen.iter().filter(|s| s.rpc == "tools/call").count(),
            calls,
            "{seen:?}"
        );
        assert_eq!(sessions(seen).len(), 1, "{seen:?}");
        assert!(!sessions(&operator).contains(&sessions(seen)[0]));
    }
    assert_ne!(sessions(&alices), sessions(&bobs));
    assert!(
        operator.iter().all(|seen| seen.rpc != "tools/call"),
        "a principal's call went out under the operator's grant: {operator:?}"
    );
    assert_no_inbound_token_upstream(&protected);

    // Idle sessions are closed, each with its own token, and the next call opens a new one.
    let registry = toolward.call_path().registry();
    assert_eq!(
        registry.principal_sessions("demo"),
        ["alice", "bob", "carol"]
    );
    assert_eq!(
        registry.close_idle_principal_sessions(Duration::ZERO).await,
        2
    );
    assert!(registry.principal_sessions("demo").is_empty());
    for token in ["upstream-alice-token", "upstream-bob-token"] {
        let deletes = protected
            .with_token(token)
            .iter()
            .filter(|seen| seen.http_method == "DELETE")
            .count();
        assert_eq!(deletes, 1, "{token}");
    }
    assert_eq!(
        call(&alice, "demo__whoami").await,
        (String::from("token upstream-ali"), false)
    );
    let alices = protected.with_token("upstream-alice-token");
    assert_eq!(
        alices.iter().filter(|s| s.rpc == "initialize").count(),
        2,
        "{alices:?}"
    );
    assert_eq!(sessions(&alices).len(), 2, "{alices:?}");

    for client in [alice, bob, carol] {
        client.close().await;
    }
    listening.stop().await;
    toolward.shutdown().await;
    // At shutdown Alice's reopened session is ended with her token.
    let deletes = protected
        .with_token("upstream-alice-token")
        .iter()
        .filter(|seen| seen.http_method == "DELETE")
        .count();
    assert_eq!(deletes, 2, "Alice's second session was not ended");
    assert_no_inbound_token_upstream(&protected);
    let audit = crate::support::audit_records(&dir.path().join("state/audit.jsonl"));
    let text = serde_json::to_string(&audit).unwrap();
    assert!(!text.contains("upstream-alice-token") && !text.contains(ALICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_per_principal_every_principal_calls_under_the_operators_grant_and_no_inbound_token_goes_upstream()
 {
    let protected = Protected::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &protected.url, json!({}));
    let store = GrantStore::StateDir(StateDirGrants::open(&config.state_dir).unwrap());
    store
        .write(&grant(&protected.url, None, "upstream-operator-token"))
        .await
        .unwrap();
    // A principal's grant is not used while the server shares the operator's.
    store
        .write(&grant(
            &protected.url,
            Some("alice"),
            "upstream-alice-token",
        ))
        .await
        .unwrap();
    let (toolward, listening) = serve(config).await;
    let alice = client(&listening, ALICE).await;
    let carol = client(&listening, CAROL).await;
    assert_eq!(
        call(&alice, "demo__whoami").await,
        (String::from("token upstream-ope"), false)
    );
    assert_eq!(
        call(&carol, "demo__whoami").await,
        (String::from("token upstream-ope"), false)
    );
    let (text, _) = call(&carol, "demo__admin").await;
    assert!(
        text.ends_with("run `toolward auth login demo --scope admin:write`"),
        "{text}"
    );
    assert!(protected.with_token("upstream-alice-token").is_empty());
    // Every call in one session: the load's, opened with the operator's token.
    let calls: Vec<Seen> = protected
        .seen()
        .into_iter()
        .filter(|seen| seen.rpc == "tools/call")
        .collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(sessions(&calls).len(), 1, "{calls:?}");
    assert_no_inbound_token_upstream(&protected);
    alice.close().await;
    carol.close().await;
    listening.stop().await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_signed_in_by_a_real_authorization_server_reach_the_upstream_each_with_its_own_token()
 {
    let Some(script) = super::example_server() else {
        return;
    };
    let Some(bin) = crate::support::toolward_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The SDK's example is the authorization server; its metadata names its issuer.
    let sdk = super::Upstream::start(&script, dir.path());
    let metadata: Value = {
        let port = sdk.mcp_port;
        let answer = reqwest_get(&format!(
            "http://localhost:{port}/.well-known/oauth-protected-resource/mcp"
        ))
        .await;
        serde_json::from_str(&answer).unwrap()
    };
    let issuer = metadata["authorization_servers"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let protected = Protected::start(Some(issuer)).await;
    let config = config(dir.path(), &protected.url, json!({ "per_principal": true }));
    let config_arg = dir.path().join("toolward.json").display().to_string();

    let mut printed = String::new();
    for args in [
        &[][..],
        &["--principal", "alice"][..],
        &["--principal", "bob"][..],
    ] {
        let bin = bin.to_owned();
        let dir_path = dir.path().to_owned();
        let config_arg = config_arg.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let log = sdk.log.clone();
        let (out, _, _) = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            super::sign_in(&bin, &dir_path, &config_arg, &args, &|| {
                std::fs::read_to_string(&log).unwrap_or_default()
            })
        })
        .await
        .unwrap();
        printed.push_str(&out);
    }
    assert!(
        printed.contains("signed in to server `demo` as principal `alice`"),
        "{printed}"
    );
    let (code, status, err) = super::toolward(
        bin,
        dir.path(),
        &["auth", "status", "--config", &config_arg, "--json"],
    );
    assert_eq!(code, Some(0), "{status}{err}");
    let rows: Vec<Value> = serde_json::from_str(&status).unwrap();
    let principals: Vec<Value> = rows.iter().map(|row| row["principal"].clone()).collect();
    assert_eq!(
        principals,
        [json!(null), json!("alice"), json!("bob")],
        "{status}"
    );

    let (toolward, listening) = serve(config).await;
    let alice = client(&listening, ALICE).await;
    let bob = client(&listening, BOB).await;
    let (alice_saw, error) = call(&alice, "demo__whoami").await;
    assert!(!error, "{alice_saw}");
    let (bob_saw, error) = call(&bob, "demo__whoami").await;
    assert!(!error, "{bob_saw}");
    assert_ne!(alice_saw, bob_saw);
    // Three grants, three tokens: the load's, Alice's and Bob's, each in sessions of its own.
    let calls: Vec<Seen> = protected
        .seen()
        .into_iter()
        .filter(|seen| seen.rpc == "tools/call")
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_ne!(calls[0].authorization, calls[1].authorization);
    let loaded = protected
        .seen()
        .into_iter()
        .find(|seen| seen.rpc == "tools/list")
        .unwrap();
    for call in &calls {
        assert_ne!(call.authorization, loaded.authorization);
    }
    assert_no_inbound_token_upstream(&protected);

    // Alice signs out: her next call is refused, naming her sign-in; Bob's goes on.
    alice.close().await;
    let (code, out, err) = super::toolward(
        bin,
        dir.path(),
        &[
            "auth",
            "logout",
            "demo",
            "--principal",
            "alice",
            "--config",
            &config_arg,
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, status, _) = super::toolward(
        bin,
        dir.path(),
        &["auth", "status", "--config", &config_arg],
    );
    assert_eq!(code, Some(0));
    assert!(
        !status.contains("`alice`") && status.contains("`bob`"),
        "{status}"
    );
    let (_, error) = call(&bob, "demo__whoami").await;
    assert!(!error);
    bob.close().await;
    listening.stop().await;
    toolward.shutdown().await;
}

/// The folder of `oidc-provider` and the provider script of `tests/real-servers/oidc/`, or
/// `None` after saying why: the script comes with the listener's OAuth tests (branch
/// `oauth-listener`), the module from `tests/real-servers/install.sh`.
pub(super) fn oidc_provider() -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let modules = crate::real::real_servers().join("oidc-provider/node_modules");
    let script = crate::support::repo().join("tests/real-servers/oidc/provider.mjs");
    if modules.join("oidc-provider/package.json").is_file() && script.is_file() {
        return Some((modules, script));
    }
    eprintln!(
        "skipped: needs {} (tests/real-servers/install.sh) and {}",
        modules.display(),
        script.display()
    );
    None
}

/// One `GET` of `url` (`http://host:port/path?query`) with `cookies`, as a browser sends it:
/// the status, the `Location` and the cookies it sets (`name=value`).
fn browser_get(
    url: &str,
    cookies: &BTreeMap<String, String>,
) -> (u16, Option<String>, Vec<String>) {
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let cookie: Vec<String> = cookies.iter().map(|(k, v)| format!("{k}={v}")).collect();
    std::io::Write::write_all(
        &mut stream,
        format!(
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/html\r\nCookie: {}\r\nConnection: close\r\n\r\n",
            cookie.join("; ")
        )
        .as_bytes(),
    )
    .unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut stream, &mut answer);
    let head = answer.split("\r\n\r\n").next().unwrap_or_default();
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let mut location = None;
    let mut set = Vec::new();
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.eq_ignore_ascii_case("location") {
            let value = value.trim();
            location = Some(if value.starts_with('/') {
                format!("http://{authority}{value}")
            } else {
                value.to_owned()
            });
        } else if name.eq_ignore_ascii_case("set-cookie") {
            set.push(
                value
                    .trim()
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    (status, location, set)
}

/// The claims of a JWT (its payload, base64url without padding), without checking it.
pub(super) fn jwt_claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits = 0u32;
    let mut count = 0;
    let mut bytes = Vec::new();
    for c in payload.bytes() {
        let value = alphabet.iter().position(|a| *a == c).unwrap() as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            bytes.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_principals_signed_in_as_two_accounts_of_a_real_provider_reach_the_upstream_as_those_two()
 {
    let Some((modules, script)) = oidc_provider() else {
        return;
    };
    let Some(bin) = crate::support::toolward_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The provider: accounts alice and bob, the public native client `toolward-tests`, the
    // account chosen by the authorization request's `login_hint`, JWT access tokens whose
    // `sub` is the account and whose `aud` is the resource.
    let provider_dir = dir.path().join("provider");
    std::fs::create_dir_all(&provider_dir).unwrap();
    std::fs::copy(&script, provider_dir.join("provider.mjs")).unwrap();
    std::os::unix::fs::symlink(&modules, provider_dir.join("node_modules")).unwrap();
    let port = super::free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let log = provider_dir.join("provider.log");
    let out = std::fs::File::create(&log).unwrap();
    let _provider = tokio::process::Command::new("node")
        .arg(provider_dir.join("provider.mjs"))
        .env("PORT", port.to_string())
        .env("KEYS", provider_dir.join("keys.json"))
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("listening ")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the provider did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The fixture on the provider's host: 127.0.0.1.
    let protected = Protected::start_at("127.0.0.1", Some(issuer)).await;
    let config = config(
        dir.path(),
        &protected.url,
        json!({
            "per_principal": true,
            "client_id": "toolward-tests",
            "scopes": ["openid", "mcp:tools"],
        }),
    );
    let config_arg = dir.path().join("toolward.json").display().to_string();

    // `auth login` for the operator (alice's account), alice and bob: the browser adds the
    // account to sign in as (`login_hint`) and keeps the provider's cookies.
    for (principal, account) in [
        (None, "alice"),
        (Some("alice"), "alice"),
        (Some("bob"), "bob"),
    ] {
        let mut args = vec![
            "auth".to_owned(),
            "login".to_owned(),
            "demo".to_owned(),
            "--config".to_owned(),
            config_arg.clone(),
            "--timeout-secs".to_owned(),
            "60".to_owned(),
        ];
        if let Some(principal) = principal {
            args.extend(["--principal".to_owned(), principal.to_owned()]);
        }
        let bin = bin.to_owned();
        let cwd = dir.path().to_owned();
        let log = log.clone();
        tokio::task::spawn_blocking(move || {
            use std::io::BufRead as _;
            let mut login = std::process::Command::new(&bin)
                .args(&args)
                .current_dir(&cwd)
                .env_remove("BROWSER")
                .env_remove("TOOLWARD_LOG")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = std::io::BufReader::new(login.stdout.take().unwrap()).lines();
            let authorize = loop {
                let line = lines.next().unwrap().unwrap();
                if line.starts_with("http://") {
                    break line;
                }
            };
            let mut url = format!("{authorize}&login_hint={account}");
            let mut cookies = BTreeMap::new();
            for _ in 0..20 {
                let (status, location, set) = browser_get(&url, &cookies);
                for cookie in set {
                    if let Some((name, value)) = cookie.split_once('=') {
                        cookies.insert(name.to_owned(), value.to_owned());
                    }
                }
                let Some(location) = location else {
                    assert_eq!(
                        status,
                        200,
                        "stopped at {url}: {}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    break;
                };
                url = location;
            }
            for line in lines.map_while(Result::ok) {
                let _ = line;
            }
            let status = login.wait_with_output().unwrap();
            assert!(
                status.status.success(),
                "{}{}",
                String::from_utf8_lossy(&status.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        })
        .await
        .unwrap();
    }

    let (toolward, listening) = serve(config).await;
    let alice = client(&listening, ALICE).await;
    let bob = client(&listening, BOB).await;
    assert!(!call(&alice, "demo__whoami").await.1);
    assert!(!call(&bob, "demo__whoami").await.1);
    // Each principal's calls carry a token of its own account, for this server.
    let calls: Vec<Seen> = protected
        .seen()
        .into_iter()
        .filter(|seen| seen.rpc == "tools/call")
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let subjects: Vec<Value> = calls
        .iter()
        .map(|seen| {
            let token = seen
                .authorization
                .as_deref()
                .unwrap()
                .strip_prefix("Bearer ")
                .unwrap();
            let claims = jwt_claims(token);
            assert_eq!(claims["aud"], json!(protected.url), "{claims}");
            claims["sub"].clone()
        })
        .collect();
    assert_eq!(subjects, [json!("alice"), json!("bob")]);
    assert_ne!(sessions(&calls[..1]), sessions(&calls[1..]));
    assert_no_inbound_token_upstream(&protected);
    alice.close().await;
    bob.close().await;
    listening.stop().await;
    toolward.shutdown().await;
}

/// The body of a `GET` of `url` (loopback, HTTP/1.1).
async fn reqwest_get(url: &str) -> String {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let rest = url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap());
        let mut stream = std::net::TcpStream::connect(authority).unwrap();
        std::io::Write::write_all(
            &mut stream,
            format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| body)
            .unwrap_or_default();
        // A chunked body: its chunks joined.
        if answer
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            let mut out = String::new();
            let mut rest = body;
            while let Some((size, tail)) = rest.split_once("\r\n") {
                let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                if size == 0 {
                    break;
                }
                out.push_str(&tail[..size]);
                rest = &tail[size + 2..];
            }
            out
        } else {
            body.to_owned()
        }
    })
    .await
    .unwrap()
}
