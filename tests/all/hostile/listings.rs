//! Listings past their bounds, and names a client cannot take: the server (or the tool) is
//! refused with a message naming the bound, the value and the limit, and the rest loads.

use super::*;

/// Pins server `bad` offering `t` (and `good`), then makes `bad` answer `changed` and starts.
async fn pinned_then(test: &str, changed: Value) -> (Bench, Toolward) {
    let bench = Bench::new(test)
        .server("bad", listing(&[&tool("t")]), &["t"])
        .with_good_server();
    bench.pin().await;
    bench.scenario("bad", &changed);
    let toolward = bench.start().await;
    the_other_server_still_works(&toolward).await;
    (bench, toolward)
}

/// Asserts that server `bad` did not load because of `reason`, and that a call of its tool
/// says so.
async fn assert_listing_refused(toolward: &Toolward, reason: &str) {
    assert_eq!(
        server_failure(toolward, "bad"),
        format!("its listing was refused: {reason}")
    );
    assert_call_fails(
        toolward,
        "bad__t",
        &[&format!("tool `bad__t` is not available: server `bad` did not load: its listing was refused: {reason}")],
    )
    .await;
    assert_eq!(registered(toolward), ["good__echo"]);
}

#[tokio::test]
async fn endless_pages_are_refused_at_the_page_bound_and_the_other_server_loads() {
    // Every page names a cursor never seen before: `@PAGE@` is the request's number.
    let endless = json!({"pages": [
        format!(r#"{{"tools": [{}], "nextCursor": "c1"}}"#, tool("t")),
        r#"{"tools": [], "nextCursor": "c@PAGE@"}"#,
    ]});
    let (bench, toolward) = pinned_then("endless-pages", endless).await;
    assert_listing_refused(
        &toolward,
        "server `bad` listed more than 64 pages of tools (bound `max_listing_pages`)",
    )
    .await;
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_repeated_cursor_is_refused_and_the_other_server_loads() {
    let repeating = json!({"pages": [
        format!(r#"{{"tools": [{}], "nextCursor": "again"}}"#, tool("t")),
        r#"{"tools": [], "nextCursor": "again"}"#,
    ]});
    let (_bench, toolward) = pinned_then("repeated-cursor", repeating).await;
    assert_listing_refused(
        &toolward,
        "server `bad` repeated the cursor `again` on `tools/list` page 2, so its listing would not end",
    )
    .await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_hundred_thousand_tools_are_refused_at_the_tool_bound_and_the_other_server_loads() {
    let tools: Vec<String> = (0..100_000)
        .map(|n| format!(r#"{{"name":"t{n}","inputSchema":{{"type":"object"}}}}"#))
        .collect();
    let text = format!(r#"{{"tools":[{}]}}"#, tools.join(","));
    let (bench, toolward) = pinned_then("many-tools", json!({"pages": [text]})).await;
    assert_listing_refused(
        &toolward,
        "server `bad` listed 100000 tools, more than 4096 (bound `max_tools`)",
    )
    .await;
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_page_over_the_byte_bound_is_refused_and_the_other_server_loads() {
    let bench = Bench::new("page-bytes")
        .server("bad", listing(&[&tool("t")]), &["t"])
        .with_good_server()
        .with(
            "limits",
            json!({"call_timeout_ms": 5000, "max_page_bytes": 100_000}),
        );
    bench.pin().await;
    let padded = format!(
        r#"{{"tools": [{}], "padding": "{}"}}"#,
        tool("t"),
        "p".repeat(200_000)
    );
    bench.scenario("bad", &json!({"pages": [padded]}));
    let toolward = bench.start().await;
    the_other_server_still_works(&toolward).await;
    assert_listing_refused(
        &toolward,
        &format!(
            "server `bad` sent `tools/list` page 1 of {} bytes, more than 100000 (bound `max_page_bytes`)",
            padded.len()
        ),
    )
    .await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_ten_mebibyte_schema_refuses_that_tool_alone() {
    let bench = Bench::new("huge-schema")
        .server("bad", listing(&[&tool("t"), &tool("huge")]), &["t", "huge"])
        .with_good_server();
    bench.pin().await;
    let huge = format!(
        r#"{{"name": "huge", "inputSchema": {{"type": "object", "description": "{}"}}}}"#,
        "d".repeat(10 << 20)
    );
    bench.scenario("bad", &listing(&[&tool("t"), &huge]));
    let toolward = bench.start().await;
    // The bound is on the canonical text: the server's spaces do not count.
    let canonical_bytes = huge.len() - huge.matches(' ').count();
    assert_eq!(
        refusal(&toolward, "bad", "huge").reason,
        format!(
            "the entry is {canonical_bytes} bytes long, more than 262144 (bound `max_tool_bytes`)"
        )
    );
    assert_echoes(&toolward, "bad__t").await;
    the_other_server_still_works(&toolward).await;
    assert_call_fails(
        &toolward,
        "bad__huge",
        &["tool `bad__huge` is not available: toolward refused it at load: the entry is"],
    )
    .await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn names_clients_reject_are_refused_by_the_name_pattern_and_the_rest_loads() {
    let names = ["read file", "read/file", "lire_l'été", "a.b", "tool:x"];
    let tools: Vec<String> = names.iter().map(|n| tool(n)).chain([tool("t")]).collect();
    let refs: Vec<&str> = tools.iter().map(String::as_str).collect();
    let mut classified = names.to_vec();
    classified.push("t");
    let bench = Bench::new("bad-names")
        .server("bad", listing(&refs), &classified)
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    for name in names {
        assert_eq!(
            refusal(&toolward, "bad", name).reason,
            format!(
                "its exposed name `bad__{name}` does not match `tool_name_pattern` `^[a-zA-Z0-9_-]{{1,64}}$`"
            )
        );
    }
    assert_eq!(registered(&toolward), ["bad__t", "good__echo"]);
    assert_echoes(&toolward, "bad__t").await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_name_too_long_once_prefixed_is_refused_and_one_that_just_fits_works() {
    // `bad__` adds 5 characters to the 64 the pattern allows.
    let fits = "f".repeat(59);
    let too_long = "l".repeat(60);
    let bench = Bench::new("long-names")
        .server(
            "bad",
            listing(&[&tool(&fits), &tool(&too_long)]),
            &[&fits, &too_long],
        )
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    assert_eq!(
        refusal(&toolward, "bad", &too_long).reason,
        format!(
            "its exposed name `bad__{too_long}` does not match `tool_name_pattern` `^[a-zA-Z0-9_-]{{1,64}}$`"
        )
    );
    assert_echoes(&toolward, &format!("bad__{fits}")).await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}
