//! `serve --listen` as an OAuth 2.1 resource server (`listen.oauth`, issue 31), against a real
//! authorization server: `oidc-provider` from npm (pinned by `tests/real-servers/install.sh`)
//! configured by `tests/real-servers/oidc/provider.mjs`, started on a free loopback port by
//! each test. Tokens come from it by real flows: identities sign in through the
//! authorization code with PKCE (`tests/real-servers/oidc/sign-in.mjs` plays the browser),
//! services through client credentials; the refusals are its real tokens sent where they do
//! not belong (another audience, another issuer, a disallowed algorithm, past their expiry,
//! signed by a key the issuer never published), or a real token's claims under an `alg: none`
//! or an HMAC header.
//!
//! Skipped with a message when `oidc-provider` is not installed, except in CI (`CI` set),
//! where that fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64_url::{decode, encode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use toolward::Toolward;
use toolward::config::Config;
use toolward::gateway::GatewaySettings;
use toolward::listen::{ListenLimits, ListenSettings, Listening, serve_http, tokens};

use super::{Events, FAKE_SERVER, PROTOCOL_VERSION, audit_records, send, text};
use crate::real::real_servers;
use crate::support::repo;

/// Base64url without padding, by hand (the test package has no base64 crate).
mod base64_url {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    pub fn decode(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut n, mut bits) = (0u32, 0);
        for c in text.bytes() {
            let v = ALPHABET.iter().position(|a| *a == c).unwrap() as u32;
            n = n << 6 | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((n >> bits & 0xff) as u8);
            }
        }
        out
    }
}

/// `oidc-provider`'s folder, or `None` after saying why (a failure under `CI`).
pub(crate) fn provider_modules() -> Option<PathBuf> {
    let modules = real_servers().join("oidc-provider/node_modules");
    if modules.join("oidc-provider/package.json").is_file() {
        return Some(modules);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is not installed and CI must run the listener's OAuth tests: run tests/real-servers/install.sh",
        modules.display()
    );
    eprintln!(
        "skipped: {} is not installed; run tests/real-servers/install.sh",
        modules.display()
    );
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running provider, killed when dropped.
pub(crate) struct Provider {
    child: tokio::process::Child,
    port: u16,
    pub(crate) issuer: String,
    dir: PathBuf,
    log: PathBuf,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Provider {
    /// Starts provider.mjs in `dir` (a copy beside a link to `modules`) signing with the keys
    /// of `keys` (made when missing), naming `issuer` or its own URL.
    pub(crate) async fn start(
        modules: &Path,
        dir: &Path,
        keys: &Path,
        issuer: Option<&str>,
    ) -> Provider {
        Provider::start_with(modules, dir, keys, issuer, &[]).await
    }

    /// As [`Provider::start`], with more variables for provider.mjs (`OPAQUE`).
    async fn start_with(
        modules: &Path,
        dir: &Path,
        keys: &Path,
        issuer: Option<&str>,
        env: &[(&str, &str)],
    ) -> Provider {
        std::fs::create_dir_all(dir).unwrap();
        for script in ["provider.mjs", "sign-in.mjs"] {
            std::fs::copy(
                repo().join("tests/real-servers/oidc").join(script),
                dir.join(script),
            )
            .unwrap();
        }
        let link = dir.join("node_modules");
        if !link.exists() {
            std::os::unix::fs::symlink(modules, &link).unwrap();
        }
        // A port found free may be taken by another test before node binds it: with no
        // issuer fixed in advance, another port is tried.
        let fixed_issuer = issuer.map(str::to_owned);
        'attempt: for attempt in 0.. {
            let port = free_port();
            let issuer = fixed_issuer
                .clone()
                .unwrap_or_else(|| format!("http://127.0.0.1:{port}"));
            let log = dir.join("provider.log");
            let out = std::fs::File::create(&log).unwrap();
            let child = tokio::process::Command::new("node")
                .arg(dir.join("provider.mjs"))
                .env("PORT", port.to_string())
                .env("ISSUER", &issuer)
                .env("KEYS", keys)
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let provider = Provider {
                child,
                port,
                issuer,
                dir: dir.to_owned(),
                log,
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while !provider.log_text().contains("listening ") {
                if provider.log_text().contains("EADDRINUSE")
                    && fixed_issuer.is_none()
                    && attempt < 5
                {
                    continue 'attempt;
                }
                assert!(
                    Instant::now() < deadline,
                    "the provider did not start: {}",
                    provider.log_text()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            return provider;
        }
        unreachable!("the attempts end by returning or panicking")
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Where the provider listens (for a forger's, not the issuer it names).
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The token response of identity `login` signed in for `resource`, with `refreshed`
    /// (the refresh token used once).
    async fn sign_in(&self, login: &str, resource: &str) -> Value {
        let out = tokio::process::Command::new("node")
            .arg(self.dir.join("sign-in.mjs"))
            .args([&self.endpoint(), login, resource, "--refresh"])
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "sign-in of {login} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// An access token of service client `client` for `resource` (client credentials), from
    /// the provider at `endpoint`.
    async fn client_credentials(endpoint: &str, client: &str, resource: &str) -> String {
        let body = format!(
            "grant_type=client_credentials&resource={}",
            percent(resource)
        );
        let basic = encode_std(format!("{client}:secret-{client}").as_bytes());
        let (status, _, answer) = request(
            endpoint,
            "POST",
            "/token",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("authorization", &format!("Basic {basic}")),
            ],
            body,
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        answer["access_token"].as_str().unwrap().to_owned()
    }
}

fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Standard base64 with padding (HTTP Basic).
fn encode_std(bytes: &[u8]) -> String {
    let mut text = encode(bytes).replace('-', "+").replace('_', "/");
    while !text.len().is_multiple_of(4) {
        text.push('=');
    }
    text
}

/// One HTTP request to `base` (`http://127.0.0.1:PORT`): status, headers, body.
async fn request(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (u16, hyper::HeaderMap, String) {
    let authority = base.trim_start_matches("http://").trim_end_matches('/');
    let stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", authority);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let response = tokio::time::timeout(
        Duration::from_secs(20),
        sender.send_request(builder.body(Full::new(Bytes::from(body))).unwrap()),
    )
    .await
    .expect("no answer within 20 s")
    .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// A config in `dir`: a fake server `s` with `echo` (read-only) and `drop` (destructive),
/// decided, with `cedar`, by Cedar policies under which only the `platform` group may call a
/// destructive tool (else by the default component, quicker to compile); `listen.oauth` as
/// given (and no named tokens unless `tokens`).
async fn write_config(dir: &Path, oauth: Value, tokens: Value, cedar: bool) -> Config {
    std::fs::write(dir.join("calls.jsonl"), "").unwrap();
    std::fs::write(
        dir.join("s.json"),
        json!({
            "pages": [r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}, {"name": "drop", "description": "Drops a table.", "inputSchema": {"type": "object"}}]}"#],
            "calls_log": dir.join("calls.jsonl"),
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("rules.json"),
        r#"{"servers": {"s": {"tools": {"echo": {"effect": "read-only"}, "drop": {"effect": "destructive"}}}}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("policy.cedar"),
        r#"@id("calls") permit(principal, action, resource);
@id("only-platform-destroys")
forbid(principal, action, resource)
when { resource.effect == "destructive" }
unless { context.principal_attributes has groups && context.principal_attributes.groups.contains("platform") };
"#,
    )
    .unwrap();
    let mut document = json!({
        "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
        "rules": {"file": "rules.json"},
        "manifest": "manifest.json", "state_dir": "state",
        "audit": {"file": "state/audit.jsonl", "sync": "none"},
        "listen": {"tokens": tokens, "oauth": oauth},
    });
    if cedar {
        document["policy"] = json!({"cedar": "policy.cedar"});
    }
    std::fs::write(dir.join("toolward.json"), document.to_string()).unwrap();
    // The introspecting client's secret, as an operator gives it: from a variable.
    let env = |name: &str| match name {
        INTROSPECTION_SECRET_VARIABLE => Ok(String::from("secret-listener")),
        other => std::env::var(other),
    };
    let config = Config::from_value_with_env(document, dir, &env).unwrap();
    let pinned = toolward::pin::pin(&config, None, None, std::collections::BTreeMap::new())
        .await
        .unwrap();
    pinned.manifest.write(&config.manifest).unwrap();
    config
}

/// toolward started from `config`, listening on `port` with its `listen` section.
async fn listen(config: Config, port: u16) -> (Toolward, Listening) {
    let toolward = Toolward::start(config).await.unwrap();
    let config = toolward.config();
    let (tokens, file) =
        tokens(&config.listen, toolward.state().unwrap(), &config.principal).unwrap();
    assert_eq!(file, None, "with `listen.oauth`, no token is generated");
    let listening = serve_http(
        toolward.call_path().clone(),
        Vec::new(),
        GatewaySettings::from_config(config),
        ListenSettings {
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            allow_non_loopback: false,
            tokens,
            allowed_origins: Vec::new(),
            limits: ListenLimits::from_config(&config.listen),
            oauth: config.listen.oauth.clone(),
        },
    )
    .await
    .unwrap();
    (toolward, listening)
}

/// The variable `listen.oauth.introspection.client_secret` names in these tests.
const INTROSPECTION_SECRET_VARIABLE: &str = "TOOLWARD_TEST_INTROSPECTION_SECRET";

/// The `listen.oauth` section for `issuer` and the listener on `port`.
fn oauth(issuer: &str, port: u16) -> Value {
    json!({
        "issuer": issuer,
        "resource": format!("http://127.0.0.1:{port}/mcp"),
        "algorithms": ["RS256"],
        "attribute_claims": ["groups", "scope"],
        "scopes_supported": ["mcp:tools"],
        "leeway_ms": 0,
    })
}

/// Opens a session with `token`; its id.
async fn open(addr: std::net::SocketAddr, token: &str) -> String {
    let response = send(
        addr,
        "POST",
        token,
        None,
        Some(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        ),
    )
    .await;
    assert_eq!(
        response.status(),
        200,
        "initialize: {}",
        text(response).await
    );
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    Events::new(response).next().await;
    let initialized = send(
        addr,
        "POST",
        token,
        Some(&session),
        Some(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    )
    .await;
    assert_eq!(initialized.status(), 202);
    session
}

/// Calls `tool` in `session`; the result.
async fn call(addr: std::net::SocketAddr, token: &str, session: &str, tool: &str) -> Value {
    let response = send(
        addr,
        "POST",
        token,
        Some(session),
        Some(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}})),
    )
    .await;
    assert_eq!(response.status(), 200);
    Events::new(response).until(&json!(7), "").await["result"].clone()
}

/// The principals of the audit's decision records, in order.
fn decided_principals(dir: &Path) -> Vec<(String, String, String)> {
    audit_records(dir)
        .iter()
        .filter(|r| r["kind"] == "decision")
        .map(|r| {
            (
                r["principal"].as_str().unwrap_or_default().to_owned(),
                r["tool"].as_str().unwrap_or_default().to_owned(),
                r["decision"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_providers_jwts_are_accepted_two_identities_are_two_principals_and_the_group_claim_reaches_the_policy()
 {
    let Some(modules) = provider_modules() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let provider = Provider::start(
        &modules,
        &dir.path().join("idp"),
        &dir.path().join("keys.json"),
        None,
    )
    .await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let config = write_config(dir.path(), oauth(&provider.issuer, port), json!({}), true).await;
    let (toolward, listening) = listen(config, port).await;
    let addr = listening.addr;

    // Alice (group `platform`) and Bob (group `dev`) sign in through the authorization code.
    let alice = provider.sign_in("alice", &resource).await;
    let bob = provider.sign_in("bob", &resource).await;
    let alice_token = alice["access_token"].as_str().unwrap();
    let bob_token = bob["access_token"].as_str().unwrap();

    let alices = open(addr, alice_token).await;
    let echoed = call(addr, alice_token, &alices, "s__echo").await;
    assert_eq!(echoed["isError"], json!(false), "{echoed}");
    let dropped = call(addr, alice_token, &alices, "s__drop").await;
    assert_eq!(
        dropped["isError"],
        json!(false),
        "alice is in `platform`: {dropped}"
    );

    let bobs = open(addr, bob_token).await;
    let echoed = call(addr, bob_token, &bobs, "s__echo").await;
    assert_eq!(echoed["isError"], json!(false), "{echoed}");
    let refused = call(addr, bob_token, &bobs, "s__drop").await;
    assert_eq!(
        refused["isError"],
        json!(true),
        "bob is not in `platform`: {refused}"
    );

    // Bob's token cannot reach Alice's session: the sessions are the principals'.
    let intruding = send(
        addr,
        "POST",
        bob_token,
        Some(&alices),
        Some(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})),
    )
    .await;
    assert_eq!(intruding.status(), 404);

    // The refreshed token is the same principal, and keeps Alice's session.
    let refreshed = alice["refreshed"]["access_token"].as_str().unwrap();
    assert_ne!(refreshed, alice_token);
    let again = call(addr, refreshed, &alices, "s__echo").await;
    assert_eq!(again["isError"], json!(false), "{again}");

    // The principal is the `sub` claim; the policy saw the `groups` claim.
    let decided = decided_principals(dir.path());
    let expect = |principal: &str, tool: &str, decision: &str| {
        (principal.to_owned(), tool.to_owned(), decision.to_owned())
    };
    assert_eq!(
        decided,
        vec![
            expect("alice", "s__echo", "allow"),
            expect("alice", "s__drop", "allow"),
            expect("bob", "s__echo", "allow"),
            expect("bob", "s__drop", "deny"),
            expect("alice", "s__echo", "allow"),
        ],
        "{:#?}",
        audit_records(dir.path())
    );
    // Four calls reached the server: Bob's `drop` did not.
    let calls = std::fs::read_to_string(dir.path().join("calls.jsonl")).unwrap();
    assert_eq!(calls.lines().count(), 4, "{calls}");
    // No token reached the audit log.
    let audit = std::fs::read_to_string(dir.path().join("state/audit.jsonl")).unwrap();
    for token in [alice_token, bob_token, refreshed] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!audit.contains(signature), "a token is in the audit log");
    }
    listening.stop().await;
    toolward.shutdown().await;
}

/// A token with `claims` under `header`, signed with `signature` (base64url), by hand.
fn forged(header: &Value, claims: &str, signature: &str) -> String {
    format!(
        "{}.{claims}.{signature}",
        encode(header.to_string().as_bytes())
    )
}

/// HMAC-SHA-256 (RFC 2104) over SHA-256 from toolward's canonical module.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let sha = |bytes: &[u8]| {
        let hex = toolward::canonical::sha256_hex(bytes);
        (0..32)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
    };
    let mut block = if key.len() > 64 {
        sha(key)
    } else {
        key.to_vec()
    };
    block.resize(64, 0);
    let inner: Vec<u8> = block
        .iter()
        .map(|b| b ^ 0x36)
        .chain(message.iter().copied())
        .collect();
    let inner = sha(&inner);
    let outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).chain(inner).collect();
    sha(&outer)
}

/// Sends `token` to the listener; the status, the `WWW-Authenticate` value and the body.
async fn presented(addr: std::net::SocketAddr, token: &str) -> (u16, String, String) {
    let response = send(
        addr,
        "POST",
        token,
        None,
        Some(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        ),
    )
    .await;
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, challenge, text(response).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_audience_issuer_algorithm_expiry_key_and_unsigned_tokens_get_401_invalid_token() {
    let Some(modules) = provider_modules() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.json");
    let provider = Provider::start(&modules, &dir.path().join("idp"), &keys, None).await;
    // The same keys, another issuer: a token the trusted key signed for someone else.
    let elsewhere = Provider::start(&modules, &dir.path().join("other-idp"), &keys, None).await;
    // The trusted issuer's name, other keys (with the same key ids): a forger's provider.
    let forger = Provider::start(
        &modules,
        &dir.path().join("forger"),
        &dir.path().join("forger-keys.json"),
        Some(&provider.issuer),
    )
    .await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let config = write_config(dir.path(), oauth(&provider.issuer, port), json!({}), false).await;
    let (toolward, listening) = listen(config, port).await;
    let addr = listening.addr;
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");

    let good = Provider::client_credentials(&provider.issuer, "service", &resource).await;
    let (status, _, body) = presented(addr, &good).await;
    assert_eq!(status, 200, "a good token is accepted: {body}");

    let forger_endpoint = forger.endpoint();
    let short = Provider::client_credentials(&provider.issuer, "short-service", &resource).await;
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "another audience",
            Provider::client_credentials(&provider.issuer, "service", "http://127.0.0.1:1/mcp")
                .await,
            "it is not for this resource",
        ),
        (
            "another issuer",
            Provider::client_credentials(&elsewhere.issuer, "service", &resource).await,
            "its issuer is not",
        ),
        (
            "a disallowed algorithm",
            Provider::client_credentials(&provider.issuer, "es-service", &resource).await,
            "its algorithm `ES256` is not one of",
        ),
        (
            "another key",
            Provider::client_credentials(&forger_endpoint, "service", &resource).await,
            "its signature does not verify with the issuer's key `rs-1`",
        ),
        (
            "alg none",
            {
                let claims = good.split('.').nth(1).unwrap();
                forged(&json!({"alg": "none", "typ": "at+jwt"}), claims, "")
            },
            "its algorithm `none` is not one of",
        ),
        (
            "HS256 signed with the issuer's public key",
            {
                let claims = good.split('.').nth(1).unwrap();
                let jwks = std::fs::read_to_string(&keys).unwrap();
                let jwks: Value = serde_json::from_str(&jwks).unwrap();
                let n = decode(jwks["keys"][0]["n"].as_str().unwrap());
                let header = json!({"alg": "HS256", "typ": "at+jwt", "kid": "rs-1"});
                let input = format!("{}.{claims}", encode(header.to_string().as_bytes()));
                forged(&header, claims, &encode(&hmac_sha256(&n, input.as_bytes())))
            },
            "its algorithm `HS256` is not one of",
        ),
        (
            "a key id the issuer does not publish",
            {
                let mut parts = good.split('.');
                let _ = parts.next();
                let claims = parts.next().unwrap();
                let signature = parts.next().unwrap();
                forged(
                    &json!({"alg": "RS256", "kid": "made-up"}),
                    claims,
                    signature,
                )
            },
            "signed with a key `made-up` the issuer does not publish",
        ),
        (
            "not a JWT",
            String::from("not-a-jwt-at-all-0123456789abcdef0123456789"),
            "the token is not a signed JWT",
        ),
    ];
    // `short-service` tokens live 2 s; the listener allows no leeway here.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let mut cases = cases;
    cases.push(("an expired token", short, "the token expired"));
    for (case, token, reason) in &cases {
        let (status, challenge, body) = presented(addr, token).await;
        assert_eq!(status, 401, "{case}: {body}");
        assert!(
            challenge.starts_with(&format!("Bearer resource_metadata=\"{metadata_url}\"")),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{case}: {challenge}"
        );
        assert!(body.contains(reason), "{case}: {body}");
        assert!(challenge.contains(reason), "{case}: {challenge}");
        for part in token.split('.').filter(|part| part.len() > 8) {
            assert!(
                !body.contains(part) && !challenge.contains(part),
                "{case}: the token is in the answer"
            );
        }
    }
    // Without a token: 401 naming the metadata, no error.
    let (status, challenge, _) = presented(addr, "").await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    listening.stop().await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_is_served_without_a_token_es256_is_accepted_when_allowed_and_a_named_token_stands_beside()
 {
    let Some(modules) = provider_modules() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let provider = Provider::start(
        &modules,
        &dir.path().join("idp"),
        &dir.path().join("keys.json"),
        None,
    )
    .await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let mut section = oauth(&provider.issuer, port);
    section["algorithms"] = json!(["ES256"]);
    section["principal_claim"] = json!("client_id");
    // A named token stands beside OAuth, and never reaches the issuer.
    let named = "ci-0123456789abcdef0123456789abcdef";
    let config = write_config(dir.path(), section, json!({ "ci": named }), false).await;
    let (toolward, listening) = listen(config, port).await;
    let base = format!("http://127.0.0.1:{port}");
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let (status, headers, body) = request(&base, "GET", path, &[], String::new()).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(headers["content-type"], "application/json");
        let metadata: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(metadata["resource"], json!(resource));
        assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
        assert_eq!(metadata["scopes_supported"], json!(["mcp:tools"]));
    }
    let (status, _, _) = request(&base, "GET", "/.well-known/other", &[], String::new()).await;
    assert_eq!(status, 404);

    // ES256 (the provider's P-256 key), with `client_id` as the principal.
    let token = Provider::client_credentials(&provider.issuer, "es-service", &resource).await;
    let session = open(listening.addr, &token).await;
    let echoed = call(listening.addr, &token, &session, "s__echo").await;
    assert_eq!(echoed["isError"], json!(false), "{echoed}");
    let session = open(listening.addr, named).await;
    let echoed = call(listening.addr, named, &session, "s__echo").await;
    assert_eq!(echoed["isError"], json!(false), "{echoed}");
    let decided: Vec<String> = decided_principals(dir.path())
        .into_iter()
        .map(|(principal, _, decision)| format!("{principal} {decision}"))
        .collect();
    assert_eq!(decided, ["es-service allow", "ci allow"]);
    let rs256 = Provider::client_credentials(&provider.issuer, "service", &resource).await;
    let (status, _, body) = presented(listening.addr, &rs256).await;
    assert_eq!(status, 401, "RS256 is not allowed here: {body}");
    listening.stop().await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_mcp_client_signs_in_with_its_own_oauth_and_closes_its_session_without_a_warning()
 {
    let Some(modules) = provider_modules() else {
        return;
    };
    let python = real_servers().join("venv/bin/python");
    if !python.is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is not installed",
            python.display()
        );
        eprintln!("skipped: {} is not installed", python.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let provider = Provider::start(
        &modules,
        &dir.path().join("idp"),
        &dir.path().join("keys.json"),
        None,
    )
    .await;
    let port = free_port();
    let config = write_config(dir.path(), oauth(&provider.issuer, port), json!({}), false).await;
    let (toolward, listening) = listen(config, port).await;
    let out = tokio::process::Command::new(&python)
        .arg(repo().join("tests/clients/listen_oauth.py"))
        .args([
            &listening.url(),
            &provider.issuer,
            "service",
            "secret-service",
            "s__echo",
            "{}",
        ])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\n{}",
        provider.log_text()
    );
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(answer["tools"], json!(["s__drop", "s__echo"]));
    assert_eq!(answer["is_error"], json!(false), "{answer}");
    assert!(
        !stderr.contains("Session termination failed"),
        "the DELETE was not answered as the client expects: {stderr}"
    );
    // The client's principal is its `sub`: the client id.
    assert_eq!(
        decided_principals(dir.path()),
        vec![(
            String::from("service"),
            String::from("s__echo"),
            String::from("allow")
        )]
    );
    listening.stop().await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_at_the_provider_and_revoked_or_foreign_ones_get_401() {
    let Some(modules) = provider_modules() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Opaque access tokens, whatever the resource: only introspection can tell what they are.
    let provider = Provider::start_with(
        &modules,
        &dir.path().join("idp"),
        &dir.path().join("keys.json"),
        None,
        &[("OPAQUE", "1")],
    )
    .await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let mut section = oauth(&provider.issuer, port);
    // The endpoint from the issuer's metadata; the client `listener` of provider.mjs.
    section["introspection"] = json!({
        "client_id": "listener",
        "client_secret": format!("${{{INTROSPECTION_SECRET_VARIABLE}}}"),
    });
    let config = write_config(dir.path(), section, json!({}), true).await;
    let (toolward, listening) = listen(config, port).await;
    let addr = listening.addr;

    let alice = provider.sign_in("alice", &resource).await;
    let alice_token = alice["access_token"].as_str().unwrap();
    assert!(!alice_token.contains('.'), "not opaque: {alice_token}");
    let alices = open(addr, alice_token).await;
    let dropped = call(addr, alice_token, &alices, "s__drop").await;
    assert_eq!(
        dropped["isError"],
        json!(false),
        "alice is in `platform`, as the introspection answer says: {dropped}"
    );
    let bob = provider.sign_in("bob", &resource).await;
    let bob_token = bob["access_token"].as_str().unwrap();
    let bobs = open(addr, bob_token).await;
    let refused = call(addr, bob_token, &bobs, "s__drop").await;
    assert_eq!(
        refused["isError"],
        json!(true),
        "bob is in `dev`: {refused}"
    );
    let decided = decided_principals(dir.path());
    for (principal, decision) in [("alice", "allow"), ("bob", "deny")] {
        assert!(
            decided
                .iter()
                .any(|(who, tool, what)| who == principal && tool == "s__drop" && what == decision),
            "{decided:?}"
        );
    }

    // A token the same issuer made for another resource.
    let elsewhere = provider.sign_in("carol", "http://127.0.0.1:1/other").await;
    let (status, challenge, _) = presented(addr, elsewhere["access_token"].as_str().unwrap()).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("not for this resource"), "{challenge}");

    // A token revoked at the provider before the listener ever saw it.
    let revoked = provider.sign_in("bob", &resource).await;
    let revoked = revoked["access_token"].as_str().unwrap();
    let (status, _, answer) = request(
        &provider.endpoint(),
        "POST",
        "/token/revocation",
        &[("content-type", "application/x-www-form-urlencoded")],
        format!("token={revoked}&client_id=toolward-tests"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (status, challenge, _) = presented(addr, revoked).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("not active"), "{challenge}");
    // And one the issuer never made.
    let (status, challenge, _) = presented(addr, "made-up-opaque-token-0123456789").await;
    assert_eq!(status, 401);
    assert!(challenge.contains("not active"), "{challenge}");

    listening.stop().await;
    toolward.shutdown().await;
}
