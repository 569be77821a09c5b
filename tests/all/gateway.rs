//! The gateway over an in-memory stream, spoken to as an MCP client would: newline-delimited
//! JSON-RPC, written out by hand so the test also pins the wire format (`initialize`,
//! `tools/list`, `tools/call`, the load messages as `notifications/message`, and approvals
//! through elicitation).

use std::sync::Arc;

use serde_json::{Value as Json, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};
use toolward::call::CallSettings;
use toolward::gateway::{self, GatewaySettings};

use crate::call::Fixture;

/// A hand-written MCP client on one end of a duplex stream.
struct Client {
    lines: tokio::io::Lines<BufReader<ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
    next_id: u64,
    /// Messages from the server other than the responses waited for.
    seen: Vec<Json>,
}

impl Client {
    fn new(stream: DuplexStream) -> Self {
        let (reader, writer) = tokio::io::split(stream);
        Self {
            lines: BufReader::new(reader).lines(),
            writer,
            next_id: 1,
            seen: Vec::new(),
        }
    }

    async fn send(&mut self, message: Json) {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    async fn next_message(&mut self) -> Json {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("the gateway answered in time")
            .unwrap()
            .expect("the gateway kept the stream open");
        serde_json::from_str(&line).unwrap()
    }

    /// Sends a request and waits for its response; answers requests from the server with
    /// `on_request` meanwhile.
    async fn request(
        &mut self,
        method: &str,
        params: Json,
        on_request: &dyn Fn(&Json) -> Json,
    ) -> Json {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        loop {
            let message = self.next_message().await;
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
            if message.get("method").is_some() && message.get("id").is_some() {
                let result = on_request(&message);
                let answer = json!({ "jsonrpc": "2.0", "id": message["id"], "result": result });
                self.seen.push(message);
                self.send(answer).await;
            } else {
                self.seen.push(message);
            }
        }
    }

    async fn initialize(&mut self, capabilities: Json) -> Json {
        let response = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities,
                    "clientInfo": { "name": "test-client", "version": "1" },
                }),
                &|_| json!({}),
            )
            .await;
        self.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        response
    }
}

fn no_requests(request: &Json) -> Json {
    panic!("unexpected request from the gateway: {request}")
}

/// Starts the gateway over a duplex stream; returns the client's end.
fn start(fixture: &Fixture, settings: CallSettings, messages: Vec<String>) -> Client {
    let call_path = Arc::new(fixture.call_path(settings));
    let (server_end, client_end) = tokio::io::duplex(1 << 20);
    let settings = GatewaySettings {
        principal: String::from("tester"),
        state_dir: fixture.state.path().to_path_buf(),
    };
    tokio::spawn(gateway::serve(call_path, messages, settings, server_end));
    Client::new(client_end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_lists_only_the_registered_tools_and_calls_one() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let mut client = start(
        &fixture,
        CallSettings::default(),
        vec![String::from(
            "tool `fs__move_file` is not registered: no rule classifies it",
        )],
    );
    let initialized = client.initialize(json!({})).await;
    let capabilities = &initialized["result"]["capabilities"];
    assert!(capabilities.get("tools").is_some(), "{initialized}");
    assert!(capabilities.get("resources").is_none(), "{initialized}");
    assert!(capabilities.get("prompts").is_none(), "{initialized}");

    let listed = client.request("tools/list", json!({}), &no_requests).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["fs__edit_file", "fs__read_text_file", "fs__write_file"]
    );
    let read = tools
        .iter()
        .find(|t| t["name"] == "fs__read_text_file")
        .unwrap();
    assert!(read["inputSchema"]["properties"].get("path").is_some());
    assert!(
        read["inputSchema"]["properties"].get("tail").is_none(),
        "a denied parameter is hidden: {read}"
    );
    assert_eq!(read["annotations"]["readOnlyHint"], true);

    let file = fixture.root().join("hello.txt");
    let called = client
        .request(
            "tools/call",
            json!({ "name": "fs__read_text_file", "arguments": { "path": file } }),
            &no_requests,
        )
        .await;
    let result = &called["result"];
    assert_ne!(result["isError"], true, "{called}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hello from the sandbox"),
        "{called}"
    );

    // The load message arrived as a warning log notification.
    let log = client
        .seen
        .iter()
        .find(|m| m["method"] == "notifications/message")
        .expect("the load message was sent");
    assert_eq!(log["params"]["level"], "warning");
    assert!(
        log["params"]["data"]
            .as_str()
            .unwrap()
            .contains("fs__move_file")
    );

    let unknown = client
        .request(
            "tools/call",
            json!({ "name": "fs__move_file", "arguments": {} }),
            &no_requests,
        )
        .await;
    assert_eq!(unknown["result"]["isError"], true, "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_asks_through_elicitation_when_the_client_declares_it() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let mut client = start(&fixture, CallSettings::default(), Vec::new());
    client.initialize(json!({ "elicitation": {} })).await;

    let approve = |request: &Json| {
        assert_eq!(request["method"], "elicitation/create");
        let message = request["params"]["message"].as_str().unwrap();
        assert!(
            message.contains("`fs__write_file` on server `fs`"),
            "{message}"
        );
        assert!(message.contains("local-change"), "{message}");
        // A 3 KB `content` sorts before `path`; `path` is shown all the same.
        assert!(message.contains("\n    path: \""), "{message}");
        assert!(
            message.contains("\n    content: \"\\u{202E}yyy")
                && message.contains("(3003 characters, the first 384 and the last 128 shown)"),
            "{message}"
        );
        assert!(!message.contains('\u{202E}'), "{message}");
        json!({ "action": "accept", "content": { "approve": true } })
    };
    let approved_file = fixture.root().join("elicited.txt");
    let content = format!("\u{202E}{}", "y".repeat(3000));
    let approved = client
        .request(
            "tools/call",
            json!({ "name": "fs__write_file",
                    "arguments": { "path": approved_file, "content": content } }),
            &approve,
        )
        .await;
    assert_ne!(approved["result"]["isError"], true, "{approved}");
    assert_eq!(std::fs::read_to_string(&approved_file).unwrap(), content);
    // The answer is on the record as the principal's, through elicitation.
    let answered: Vec<Json> = crate::support::audit_records(&fixture.audit_path)
        .into_iter()
        .filter(|record| record["kind"] == "approval-answered")
        .collect();
    assert_eq!(
        answered[0]["answered_by"],
        json!({ "channel": "elicitation", "answerer": "tester" })
    );

    let decline = |_: &Json| json!({ "action": "decline" });
    let declined_file = fixture.root().join("declined.txt");
    let declined = client
        .request(
            "tools/call",
            json!({ "name": "fs__write_file",
                    "arguments": { "path": declined_file, "content": "no" } }),
            &decline,
        )
        .await;
    assert_eq!(declined["result"]["isError"], true, "{declined}");
    assert!(!declined_file.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_sends_progress_to_a_held_call_with_a_progress_token() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let settings = CallSettings {
        held_progress_interval: std::time::Duration::from_millis(50),
        approval_timeout: std::time::Duration::from_millis(400),
        ..CallSettings::default()
    };
    // No elicitation: the queue is asked, and nobody answers.
    let mut client = start(&fixture, settings, Vec::new());
    client.initialize(json!({})).await;
    let file = fixture.root().join("unanswered.txt");
    let called = client
        .request(
            "tools/call",
            json!({ "name": "fs__write_file",
                    "arguments": { "path": file, "content": "x" },
                    "_meta": { "progressToken": "tok-1" } }),
            &no_requests,
        )
        .await;
    assert_eq!(called["result"]["isError"], true, "{called}");
    assert!(!file.exists());
    let progress: Vec<&Json> = client
        .seen
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{:?}", client.seen);
    assert!(
        progress
            .iter()
            .all(|m| m["params"]["progressToken"] == "tok-1")
    );
}

/// Waits for a `notifications/message` whose text contains `text`.
async fn log_message_containing(client: &mut Client, text: &str) -> String {
    let found = |m: &Json| {
        m["method"] == "notifications/message"
            && m["params"]["data"]
                .as_str()
                .is_some_and(|d| d.contains(text))
    };
    loop {
        if let Some(m) = client.seen.iter().find(|m| found(m)) {
            return m["params"]["data"].as_str().unwrap().to_owned();
        }
        let message = client.next_message().await;
        client.seen.push(message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_hears_when_a_server_changes_its_tool_list_fails_and_comes_back() {
    const FAKE_SERVER: &str = env!("CARGO_BIN_EXE_toolward-fake-server");
    let dir = tempfile::tempdir().unwrap();
    let tool = |name: &str| {
        format!(
            r#"{{"name": "{name}", "description": "{name}", "inputSchema": {{"type": "object"}}}}"#
        )
    };
    let scenario = json!({
        "pages": [format!(r#"{{"tools": [{}, {}]}}"#, tool("change"), tool("die"))],
        "actions": {
            "change": {"list_changed": 3},
            "die": {"exit": true}
        }
    });
    std::fs::write(dir.path().join("s.json"), scenario.to_string()).unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        r#"{"servers": {"s": {"tools": {"change": {"effect": "read-only"}, "die": {"effect": "read-only"}}}}}"#,
    )
    .unwrap();
    let config = toolward::config::Config::from_value(
        json!({
            "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
            "rules": {"file": "rules.json"}, "manifest": "manifest.json", "state_dir": "state",
            "audit": {"file": "state/audit.jsonl", "sync": "none"},
            "limits": {"restart_backoff_ms": 20}
        }),
        dir.path(),
    )
    .unwrap();
    let pinned = toolward::pin::pin(&config, None, None, Default::default())
        .await
        .unwrap();
    pinned.manifest.write(&config.manifest).unwrap();
    let toolward = toolward::Toolward::start(config).await.unwrap();
    let (server_end, client_end) = tokio::io::duplex(1 << 20);
    let settings = GatewaySettings {
        principal: String::from("tester"),
        state_dir: dir.path().join("state"),
    };
    tokio::spawn(gateway::serve(
        toolward.call_path().clone(),
        Vec::new(),
        settings,
        server_end,
    ));
    let mut client = Client::new(client_end);
    client.initialize(json!({})).await;

    let changed = client
        .request(
            "tools/call",
            json!({"name": "s__change", "arguments": {}}),
            &no_requests,
        )
        .await;
    assert_eq!(changed["result"]["isError"], json!(false), "{changed}");
    let said = log_message_containing(&mut client, "tool list changed").await;
    assert!(
        said.starts_with(
            "server `s` says its tool list changed; toolward keeps the tools it loaded"
        ),
        "{said}"
    );
    // The tool set stays as loaded.
    let listed = client.request("tools/list", json!({}), &no_requests).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 2);

    let died = client
        .request(
            "tools/call",
            json!({"name": "s__die", "arguments": {}}),
            &no_requests,
        )
        .await;
    assert_eq!(died["result"]["isError"], json!(true), "{died}");
    let failed = log_message_containing(&mut client, "restart attempt 1").await;
    assert!(
        failed.starts_with("server `s` failed: its process exited"),
        "{failed}"
    );
    let back = log_message_containing(&mut client, "was restarted").await;
    assert_eq!(
        back,
        "server `s` was restarted (attempt 1); 2 of its 2 tools are back"
    );
    let again = client
        .request(
            "tools/call",
            json!({"name": "s__change", "arguments": {"n": 2}}),
            &no_requests,
        )
        .await;
    assert_eq!(again["result"]["isError"], json!(false), "{again}");
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_tools_call_gets_invalid_params_naming_the_tool_and_the_fault() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let mut client = start(&fixture, CallSettings::default(), Vec::new());
    client.initialize(json!({})).await;
    let array = client
        .request(
            "tools/call",
            json!({"name": "fs__read_text_file", "arguments": [1, 2]}),
            &no_requests,
        )
        .await;
    assert_eq!(array["error"]["code"], -32602, "{array}");
    assert_eq!(
        array["error"]["message"],
        "the call of tool `fs__read_text_file` is malformed: `params.arguments` must be an object, found an array"
    );
    let nameless = client
        .request("tools/call", json!({"name": 7}), &no_requests)
        .await;
    assert_eq!(nameless["error"]["code"], -32602, "{nameless}");
    assert!(
        nameless["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("`params.name` must be a string, found a number"),
        "{nameless}"
    );
    // The connection goes on.
    let listed = client.request("tools/list", json!({}), &no_requests).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_size_limit_is_answered_naming_the_tool_and_the_connection_goes_on() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let mut client = start(&fixture, CallSettings::default(), Vec::new());
    client.initialize(json!({})).await;
    // 17 MiB of arguments, and the id last, after them.
    let padding = "x".repeat(17 << 20);
    let line = format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"fs__write_file","arguments":{{"path":"big.txt","content":"{padding}"}}}},"id":"big-1"}}"#
    );
    let bytes = line.len() + 1;
    client.writer.write_all(line.as_bytes()).await.unwrap();
    client.writer.write_all(b"\n").await.unwrap();
    client.writer.flush().await.unwrap();
    let answer = loop {
        let message = client.next_message().await;
        if message["id"] == "big-1" {
            break message;
        }
    };
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        format!(
            "the call of tool `fs__write_file` (server `fs`) was not made: its message is {bytes} bytes, over toolward's limit of 16777216 bytes a message"
        )
    );
    assert!(
        !fixture.sandbox.path().join("big.txt").exists(),
        "the server was never asked"
    );
    let listed = client.request("tools/list", json!({}), &no_requests).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
}
