//! Results are untrusted: each hostile answer to `tools/call` gives the call a tool error
//! naming the server (or a capped result), and the other tools and server go on.

use std::process::Command;

use super::*;
use crate::support::{run_measuring_peak_memory, toolward_binary};

/// Starts toolward in front of `good` and `bad`, whose `tools` misbehave as `actions` says
/// (`extra` adds scenario members).
async fn bad_server(test: &str, tools: &[&str], actions: Value, extra: Value) -> (Bench, Toolward) {
    let listed: Vec<String> = tools.iter().map(|t| tool(t)).collect();
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    let mut scenario = json!({"pages": [page(&listed)], "actions": actions});
    if let Value::Object(extra) = extra {
        scenario.as_object_mut().unwrap().extend(extra);
    }
    let bench = Bench::new(test)
        .server("bad", scenario, tools)
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    (bench, toolward)
}

#[tokio::test]
async fn a_server_that_exits_in_the_middle_of_a_call_gives_a_tool_error_naming_it() {
    let (bench, toolward) =
        bad_server("exit", &["die"], json!({"die": {"exit": true}}), json!({})).await;
    assert_call_fails(
        &toolward,
        "bad__die",
        &["the call of tool `bad__die` on server `bad` failed: server `bad` failed: its process exited (exit status: 3)"],
    )
    .await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_reply_that_never_comes_ends_at_the_call_timeout() {
    let (_bench, toolward) = bad_server(
        "hang",
        &["hang", "t"],
        json!({"hang": {"hang": true}}),
        json!({}),
    )
    .await;
    let began = std::time::Instant::now();
    assert_call_fails(
        &toolward,
        "bad__hang",
        &["the call of tool `bad__hang` on server `bad` failed: server `bad` did not answer `tools/call` within 5000 ms"],
    )
    .await;
    assert!(began.elapsed() < std::time::Duration::from_secs(10));
    // The server was told to cancel, and answers the next call.
    assert_echoes(&toolward, "bad__t").await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn five_mebibytes_of_content_are_truncated_at_the_result_cap_with_a_marker() {
    let (_bench, toolward) = bad_server(
        "five-mib",
        &["big"],
        json!({"big": {"text_bytes": 5 << 20}}),
        json!({}),
    )
    .await;
    let result = call(&toolward, "bad__big").await;
    assert!(!result.is_error());
    let text = result.text();
    // The block's envelope, `{"type":"text","text":""},`, counts too: 26 bytes.
    let kept = (1 << 20) - 26;
    let (head, marker) = text.split_once('\n').unwrap();
    assert_eq!(
        marker,
        format!("[toolward: truncated {} bytes]", (5 << 20) - kept)
    );
    assert_eq!(head.len(), kept);
    assert!(head.bytes().all(|b| b == b'y'));
    toolward.shutdown().await;
}

#[tokio::test]
async fn is_error_with_huge_text_is_a_capped_tool_error() {
    let (_bench, toolward) = bad_server(
        "is-error",
        &["fail"],
        json!({"fail": {"text_bytes": 3 << 20, "is_error": true}}),
        json!({}),
    )
    .await;
    let result = assert_call_fails(
        &toolward,
        "bad__fail",
        &[
            "tool `bad__fail` on server `bad` reported an error: yyy",
            "[toolward: truncated 2097152 bytes]",
        ],
    )
    .await;
    assert!(
        result.text().len() < (1 << 20) + 200,
        "{} bytes",
        result.text().len()
    );
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_line_past_the_frame_limit_fails_the_server_and_the_gateway_goes_on() {
    let (bench, toolward) = bad_server(
        "frame",
        &["flood"],
        json!({"flood": {"line_bytes": 17 << 20}}),
        json!({}),
    )
    .await;
    assert_call_fails(
        &toolward,
        "bad__flood",
        &["server `bad` failed: it sent a line longer than the frame limit of 16842752 bytes"],
    )
    .await;
    the_other_server_still_works(&toolward).await;
    bench.assert_no_processes_left_of("bad");
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_line_that_is_not_json_fails_the_server_and_the_gateway_goes_on() {
    let (_bench, toolward) = bad_server(
        "garbage",
        &["junk"],
        json!({"junk": {"garbage": true}}),
        json!({}),
    )
    .await;
    assert_call_fails(
        &toolward,
        "bad__junk",
        &["server `bad` failed: it sent output that is not a JSON-RPC message: expected ident at line 1 column 2 (the line's start is in toolward's log)"],
    )
    .await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

/// Well-formed JSON that toolward's decoder refuses (a lone surrogate escape, arrays nested
/// past its recursion limit) costs that one answer: its call fails at once, naming the tool,
/// the server and why, and the server's later calls go on over the same connection.
#[tokio::test]
async fn an_answer_toolward_cannot_decode_fails_only_its_call_and_the_server_goes_on() {
    let (_bench, toolward) = bad_server(
        "undecodable",
        &["lone", "deep", "t"],
        json!({"lone": {"lone_surrogate": true}, "deep": {"nesting": 200}}),
        json!({}),
    )
    .await;
    for (tool, why) in [
        ("lone", r"a lone surrogate escape `\ud800` at column "),
        (
            "deep",
            "arrays and objects nested deeper than 127 levels (level 128, at column ",
        ),
    ] {
        let began = std::time::Instant::now();
        let failed = assert_call_fails(
            &toolward,
            &format!("bad__{tool}"),
            &[
                &format!("the call of tool `bad__{tool}` on server `bad` failed: server `bad` answered `tools/call` with JSON toolward cannot read: {why}"),
            ],
        )
        .await;
        // Matched by its id, not left to the call timeout (5000 ms).
        assert!(
            began.elapsed() < std::time::Duration::from_secs(4),
            "{tool}: {:?}",
            began.elapsed()
        );
        assert!(!failed.text().contains("[[["), "{}", failed.text());
        assert_echoes(&toolward, "bad__t").await;
    }
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_reply_with_the_wrong_id_does_not_answer_the_call() {
    let (_bench, toolward) = bad_server(
        "wrong-id",
        &["liar"],
        json!({"liar": {"wrong_id": true}}),
        json!({}),
    )
    .await;
    assert_call_fails(
        &toolward,
        "bad__liar",
        &["server `bad` did not answer `tools/call` within 5000 ms"],
    )
    .await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn bytes_that_are_not_utf8_fail_the_server_and_the_gateway_goes_on() {
    let (_bench, toolward) = bad_server(
        "non-utf8",
        &["latin"],
        json!({"latin": {"non_utf8": true}}),
        json!({}),
    )
    .await;
    assert_call_fails(
        &toolward,
        "bad__latin",
        &["server `bad` failed: it sent output that is not a JSON-RPC message: invalid unicode code point"],
    )
    .await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_million_content_blocks_pass_the_frame_limit_and_fail_the_server() {
    // A million blocks of one byte is 26 MB of JSON: past the 16 MiB frame limit.
    let (_bench, toolward) = bad_server(
        "million-blocks",
        &["blocks"],
        json!({"blocks": {"blocks": 1_000_000}}),
        json!({}),
    )
    .await;
    assert_call_fails(
        &toolward,
        "bad__blocks",
        &["server `bad` failed: it sent a line longer than the frame limit of 16842752 bytes"],
    )
    .await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn many_small_content_blocks_are_capped_at_the_result_cap_with_a_marker() {
    // 400,000 blocks of one byte: 10 MB of JSON under the frame limit, 400 KB of text.
    let (_bench, toolward) = bad_server(
        "many-blocks",
        &["blocks"],
        json!({"blocks": {"blocks": 400_000}}),
        json!({}),
    )
    .await;
    let result = call(&toolward, "bad__blocks").await;
    assert!(!result.is_error(), "{}", result.text());
    let bytes = serde_json::to_vec(&result.result).unwrap().len();
    assert!(
        bytes <= (1 << 20) + 200,
        "{bytes} bytes passed to the client"
    );
    let content = result.result["content"].as_array().unwrap();
    let marker = content.last().unwrap()["text"].as_str().unwrap();
    assert!(marker.starts_with("[toolward: truncated "), "{marker}");
    toolward.shutdown().await;
}

#[tokio::test]
async fn structured_content_that_breaks_the_output_schema_is_a_tool_error() {
    let typed = r#"{"name": "count", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}}"#;
    let scenario = json!({
        "pages": [page(&[typed, &tool("t")])],
        "results": {"count": r#"{"content": [{"type": "text", "text": "many"}], "structuredContent": {"count": "many"}}"#},
    });
    let bench = Bench::new("output-schema")
        .server("bad", scenario, &["count", "t"])
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    let result = assert_call_fails(
        &toolward,
        "bad__count",
        &["tool `bad__count` on server `bad` returned structured content that does not match its output schema: at `/count`: "],
    )
    .await;
    // The problem is named by place, never by the server's value.
    assert!(!result.text().contains("many"), "{}", result.text());
    assert_echoes(&toolward, "bad__t").await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_flood_of_notifications_during_a_call_leaves_the_call_answered_and_memory_bounded() {
    let Some(bin) = toolward_binary() else { return };
    // 200,000 log notifications of 1 KiB: 200 MB through the pipe before the answer.
    let bench = Bench::new("notification-flood")
        .server(
            "bad",
            json!({
                "pages": [page(&[&tool("chatty")])],
                "actions": {"chatty": {"notify": 200_000, "notify_bytes": 1024}},
            }),
            &["chatty"],
        )
        .with("limits", json!({"call_timeout_ms": 120_000}));
    bench.pin().await;
    let call = || {
        run_measuring_peak_memory(
            Command::new(bin)
                .args(["call", "--config"])
                .arg(bench.path().join("toolward.json"))
                .args(["bad__chatty", "--args", r#"{"x":1}"#]),
        )
    };
    let flood = std::fs::read_to_string(bench.path().join("bad.json")).unwrap();
    // The first start compiles the policy component into the state folder's cache, which
    // alone takes more memory than the flood may: warm the cache with a quiet call first.
    bench.scenario("bad", &listing(&[&tool("chatty")]));
    let (warm, _) = call();
    assert!(warm.status.success());
    // The same call without the flood, for the baseline.
    let (quiet, baseline_kib) = call();
    assert!(quiet.status.success());
    std::fs::write(bench.path().join("bad.json"), flood).unwrap();
    let (out, peak_kib) = call();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim_end(), r#"{"x":1}"#);
    assert!(
        peak_kib < baseline_kib + 32 * 1024,
        "peak memory {peak_kib} KiB with the flood, {baseline_kib} KiB without"
    );
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn structured_content_past_the_result_cap_is_capped() {
    // Four million numbers: 8 MB of JSON, no string to cut.
    let zeros = vec!["0"; 4_000_000].join(",");
    let result = format!(r#"{{"content": [], "structuredContent": {{"values": [{zeros}]}}}}"#);
    let bench = Bench::new("structured-cap").server(
        "bad",
        json!({"pages": [page(&[&tool("numbers")])], "results": {"numbers": result}}),
        &["numbers"],
    );
    let toolward = bench.pin_and_start().await;
    let result = call(&toolward, "bad__numbers").await;
    assert!(!result.is_error(), "{}", result.text());
    // Numbers cannot be cut to fit: the structured content is left out, and the content
    // says so.
    assert!(result.result.get("structuredContent").is_none());
    assert_eq!(
        result.text(),
        "[toolward: structured content of 8000012 bytes left out at the result cap]"
    );
    toolward.shutdown().await;
}

#[tokio::test]
async fn list_changed_after_load_is_reported_once_and_the_tool_set_stays_as_loaded() {
    // A second `tools/list` would answer the second page, with a tool `new`: the server says
    // its list changed, three times during each call.
    let scenario = json!({
        "pages": [page(&[&tool("t")]), page(&[&tool("t"), &tool("new")])],
        "actions": {"t": {"list_changed": 3}},
    });
    let bench = Bench::new("list-changed")
        .server("bad", scenario, &["t", "new"])
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    let upstream = toolward
        .call_path()
        .registry()
        .upstream("bad")
        .unwrap()
        .unwrap();
    assert!(!upstream.tools_list_changed());
    assert_echoes(&toolward, "bad__t").await;
    assert_echoes(&toolward, "bad__t").await;
    assert_eq!(upstream.tools_list_changed_count(), 6);
    assert_eq!(registered(&toolward), ["bad__t", "good__echo"]);
    assert_call_fails(&toolward, "bad__new", &["unknown tool `bad__new`"]).await;
    toolward.shutdown().await;

    // `toolward call` tells the operator once, on standard error, at the default log level.
    let Some(bin) = toolward_binary() else { return };
    let out = Command::new(bin)
        .args(["call", "--config"])
        .arg(bench.path().join("toolward.json"))
        .arg("bad__t")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr
            .matches("server `bad` says its tool list changed; the loaded tools stay as they are")
            .count(),
        1,
        "{stderr}"
    );
}
