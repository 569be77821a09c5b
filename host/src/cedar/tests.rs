//! The Cedar component through the host: each mapping rule and each outcome of
//! `docs/cedar.md`, decided by the built component in fresh instances as calls are.

use std::sync::OnceLock;

use crate::canonical::{parse, sha256_hex, to_canonical};
use crate::component::{
    CEDAR_COMPONENT, CallView, ComponentError, ComponentHost, DEFAULT_COMPONENT, Decision, Effect,
    GuestLimits, LoadedComponent, Policy, PolicyAnswer, RegisteredToolView,
};

fn host() -> &'static ComponentHost {
    static HOST: OnceLock<ComponentHost> = OnceLock::new();
    HOST.get_or_init(|| {
        ComponentHost::new(
            GuestLimits {
                ready_instances: 0,
                ..GuestLimits::default()
            },
            None,
        )
        .unwrap()
    })
}

fn cedar() -> &'static LoadedComponent {
    static LOADED: OnceLock<LoadedComponent> = OnceLock::new();
    LOADED.get_or_init(|| host().load(CEDAR_COMPONENT, "built-in-cedar").unwrap())
}

fn configure(policies: &str) -> Result<Policy, ComponentError> {
    host().configure_policy(cedar(), policies)
}

fn call(tool: &str, effect: Effect, arguments: &str) -> CallView {
    let arguments = to_canonical(&parse(arguments.as_bytes()).unwrap());
    CallView {
        id: "call-1".to_owned(),
        server: "fs".to_owned(),
        tool: tool.to_owned(),
        effect,
        arguments_sha256: sha256_hex(arguments.as_bytes()),
        arguments,
        principal: "alice".to_owned(),
        session: "session-1".to_owned(),
        time_ms: 1_700_000_000_000,
        facts: Vec::new(),
    }
}

fn answer(policies: &str, call: &CallView) -> PolicyAnswer {
    configure(policies).unwrap().answer(call)
}

fn write(arguments: &str) -> CallView {
    call("write_file", Effect::LocalChange, arguments)
}

fn ids(answer: &PolicyAnswer) -> Vec<&str> {
    answer
        .determined_by
        .as_deref()
        .unwrap()
        .iter()
        .map(String::as_str)
        .collect()
}

fn deny_reason(answer: &PolicyAnswer) -> &str {
    match &answer.decision {
        Decision::Deny(reason) => reason,
        other => panic!("expected a deny, got {other:?}"),
    }
}

const PERMIT_ALL: &str = r#"@id("all") permit(principal, action, resource);"#;

#[test]
fn a_permit_that_applies_allows_and_is_named() {
    let answer = answer(PERMIT_ALL, &write(r#"{"path":"/a"}"#));
    assert_eq!(answer.decision, Decision::Allow);
    assert_eq!(ids(&answer), ["all"]);
}

#[test]
fn nothing_applying_denies_saying_so() {
    let answer = answer(
        r#"permit(principal, action, resource) when { resource.effect == "read-only" };"#,
        &write(r#"{"path":"/a"}"#),
    );
    let reason = deny_reason(&answer);
    assert!(reason.contains("no Cedar policy permits"), "{reason}");
    assert!(reason.contains("write_file"), "{reason}");
    assert!(ids(&answer).is_empty());
}

#[test]
fn a_forbid_denies_with_its_reason_annotation() {
    let policies = format!(
        r#"{PERMIT_ALL}
        @id("no-writes") @reason("writes are off today")
        forbid(principal, action, resource) when {{ resource.effect == "local-change" }};"#
    );
    let answer = answer(&policies, &write(r#"{"path":"/a"}"#));
    assert_eq!(answer.decision, Decision::Deny("writes are off today".to_owned()));
    assert_eq!(ids(&answer), ["no-writes"]);
}

#[test]
fn a_forbid_without_reason_denies_with_its_id() {
    let policies = format!(
        r#"{PERMIT_ALL}
        @id("no-writes") forbid(principal, action, resource);"#
    );
    let answer = answer(&policies, &write("{}"));
    assert_eq!(answer.decision, Decision::Deny("no-writes".to_owned()));
}

#[test]
fn a_hold_permit_holds_even_when_a_plain_permit_applies_too() {
    let policies = format!(
        r#"{PERMIT_ALL}
        @id("ask") @hold("a person checks every write")
        permit(principal, action, resource) when {{ resource.effect == "local-change" }};"#
    );
    let answer = answer(&policies, &write("{}"));
    assert_eq!(
        answer.decision,
        Decision::Hold("a person checks every write".to_owned())
    );
    assert_eq!(ids(&answer), ["ask"]);
    let read = call("read_file", Effect::ReadOnly, "{}");
    assert_eq!(
        configure(&policies).unwrap().answer(&read).decision,
        Decision::Allow
    );
}

#[test]
fn a_forbid_beats_a_hold() {
    let policies = r#"
        @id("ask") @hold("check") permit(principal, action, resource);
        @id("never") @reason("never") forbid(principal, action, resource);"#;
    let answer = answer(policies, &write("{}"));
    assert_eq!(answer.decision, Decision::Deny("never".to_owned()));
    assert_eq!(ids(&answer), ["never"]);
}

#[test]
fn an_evaluation_error_denies_naming_the_policy_where_cedar_would_skip_it() {
    // Cedar skips the erring forbid and allows through the permit; toolward denies.
    let policies = format!(
        r#"{PERMIT_ALL}
        @id("reads-missing") forbid(principal, action, resource) when {{ context.arguments.nope == 1 }};"#
    );
    let answer = answer(&policies, &write(r#"{"path":"/a"}"#));
    let reason = deny_reason(&answer);
    assert!(reason.contains("policy `reads-missing` could not be evaluated"), "{reason}");
    assert_eq!(ids(&answer), ["reads-missing"]);
}

#[test]
fn policies_without_id_are_named_in_file_order() {
    let policies = r#"
        permit(principal, action, resource) when { false };
        forbid(principal, action, resource);"#;
    let answer = answer(policies, &write("{}"));
    assert_eq!(ids(&answer), ["policy1"]);
}

/// Allows exactly when `condition` holds, naming the policy `p`.
fn holds(condition: &str, call: &CallView) -> bool {
    let policies = format!(r#"@id("p") permit(principal, action, resource) when {{ {condition} }};"#);
    match answer(&policies, call).decision {
        Decision::Allow => true,
        Decision::Deny(reason) if reason.contains("no Cedar policy permits") => false,
        other => panic!("`{condition}`: {other:?}"),
    }
}

#[test]
fn the_request_names_principal_action_tool_inside_its_server_and_its_attributes() {
    let c = write("{}");
    assert!(holds(r#"principal == Toolward::Principal::"alice""#, &c));
    assert!(holds(r#"action == Toolward::Action::"call""#, &c));
    assert!(holds(r#"resource == Toolward::Tool::"fs/write_file""#, &c));
    assert!(holds(r#"resource in Toolward::Server::"fs""#, &c));
    assert!(!holds(r#"resource in Toolward::Server::"web""#, &c));
    assert!(holds(
        r#"resource.server == "fs" && resource.name == "write_file" && resource.effect == "local-change""#,
        &c
    ));
}

#[test]
fn the_context_holds_the_sha256_session_time_and_call_id() {
    let c = write(r#"{"path":"/a"}"#);
    let condition = format!(
        r#"context.arguments_sha256 == "{}" && context.session == "session-1" && context.time_ms == 1700000000000 && context.call_id == "call-1""#,
        c.arguments_sha256
    );
    assert!(holds(&condition, &c));
}

#[test]
fn strings_booleans_objects_and_integers_within_i64_convert() {
    let c = write(
        r#"{"path":"/a","force":true,"n":-9223372036854775808,"opts":{"depth":{"max":3}}}"#,
    );
    assert!(holds(
        r#"context.arguments.path == "/a" && context.arguments.force && context.arguments.n == -9223372036854775808 && context.arguments.opts.depth.max == 3"#,
        &c
    ));
    assert!(holds("context.unrepresentable.isEmpty()", &c));
}

#[test]
fn an_integer_outside_i64_is_left_out_and_named() {
    let c = write(r#"{"n":9223372036854775808,"path":"/a"}"#);
    assert!(holds(
        r#"!(context.arguments has n) && context.unrepresentable == ["/n"] && context.arguments.path == "/a""#,
        &c
    ));
}

#[test]
fn decimals_of_up_to_four_fraction_digits_convert_exactly() {
    let c = write(r#"{"ratio":0.1234,"big":922337203685477.5807}"#);
    assert!(holds(
        r#"context.arguments.ratio == decimal("0.1234") && context.arguments.big == decimal("922337203685477.5807")"#,
        &c
    ));
}

#[test]
fn decimals_cedar_cannot_hold_are_left_out_and_named() {
    let c = write(r#"{"fine":0.12345,"large":922337203685477.6,"tiny":1e-7,"huge":1e300}"#);
    assert!(holds(
        r#"context.arguments == {} && context.unrepresentable.containsAll(["/fine", "/large", "/tiny", "/huge"])"#,
        &c
    ));
}

#[test]
fn null_is_left_out_and_named() {
    let c = write(r#"{"a/b":null}"#);
    assert!(holds(r#"context.unrepresentable == ["/a~1b"]"#, &c));
}

#[test]
fn arrays_become_sets() {
    let c = write(r#"{"paths":["/a","/b","/a"]}"#);
    assert!(holds(
        r#"context.arguments.paths == ["/b", "/a"] && context.arguments.paths.contains("/b")"#,
        &c
    ));
}

#[test]
fn an_array_holding_an_unrepresentable_value_is_left_out_whole() {
    let c = write(r#"{"ids":[1,18446744073709551616]}"#);
    assert!(holds(
        r#"!(context.arguments has ids) && context.unrepresentable == ["/ids"]"#,
        &c
    ));
}

#[test]
fn a_policy_reading_an_unrepresentable_argument_denies_naming_the_argument() {
    let policies = format!(
        r#"{PERMIT_ALL}
        @id("limit") forbid(principal, action, resource) when {{ context.arguments.size > 100 }};"#
    );
    let answer = answer(&policies, &write(r#"{"size":1e30}"#));
    let reason = deny_reason(&answer);
    assert!(reason.contains("policy `limit`"), "{reason}");
    assert!(reason.contains("`/size`"), "{reason}");
}

#[test]
fn facts_become_nested_records_of_longs() {
    let mut c = write("{}");
    c.facts = vec![
        ("tool.forwarded.minute".to_owned(), "3".to_owned()),
        ("server.held.hour".to_owned(), "12".to_owned()),
    ];
    assert!(holds(
        "context.facts.tool.forwarded.minute == 3 && context.facts.server.held.hour == 12",
        &c
    ));
}

#[test]
fn a_rate_limit_through_facts_forbids_past_the_limit() {
    let policies = format!(
        r#"{PERMIT_ALL}
        @id("write-rate") @reason("at most 30 writes a minute")
        forbid(principal, action, resource) when {{ context.facts.tool.forwarded.minute >= 30 }};"#
    );
    let policy = configure(&policies).unwrap();
    let mut c = write("{}");
    c.facts = vec![("tool.forwarded.minute".to_owned(), "29".to_owned())];
    assert_eq!(policy.answer(&c).decision, Decision::Allow);
    c.facts = vec![("tool.forwarded.minute".to_owned(), "30".to_owned())];
    assert_eq!(
        policy.answer(&c).decision,
        Decision::Deny("at most 30 writes a minute".to_owned())
    );
}

#[test]
fn configure_refuses_a_parse_error_naming_line_and_column() {
    let error = configure("permit(principal, action, resource);\nforbid(principal action);")
        .unwrap_err()
        .to_string();
    assert!(error.contains("line 2, column"), "{error}");
}

#[test]
fn configure_refuses_two_policies_with_one_id() {
    let error = configure(
        r#"@id("x") permit(principal, action, resource); @id("x") forbid(principal, action, resource);"#,
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("two policies have the id `x`"), "{error}");
}

#[test]
fn configure_refuses_a_forbid_with_hold() {
    let error = configure(r#"@id("f") @hold("h") forbid(principal, action, resource);"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("policy `f` is a forbid with `@hold`"), "{error}");
}

#[test]
fn a_0_1_0_component_names_nothing() {
    let loaded = host().load(DEFAULT_COMPONENT, "built-in").unwrap();
    assert!(!loaded.exports_policy_v2());
    let policy = host()
        .configure_policy(&loaded, r#"{"decisions":{"local-change":"allow"}}"#)
        .unwrap();
    let answer = policy.answer(&write("{}"));
    assert_eq!(answer.decision, Decision::Allow);
    assert_eq!(answer.determined_by, None);
}

fn tool(name: &str, schema: &str) -> RegisteredToolView {
    RegisteredToolView {
        server: "fs".to_owned(),
        name: name.to_owned(),
        effect: Effect::LocalChange,
        input_schema: schema.to_owned(),
    }
}

const WRITE_SCHEMA: &str = r#"{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"},"mode":{"type":"integer"},"ratio":{"type":"number"}},"required":["path","content","mode"]}"#;

#[test]
fn validation_accepts_policies_typed_by_the_tools_input_schema() {
    let policy = configure(
        r#"@id("dotfiles") forbid(principal, action, resource == Toolward::Tool::"fs/write_file")
           when { context.arguments.path like "*/.*" };
           @id("modes") forbid(principal, action, resource == Toolward::Tool::"fs/write_file")
           when { context.arguments has mode && context.arguments.mode > 0 };
           @id("rate") forbid(principal, action, resource)
           when { context.facts.tool.forwarded.minute > 30 };"#,
    )
    .unwrap();
    assert!(policy.validates());
    let problems = policy
        .validate(&[
            tool("write_file", WRITE_SCHEMA),
            tool("read_file", r#"{"type":"object","properties":{"path":{"type":"string"}}}"#),
        ])
        .unwrap();
    assert_eq!(problems, Vec::<String>::new());
}

#[test]
fn validation_names_the_policy_place_and_tool_of_a_type_error() {
    let policy = configure(
        "permit(principal, action, resource);\n@id(\"wrong\") forbid(principal, action, resource == Toolward::Tool::\"fs/write_file\")\n  when { context.arguments.path > 3 };",
    )
    .unwrap();
    let problems = policy.validate(&[tool("write_file", WRITE_SCHEMA)]).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problem = &problems[0];
    assert!(problem.starts_with("policy `wrong`: line 3, column"), "{problem}");
    assert!(problem.ends_with("(for tool `fs/write_file`)"), "{problem}");
}

#[test]
fn validation_leaves_numbers_and_optional_integers_out_of_required_attributes() {
    // `ratio` (a JSON Schema number) is left out of the type; `mode` (an integer) is
    // optional even though required, since an integer outside i64 is left out.
    let policy = configure(
        r#"@id("ratio") forbid(principal, action, resource == Toolward::Tool::"fs/write_file") when { context.arguments.ratio == 1 };
           @id("mode") forbid(principal, action, resource == Toolward::Tool::"fs/write_file") when { context.arguments.mode == 1 };"#,
    )
    .unwrap();
    let problems = policy.validate(&[tool("write_file", WRITE_SCHEMA)]).unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("policy `mode`"), "{problems:?}");
    assert!(problems[1].starts_with("policy `ratio`"), "{problems:?}");
}

#[test]
fn validation_names_a_tool_nobody_registered() {
    let policy =
        configure(r#"@id("typo") forbid(principal, action, resource == Toolward::Tool::"fs/write_fil");"#)
            .unwrap();
    let problems = policy.validate(&[tool("write_file", WRITE_SCHEMA)]).unwrap();
    assert_eq!(
        problems,
        [r#"policy `typo`: names `Toolward::Tool::"fs/write_fil"`, which no server registered"#]
    );
}
