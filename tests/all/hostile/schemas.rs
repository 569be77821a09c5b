//! Schemas a server may send, all from one server at once: each refused tool is refused
//! for its own reason at its own place, and the legal ones (recursive references, boolean
//! subschemas, draft-07 keywords under draft-07) load and validate calls.

use super::*;

/// Why a schema is refused, and the JSON Pointer of the place.
type Refused = Option<(&'static str, &'static str)>;

/// `(tool, input schema, why it is refused and where; None when it is legal)`.
const SCHEMAS: &[(&str, &str, Refused)] = &[
    (
        "http_ref",
        r#"{"type": "object", "properties": {"x": {"$ref": "http://127.0.0.1:9/evil.json"}}}"#,
        Some((
            "`$ref` `http://127.0.0.1:9/evil.json` at `/properties/x` refers outside the schema",
            "/properties/x",
        )),
    ),
    (
        "file_ref",
        r#"{"type": "object", "properties": {"x": {"$ref": "file:///etc/passwd"}}}"#,
        Some((
            "`$ref` `file:///etc/passwd` at `/properties/x` refers outside the schema",
            "/properties/x",
        )),
    ),
    (
        "id_ref",
        r#"{"type": "object", "properties": {"x": {"$id": "http://127.0.0.1:9/y", "$ref": "other.json"}}}"#,
        Some((
            "`$ref` `other.json` at `/properties/x` refers outside the schema",
            "/properties/x",
        )),
    ),
    (
        "under_id",
        r##"{"type": "object", "$defs": {"b": {}}, "properties": {"x": {"$id": "http://127.0.0.1:9/y", "properties": {"c": {"$ref": "#/$defs/b"}}}}}"##,
        Some((
            "`$ref` `#/$defs/b` at `/properties/x/properties/c` resolves against `$id` `http://127.0.0.1:9/y` at `/properties/x`, not against the schema document",
            "/properties/x/properties/c",
        )),
    ),
    (
        "dangling",
        r##"{"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}, "$defs": {}}"##,
        Some((
            "`$ref` `#/$defs/missing` at `/properties/x` does not resolve to a subschema of the schema",
            "/properties/x",
        )),
    ),
    (
        "not_object",
        r#"{"type": "array", "items": {"type": "string"}}"#,
        Some((
            "the schema root has `type` `array` where `type` `object` is required",
            "/type",
        )),
    ),
    (
        "no_type",
        r#"{"properties": {"x": {}}}"#,
        Some((
            "the schema root has no `type` where `type` `object` is required",
            "",
        )),
    ),
    (
        "draft04",
        r#"{"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}"#,
        Some((
            "`$schema` `http://json-schema.org/draft-04/schema#` at `/$schema` names an unknown dialect (toolward knows draft-07, 2019-09 and 2020-12)",
            "/$schema",
        )),
    ),
    (
        "meta_fetch",
        r#"{"type": "object", "properties": {"x": {"$schema": "https://127.0.0.1:9/meta.json"}}}"#,
        Some((
            "`$schema` `https://127.0.0.1:9/meta.json` at `/properties/x/$schema` names an unknown dialect (toolward knows draft-07, 2019-09 and 2020-12)",
            "/properties/x/$schema",
        )),
    ),
    (
        "malformed",
        r#"{"type": "object", "allOf": {"required": ["x"]}}"#,
        Some(("`allOf` at `/allOf` is not an array of schemas", "/allOf")),
    ),
    (
        "recursive",
        r##"{"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}, "$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}}}}}"##,
        None,
    ),
    (
        "booleans",
        r#"{"type": "object", "properties": {"anything": true, "nothing": false}}"#,
        None,
    ),
    (
        "draft07",
        r##"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"$ref": "#/definitions/n"}], "additionalItems": false}, "from": {"type": "string"}, "to": {"type": "string"}}, "dependencies": {"from": ["to"]}, "definitions": {"n": {"type": "number"}}}"##,
        None,
    ),
];

fn subject(name: &str, schema: &str) -> String {
    format!(r#"{{"name": "{name}", "inputSchema": {schema}}}"#)
}

async fn call_with(toolward: &Toolward, tool: &str, arguments: Value) -> CallResult {
    toolward
        .call(tool, arguments.as_object().cloned(), Arc::new(DenyAll))
        .await
}

#[tokio::test]
async fn each_schema_is_refused_for_its_own_reason_at_its_place_and_the_legal_ones_work() {
    let tools: Vec<String> = SCHEMAS.iter().map(|(n, s, _)| subject(n, s)).collect();
    let refs: Vec<&str> = tools.iter().map(String::as_str).collect();
    let names: Vec<&str> = SCHEMAS.iter().map(|(n, _, _)| *n).collect();
    let bench = Bench::new("schemas")
        .server("s", listing(&refs), &names)
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    for (name, _, expected) in SCHEMAS {
        let Some((reason, pointer)) = expected else {
            continue;
        };
        let refused = refusal(&toolward, "s", name);
        assert_eq!(
            refused.reason,
            format!("the input schema of tool `{name}` of server `s` is refused: {reason}")
        );
        assert_eq!(refused.pointers, [*pointer], "{name}");
    }
    assert_eq!(
        registered(&toolward),
        ["good__echo", "s__booleans", "s__draft07", "s__recursive"]
    );

    // Recursive references validate to any depth.
    let deep = json!({"tree": {"value": 1, "next": {"value": 2, "next": {"value": 3}}}});
    let result = call_with(&toolward, "s__recursive", deep.clone()).await;
    assert!(!result.is_error(), "{}", result.result);
    assert_eq!(result.text(), deep.to_string());
    let wrong = json!({"tree": {"next": {"next": {"value": "three"}}}});
    let result = call_with(&toolward, "s__recursive", wrong).await;
    assert!(
        result.text().starts_with("arguments of tool `s__recursive` on server `s` do not match its input schema: at `/tree/next/next/value`"),
        "{}",
        result.text()
    );
    // `true` takes anything, `false` nothing.
    let result = call_with(
        &toolward,
        "s__booleans",
        json!({"anything": [1, {"a": null}]}),
    )
    .await;
    assert!(!result.is_error(), "{}", result.result);
    let result = call_with(&toolward, "s__booleans", json!({"nothing": 1})).await;
    assert!(
        result.text().starts_with("arguments of tool `s__booleans` on server `s` do not match its input schema: at `/nothing`"),
        "{}",
        result.text()
    );
    // Draft-07 tuple `items` and `dependencies` are validated as draft-07.
    let result = call_with(
        &toolward,
        "s__draft07",
        json!({"pair": ["a", 1], "from": "x", "to": "y"}),
    )
    .await;
    assert!(!result.is_error(), "{}", result.result);
    let result = call_with(&toolward, "s__draft07", json!({"pair": ["a", "b"]})).await;
    assert!(result.text().contains("at `/pair/1`"), "{}", result.text());
    let result = call_with(&toolward, "s__draft07", json!({"from": "x"})).await;
    assert!(result.is_error(), "`from` without `to`: {}", result.result);
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}

#[tokio::test]
async fn schemas_the_validator_cannot_compile_are_refused_at_load_not_at_every_call() {
    // Without `$schema` the dialect is 2020-12, where `items` takes one schema, not an array;
    // and `(` is no regular expression. Both pass toolward's own checks.
    let tuple = r##"{"type": "object", "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]}}}"##;
    let pattern = r#"{"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}}"#;
    let output = r#"{"name": "typed", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object", "properties": {"n": {"minimum": "zero"}}}}"#;
    let bench = Bench::new("uncompilable")
        .server(
            "s",
            listing(&[
                &subject("pairs", tuple),
                &subject("regex", pattern),
                output,
                &tool("t"),
            ]),
            &["pairs", "regex", "typed", "t"],
        )
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    let uri = "https://json-schema.org/draft/2020-12/schema";
    for (name, which, pointer) in [
        ("pairs", "input schema", "/properties/pair/items"),
        ("regex", "input schema", "/properties/x/pattern"),
        ("typed", "output schema", "/properties/n/minimum"),
    ] {
        let refused = refusal(&toolward, "s", name);
        assert!(
            refused.reason.starts_with(&format!(
                "the {which} of tool `{name}` of server `s` is refused: it cannot be used for validation under `$schema` `{uri}`: "
            )),
            "{}",
            refused.reason
        );
        assert_eq!(refused.pointers, [pointer], "{name}");
    }
    assert_eq!(registered(&toolward), ["good__echo", "s__t"]);
    assert_echoes(&toolward, "s__t").await;
    let refusals = |toolward: &Toolward| -> Vec<(String, String, Vec<String>)> {
        let report = toolward.report();
        let server = report.servers.iter().find(|s| s.server == "s").unwrap();
        server
            .refused
            .iter()
            .map(|r| (r.tool.clone(), r.reason.clone(), r.pointers.clone()))
            .collect()
    };
    let first = refusals(&toolward);
    toolward.shutdown().await;
    // The next start reads the verdicts the first kept in the state folder (only schemas
    // that compiled are in it): the same tools refused with the same reasons, in order.
    assert!(bench.path().join("state/schema-verdicts").is_file());
    let toolward = bench.start().await;
    assert_eq!(refusals(&toolward), first);
    assert_eq!(registered(&toolward), ["good__echo", "s__t"]);
    toolward.shutdown().await;
}

#[tokio::test]
async fn a_boolean_root_a_non_object_root_and_nesting_past_the_bound_are_refused_by_the_listing() {
    let deep = format!(
        r#"{{"type": "object", "properties": {}}}"#,
        r#"{"a": {"type": "object", "properties": "#.repeat(32) + "{}" + &"}}".repeat(32)
    );
    let bench = Bench::new("schema-roots")
        .server(
            "s",
            listing(&[&tool("t"), &tool("yes"), &tool("list"), &tool("deep")]),
            &["t", "yes", "list", "deep"],
        )
        .with_good_server();
    bench.pin().await;
    bench.scenario(
        "s",
        &listing(&[
            &tool("t"),
            &subject("yes", "true"),
            &subject("list", r#"[{"type": "object"}]"#),
            &subject("deep", &deep),
        ]),
    );
    let toolward = bench.start().await;
    assert_eq!(
        refusal(&toolward, "s", "yes").reason,
        "`inputSchema` is not an object"
    );
    assert_eq!(
        refusal(&toolward, "s", "list").reason,
        "`inputSchema` is not an object"
    );
    assert_eq!(
        refusal(&toolward, "s", "deep").reason,
        "`inputSchema` nests deeper than 64 levels"
    );
    assert_echoes(&toolward, "s__t").await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}
