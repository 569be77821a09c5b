//! Clients of the 2026-07-28 revision over `serve --listen`, by hand-written HTTP requests:
//! no `initialize` and no session, so two gateways of one config answer a client's requests
//! in turn; `Mcp-Method`/`Mcp-Name` that contradict the body get -32020 and reach nothing; a
//! held call is asked through `input_required`, and its MAC'd `requestState` approves one
//! retry of the same principal, call and arguments, once, before it expires.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use toolward::Toolward;
use toolward::gateway::GatewaySettings;
use toolward::listen::{ListenLimits, ListenSettings, Listening, serve_http, tokens};

use super::{ALICE, BOB, Events, audit_records, write_config};

const VERSION: &str = "2026-07-28";

/// The `_meta` of a 2026-07-28 request, declaring elicitation when `elicitation`.
fn meta(elicitation: bool) -> Value {
    let capabilities = if elicitation {
        json!({"elicitation": {"form": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "hand", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// A request of `method` with `params` (and the `_meta` of [`meta`]).
pub(crate) fn request(id: u64, method: &str, mut params: Value, elicitation: bool) -> Value {
    params["_meta"] = meta(elicitation);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// POSTs `body` for `token` with the 2026-07-28 version header and `headers` (the standard
/// `Mcp-Method`/`Mcp-Name` are the caller's); the status, the response's session header and
/// the JSON-RPC answer to the request.
async fn post(
    addr: SocketAddr,
    token: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, Option<String>, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut builder = hyper::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", format!("127.0.0.1:{}", addr.port()))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", VERSION);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let response = tokio::time::timeout(
        Duration::from_secs(30),
        sender.send_request(
            builder
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap(),
        ),
    )
    .await
    .expect("no answer within 30 s")
    .unwrap();
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let is_stream = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
    let answer = if is_stream {
        Events::new(response).until(&body["id"], "").await
    } else {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}))
    };
    (status, session, answer)
}

/// POSTs `body` with the `Mcp-Method` and `Mcp-Name` a conforming client sends.
pub(crate) async fn call(addr: SocketAddr, token: &str, body: &Value) -> Value {
    let method = body["method"].as_str().unwrap().to_owned();
    let name = body["params"]["name"].as_str().map(str::to_owned);
    let mut headers = vec![("mcp-method", method.as_str())];
    if let Some(name) = &name {
        headers.push(("mcp-name", name.as_str()));
    }
    let (status, session, answer) = post(addr, token, &headers, body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(session, None, "a 2026-07-28 request gets no session");
    answer
}

/// Listens for the toolward of `dir`'s config (written by [`write_config`]) on a free port.
async fn listen(toolward: &Toolward) -> Listening {
    let config = toolward.config();
    let (tokens, _) = tokens(&config.listen, toolward.state().unwrap(), &config.principal).unwrap();
    serve_http(
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
    .unwrap()
}

/// Two gateways (two `Toolward`s, each with its own server process) of one config, with
/// `limits` laid over.
async fn two_gateways(
    dir: &std::path::Path,
    limits: Value,
) -> ((Toolward, Listening), (Toolward, Listening)) {
    let config = write_config(dir, json!({}), limits).await;
    let a = Toolward::start(config.clone()).await.unwrap();
    let b = Toolward::start(config).await.unwrap();
    let la = listen(&a).await;
    let lb = listen(&b).await;
    ((a, la), (b, lb))
}

async fn stop(gateways: ((Toolward, Listening), (Toolward, Listening))) {
    let ((a, la), (b, lb)) = gateways;
    la.stop().await;
    lb.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}

/// The calls the fake server received.
fn server_calls(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("calls.jsonl"))
        .unwrap()
        .lines()
        .count()
}

fn call_write(id: u64, elicitation: bool) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": "s__write", "arguments": {"path": "a.txt"}}),
        elicitation,
    )
}

/// A retry of [`call_write`] carrying `state` and the answer `approve`.
fn retry_write(id: u64, state: &str, approve: bool) -> Value {
    let mut body = call_write(id, true);
    body["params"]["requestState"] = json!(state);
    body["params"]["inputResponses"] =
        json!({"approval": {"action": "accept", "content": {"approve": approve}}});
    body
}

/// The first round of a held call for `token`: the `requestState` it was given.
async fn held(addr: SocketAddr, token: &str) -> String {
    let answer = call(addr, token, &call_write(1, true)).await;
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let asked = &result["inputRequests"]["approval"];
    assert_eq!(asked["method"], "elicitation/create", "{answer}");
    assert_eq!(asked["params"]["mode"], "form", "{answer}");
    assert!(
        asked["params"]["message"]
            .as_str()
            .unwrap()
            .contains("approve tool `s__write` on server `s`"),
        "{answer}"
    );
    result["requestState"].as_str().unwrap().to_owned()
}

/// The text of a tool result.
fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_discovers_lists_and_calls_through_either_of_two_gateways_without_a_session()
 {
    let dir = tempfile::tempdir().unwrap();
    let gateways = two_gateways(dir.path(), json!({})).await;
    let (a, b) = (gateways.0.1.addr, gateways.1.1.addr);
    gateways
        .0
        .0
        .call_path()
        .registry()
        .tell_clients(String::from("server `s` changed its tool list"));

    let discovered = call(a, ALICE, &request(1, "server/discover", json!({}), false)).await;
    let result = &discovered["result"];
    let versions: Vec<&str> = result["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        versions,
        [
            "2024-11-05",
            "2025-03-26",
            "2025-06-18",
            "2025-11-25",
            "2026-07-28"
        ]
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "toolward"
    );
    let status = &result["_meta"]["dev.toolward/status"];
    assert_eq!(
        status["servers"],
        json!([{"name": "s", "state": "up"}]),
        "{status}"
    );
    assert_eq!(
        status["recent"][0]["message"], "server `s` changed its tool list",
        "what a 2026-07-28 client reads instead of the log message: {status}"
    );

    let listed = call(b, BOB, &request(2, "tools/list", json!({}), false)).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s__echo", "s__write"], "{listed}");

    for (turn, addr) in [a, b, a, b].into_iter().enumerate() {
        let answer = call(
            addr,
            ALICE,
            &request(
                10 + turn as u64,
                "tools/call",
                json!({"name": "s__echo", "arguments": {"turn": turn}}),
                false,
            ),
        )
        .await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        assert_eq!(text_of(&answer), format!(r#"{{"turn":{turn}}}"#));
    }
    stop(gateways).await;
    let forwarded = audit_records(dir.path())
        .into_iter()
        .filter(|r| r["kind"] == "forwarded" && r["principal"] == "alice")
        .count();
    assert_eq!(forwarded, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_method_or_mcp_name_headers_that_contradict_the_body_are_refused_with_32020_and_a_request_without_its_meta_with_32602()
 {
    let dir = tempfile::tempdir().unwrap();
    let gateways = two_gateways(dir.path(), json!({})).await;
    let a = gateways.0.1.addr;
    let echo = request(
        1,
        "tools/call",
        json!({"name": "s__echo", "arguments": {}}),
        false,
    );
    let cases: [&[(&str, &str)]; 4] = [
        &[("mcp-method", "tools/list"), ("mcp-name", "s__echo")],
        &[("mcp-method", "tools/call"), ("mcp-name", "s__write")],
        &[("mcp-name", "s__echo")],
        &[("mcp-method", "tools/call")],
    ];
    for headers in cases {
        let (status, _, answer) = post(a, ALICE, headers, &echo).await;
        assert_eq!(status, 400, "{headers:?}: {answer}");
        assert_eq!(answer["error"]["code"], -32020, "{headers:?}: {answer}");
        assert_eq!(answer["id"], 1, "{headers:?}: {answer}");
    }
    // The revision wants the client's context in every request's `_meta`.
    let mut without_capabilities = echo.clone();
    without_capabilities["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let (_, _, answer) = post(
        a,
        ALICE,
        &[("mcp-method", "tools/call"), ("mcp-name", "s__echo")],
        &without_capabilities,
    )
    .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clientCapabilities"),
        "{answer}"
    );
    // Matching headers pass.
    let answer = call(a, ALICE, &echo).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    stop(gateways).await;
    assert_eq!(
        server_calls(dir.path()),
        1,
        "only the matching call reached the server"
    );
    let received = audit_records(dir.path())
        .into_iter()
        .filter(|r| r["kind"] == "call-received")
        .count();
    assert_eq!(received, 1, "a refused request never reached the call path");
}

/// Two gateways on one PostgreSQL database, each with a state folder of its own and nothing
/// copied between them (a fleet on two machines): a call held on one is approved by its
/// retry on the other, since both MAC under the database's key, and the retry replayed on
/// the first is refused, since both redeem in the database's ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_state_held_on_one_gateway_of_a_database_is_approved_on_another_without_a_key_file_and_its_replay_refused()
 {
    let Some(url) = crate::store_contract::test_database_url(
        "a_request_state_held_on_one_gateway_of_a_database_is_approved_on_another_without_a_key_file_and_its_replay_refused",
    ) else {
        return;
    };
    crate::store_contract::migrate(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = write_config(dir.path(), json!({}), json!({})).await;
    config.store = toolward::config::StoreConfig::Postgres {
        url,
        oauth_key: None,
    };
    let mut other = config.clone();
    other.state_dir = dir.path().join("state-b");
    let a = Toolward::start(config.clone()).await.unwrap();
    let la = listen(&a).await;
    let state = held(la.addr, ALICE).await;
    let b = Toolward::start(other.clone()).await.unwrap();
    let lb = listen(&b).await;

    let approved = call(lb.addr, ALICE, &retry_write(2, &state, true)).await;
    assert_eq!(approved["result"]["isError"], false, "{approved}");
    let replayed = call(la.addr, ALICE, &retry_write(3, &state, true)).await;
    assert_eq!(replayed["result"]["isError"], true, "{replayed}");
    assert!(
        text_of(&replayed).contains("was used already"),
        "{replayed}"
    );
    assert_eq!(server_calls(dir.path()), 1, "a replay forwards nothing");
    for state_dir in [&config.state_dir, &other.state_dir] {
        assert!(
            !state_dir.join("request-state-key").exists(),
            "the database's key is used, not a file in {}",
            state_dir.display()
        );
    }
    stop(((a, la), (b, lb))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_asked_through_input_required_and_its_request_state_approves_one_retry_on_any_gateway()
 {
    let dir = tempfile::tempdir().unwrap();
    let gateways = two_gateways(dir.path(), json!({})).await;
    let (a, b) = (gateways.0.1.addr, gateways.1.1.addr);
    let state = held(a, ALICE).await;
    assert_eq!(
        server_calls(dir.path()),
        0,
        "nothing forwarded before the answer"
    );

    // The retry goes to the other gateway.
    let approved = call(b, ALICE, &retry_write(2, &state, true)).await;
    assert_eq!(approved["result"]["isError"], false, "{approved}");
    assert_eq!(server_calls(dir.path()), 1);

    // The same state again, on either gateway: refused, not forwarded.
    for addr in [a, b] {
        let replayed = call(addr, ALICE, &retry_write(3, &state, true)).await;
        assert_eq!(replayed["result"]["isError"], true, "{replayed}");
        assert!(
            text_of(&replayed).contains("was used already"),
            "{replayed}"
        );
    }
    assert_eq!(server_calls(dir.path()), 1, "a replay forwards nothing");
    stop(gateways).await;

    let records = audit_records(dir.path());
    let answered: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "approval-answered")
        .collect();
    assert_eq!(
        answered.len(),
        4,
        "asked, approved, two replays: {answered:?}"
    );
    assert!(
        answered[0]["reason"]
            .as_str()
            .unwrap()
            .contains("through `input_required`"),
        "{}",
        answered[0]
    );
    assert_eq!(answered[1]["decision"], "allow", "{}", answered[1]);
    assert_eq!(
        answered[1]["answered_by"],
        json!({"channel": "elicitation", "answerer": "alice"})
    );
    for replay in &answered[2..] {
        assert_eq!(replay["decision"], "deny", "{replay}");
        assert!(
            replay["reason"].as_str().unwrap().contains("used already"),
            "{replay}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principals_tampered_or_declined_request_state_is_refused_audited_and_the_owners_still_counts()
 {
    let dir = tempfile::tempdir().unwrap();
    let gateways = two_gateways(dir.path(), json!({})).await;
    let (a, b) = (gateways.0.1.addr, gateways.1.1.addr);
    let state = held(a, ALICE).await;

    let stolen = call(b, BOB, &retry_write(2, &state, true)).await;
    assert_eq!(stolen["result"]["isError"], true, "{stolen}");
    assert!(
        text_of(&stolen).contains("issued to another principal, not to `bob`"),
        "{stolen}"
    );

    let mut tampered = state.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == '0' { '1' } else { '0' });
    let forged = call(a, ALICE, &retry_write(3, &tampered, true)).await;
    assert_eq!(forged["result"]["isError"], true, "{forged}");
    assert!(
        text_of(&forged).contains("its MAC does not verify"),
        "{forged}"
    );

    let mut other_arguments = retry_write(4, &state, true);
    other_arguments["params"]["arguments"] = json!({"path": "b.txt"});
    let moved = call(a, ALICE, &other_arguments).await;
    assert!(
        text_of(&moved).contains("issued for another arguments"),
        "{moved}"
    );
    assert_eq!(server_calls(dir.path()), 0);

    // None of those used it up: the owner's answer still counts, once.
    let approved = call(b, ALICE, &retry_write(5, &state, true)).await;
    assert_eq!(approved["result"]["isError"], false, "{approved}");
    assert_eq!(server_calls(dir.path()), 1);

    // A declined answer uses its state up too.
    let state = held(a, ALICE).await;
    let declined = call(a, ALICE, &retry_write(6, &state, false)).await;
    assert!(
        text_of(&declined).contains("did not approve it"),
        "{declined}"
    );
    let again = call(b, ALICE, &retry_write(7, &state, true)).await;
    assert!(text_of(&again).contains("was used already"), "{again}");
    assert_eq!(server_calls(dir.path()), 1);
    stop(gateways).await;

    let refusals: Vec<String> = audit_records(dir.path())
        .into_iter()
        .filter(|r| r["kind"] == "refusal")
        .map(|r| r["reason"].as_str().unwrap().to_owned())
        .collect();
    for expected in [
        "issued to another principal",
        "its MAC does not verify",
        "issued for another arguments",
        "did not approve it",
        "was used already",
    ] {
        assert!(
            refusals.iter().any(|r| r.contains(expected)),
            "no refusal record says `{expected}`: {refusals:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_request_state_is_refused_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let gateways = two_gateways(dir.path(), json!({"approval_timeout_ms": 1000})).await;
    let (a, b) = (gateways.0.1.addr, gateways.1.1.addr);
    let state = held(a, ALICE).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late = call(b, ALICE, &retry_write(2, &state, true)).await;
    assert_eq!(late["result"]["isError"], true, "{late}");
    assert!(text_of(&late).contains("expired"), "{late}");
    assert_eq!(server_calls(dir.path()), 0);
    stop(gateways).await;
    assert!(
        audit_records(dir.path())
            .iter()
            .any(|r| r["kind"] == "refusal" && r["reason"].as_str().unwrap().contains("expired")),
        "the refusal is audited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_without_elicitation_waits_in_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let gateways = two_gateways(dir.path(), json!({})).await;
    let a = gateways.0.1.addr;
    let state_dir = gateways.0.0.config().state_dir.clone();
    let answerer = tokio::spawn(async move {
        loop {
            let pending = toolward::approval::list_queue(&state_dir).unwrap();
            if let Some(entry) = pending.first() {
                let call_id = entry.request.call_id.clone();
                toolward::approval::answer(
                    &state_dir,
                    &call_id,
                    true,
                    None,
                    &toolward::Approvers::default(),
                )
                .unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let answer = call(a, ALICE, &call_write(1, false)).await;
    answerer.await.unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(server_calls(dir.path()), 1);
    stop(gateways).await;
    let answered = audit_records(dir.path())
        .into_iter()
        .find(|r| r["kind"] == "approval-answered")
        .unwrap();
    assert_eq!(answered["answered_by"]["channel"], "queue", "{answered}");
}
