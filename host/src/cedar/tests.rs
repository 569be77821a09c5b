//! The Cedar component through the host: each mapping rule and each outcome of
//! `docs/cedar.md`, decided by the built component in fresh instances as calls are.
//!
//! Compiling the 4 MB component and each configured snapshot takes seconds in a debug
//! build, so the tests share a few policy sets, configured once each: one of permits
//! checking each mapping rule (`MAPPING`), one giving each outcome on its own tool
//! (`OUTCOMES`), and two for validation.

use std::sync::OnceLock;

use crate::canonical::{parse, sha256_hex, to_canonical};
use crate::component::{
    CEDAR_COMPONENT, CallView, ComponentError, ComponentHost, Decision, Effect, GuestLimits,
    LoadedComponent, Policy, PolicyAnswer, RegisteredToolView,
};

fn host() -> &'static ComponentHost {
    static HOST: OnceLock<ComponentHost> = OnceLock::new();
    HOST.get_or_init(|| {
        // The instrumented component compiles once for every configure in this process, and
        // the compiled snapshots stay for the next run: one folder per user, not per process
        // (a folder per process left 250 MB behind at every run).
        let dir = std::env::temp_dir().join(format!("toolward-cedar-tests-{}", whoami()));
        let state = crate::state_dir::StateDir::open(&dir).unwrap();
        let cache = crate::component::ComponentCache::open(&state).unwrap();
        ComponentHost::new(
            GuestLimits {
                ready_instances: 0,
                ..GuestLimits::default()
            },
            Some(cache),
        )
        .unwrap()
    })
}

/// The effective user's id, so that two users' runs do not share (or trip over) one cache.
fn whoami() -> u32 {
    rustix::process::geteuid().as_raw()
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
        principal_attributes: Vec::new(),
        labels: Default::default(),
        time_ms: 1_700_000_000_000,
        facts: Vec::new(),
    }
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

/// One policy set giving each outcome on a tool of its own.
const OUTCOMES: &str = r#"
@id("all") permit(principal, action, resource) when { resource.name != "unpermitted" };
@id("no-writes") @reason("writes are off today")
forbid(principal, action, resource == Toolward::Tool::"fs/forbidden");
forbid(principal, action, resource == Toolward::Tool::"fs/unnamed");
@id("ask") @hold("a person checks every write")
permit(principal, action, resource == Toolward::Tool::"fs/held");
@id("ask-too") @hold("check") permit(principal, action, resource == Toolward::Tool::"fs/held-and-forbidden");
@id("never") @reason("never") forbid(principal, action, resource == Toolward::Tool::"fs/held-and-forbidden");
@id("reads-missing") forbid(principal, action, resource == Toolward::Tool::"fs/erring")
when { context.arguments.nope == 1 };
@id("limit") forbid(principal, action, resource == Toolward::Tool::"fs/sized")
when { context.arguments.size > 100 };
@id("write-rate") @reason("at most 30 writes a minute")
forbid(principal, action, resource == Toolward::Tool::"fs/rated")
when { context.facts.tool.forwarded.minute >= 30 };
"#;

fn outcomes() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| configure(OUTCOMES).unwrap())
}

fn decide(tool: &str, arguments: &str) -> PolicyAnswer {
    outcomes().answer(&write_to(tool, arguments))
}

fn write_to(tool: &str, arguments: &str) -> CallView {
    call(tool, Effect::LocalChange, arguments)
}

#[test]
fn a_permit_that_applies_allows_and_is_named() {
    let answer = decide("write_file", r#"{"path":"/a"}"#);
    assert_eq!(answer.decision, Decision::Allow);
    assert_eq!(ids(&answer), ["all"]);
}

#[test]
fn nothing_applying_denies_saying_so() {
    let answer = decide("unpermitted", "{}");
    let reason = deny_reason(&answer);
    assert!(reason.contains("no Cedar policy permits"), "{reason}");
    assert!(reason.contains("`unpermitted` on server `fs`"), "{reason}");
    assert!(ids(&answer).is_empty());
}

#[test]
fn a_forbid_denies_with_its_reason_annotation() {
    let answer = decide("forbidden", "{}");
    assert_eq!(
        answer.decision,
        Decision::Deny("writes are off today".to_owned())
    );
    assert_eq!(ids(&answer), ["no-writes"]);
}

#[test]
fn a_forbid_without_reason_denies_with_its_id_and_ids_follow_file_order() {
    let answer = decide("unnamed", "{}");
    assert_eq!(answer.decision, Decision::Deny("policy2".to_owned()));
    assert_eq!(ids(&answer), ["policy2"]);
}

#[test]
fn a_hold_permit_holds_even_when_a_plain_permit_applies_too() {
    let answer = decide("held", "{}");
    assert_eq!(
        answer.decision,
        Decision::Hold("a person checks every write".to_owned())
    );
    assert_eq!(ids(&answer), ["ask"]);
}

#[test]
fn a_forbid_beats_a_hold() {
    let answer = decide("held-and-forbidden", "{}");
    assert_eq!(answer.decision, Decision::Deny("never".to_owned()));
    assert_eq!(ids(&answer), ["never"]);
}

#[test]
fn an_evaluation_error_denies_naming_the_policy_where_cedar_would_skip_it() {
    // Cedar skips the erring forbid and allows through `all`; toolward denies.
    let answer = decide("erring", r#"{"path":"/a"}"#);
    let reason = deny_reason(&answer);
    assert!(
        reason.contains("policy `reads-missing` could not be evaluated"),
        "{reason}"
    );
    assert_eq!(ids(&answer), ["reads-missing"]);
}

#[test]
fn a_policy_reading_an_unrepresentable_argument_denies_naming_the_argument() {
    let answer = decide("sized", r#"{"size":1e30}"#);
    let reason = deny_reason(&answer);
    assert!(reason.contains("policy `limit`"), "{reason}");
    assert!(reason.contains("`/size`"), "{reason}");
    assert_eq!(decide("sized", r#"{"size":100}"#).decision, Decision::Allow);
}

/// A forbid guarded with `has` and a permit comparing a record whole: both would see a
/// left-out argument as absent, so a call holding one is denied when a policy reads it.
const GUARDED: &str = r#"
@id("n-limit") @reason("n above 100")
forbid(principal, action, resource) when { context.arguments has n && context.arguments.n > 100 };
@id("safe-only") permit(principal, action, resource == Toolward::Tool::"fs/o")
when { context.arguments has o && context.arguments.o == {"mode": "safe"} };
@id("mode") permit(principal, action, resource == Toolward::Tool::"fs/mode")
when { context.arguments has o && context.arguments.o has mode && context.arguments.o.mode == "safe" };
@id("rest") permit(principal, action, resource) when { resource.name != "o" && resource.name != "mode" };
"#;

#[test]
fn a_left_out_argument_that_a_guarded_policy_reads_denies_naming_both() {
    let policy = configure(GUARDED).unwrap();
    let at = |tool: &str, arguments: &str| policy.answer(&write_to(tool, arguments));
    assert_eq!(
        at("any", r#"{"n":101}"#).decision,
        Decision::Deny("n above 100".to_owned())
    );
    assert_eq!(at("any", r#"{"n":99}"#).decision, Decision::Allow);
    for n in ["99999999999999999999", "100000.00001", "1e300", "null"] {
        let answer = at("any", &format!(r#"{{"n":{n}}}"#));
        let reason = deny_reason(&answer);
        assert!(
            reason.contains("`/n`") && reason.contains("policy `n-limit`"),
            "{n}: {reason}"
        );
        assert_eq!(ids(&answer), ["n-limit"], "{n}");
    }
    // An argument no policy reads does not stop the call.
    assert_eq!(at("any", r#"{"other":null}"#).decision, Decision::Allow);
}

#[test]
fn a_record_compared_whole_reads_its_left_out_members_and_a_member_access_does_not() {
    let policy = configure(GUARDED).unwrap();
    let at = |tool: &str, arguments: &str| policy.answer(&write_to(tool, arguments));
    assert_eq!(
        at("o", r#"{"o":{"mode":"safe"}}"#).decision,
        Decision::Allow
    );
    let answer = at("o", r#"{"o":{"mode":"safe","force":null}}"#);
    assert!(deny_reason(&answer).contains("`/o/force`"), "{answer:?}");
    assert!(ids(&answer).contains(&"safe-only"), "{answer:?}");
    // `has o` and `o.mode` do not read `/o/force`, but `safe-only` does, whatever its tool.
    let answer = at("mode", r#"{"o":{"mode":"safe","force":null}}"#);
    assert_eq!(ids(&answer), ["safe-only"], "{answer:?}");
}

#[test]
fn configure_refuses_a_misspelt_annotation_and_an_empty_id() {
    for (policies, named) in [
        (
            r#"@Hold("x") permit(principal, action, resource);"#,
            "@Hold",
        ),
        (
            r#"@hold_("x") permit(principal, action, resource);"#,
            "@hold_",
        ),
        (
            r#"@REASON("x") forbid(principal, action, resource);"#,
            "@REASON",
        ),
        // Found by the re-attack of stop 15: a letter changed, dropped, added or swapped.
        (
            r#"@hodl("x") permit(principal, action, resource);"#,
            "@hodl",
        ),
        (r#"@hld("x") permit(principal, action, resource);"#, "@hld"),
        (
            r#"@h0ld("x") permit(principal, action, resource);"#,
            "@h0ld",
        ),
        (
            r#"@holds("x") permit(principal, action, resource);"#,
            "@holds",
        ),
        (
            r#"@on_hold("x") permit(principal, action, resource);"#,
            "@on_hold",
        ),
        (
            r#"@approval("x") permit(principal, action, resource);"#,
            "@approval",
        ),
        (
            r#"@resaon("x") forbid(principal, action, resource);"#,
            "@resaon",
        ),
        (r#"@ids("x") permit(principal, action, resource);"#, "@ids"),
    ] {
        let error = configure(policies).unwrap_err().to_string();
        assert!(
            error.contains(named) && error.contains("did you mean"),
            "{error}"
        );
    }
    let error = configure(r#"@id("") permit(principal, action, resource);"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("empty"), "{error}");
    // Other annotations are Cedar's own business.
    assert!(
        configure(
            r#"@description("x") @role("y") @advice("z") permit(principal, action, resource);"#
        )
        .is_ok()
    );
}

#[test]
fn a_rate_limit_through_facts_forbids_past_the_limit() {
    let mut c = write_to("rated", "{}");
    c.facts = vec![("tool.forwarded.minute".to_owned(), "29".to_owned())];
    assert_eq!(outcomes().answer(&c).decision, Decision::Allow);
    c.facts = vec![("tool.forwarded.minute".to_owned(), "30".to_owned())];
    assert_eq!(
        outcomes().answer(&c).decision,
        Decision::Deny("at most 30 writes a minute".to_owned())
    );
}

/// One permit per mapping rule: a call satisfies exactly the permits whose rule holds for
/// it, and `determined_by` names them.
const MAPPING: &str = r#"
@id("principal") permit(principal == Toolward::Principal::"alice", action, resource);
@id("action") permit(principal, action == Toolward::Action::"call", resource);
@id("tool") permit(principal, action, resource == Toolward::Tool::"fs/write_file");
@id("in-server") permit(principal, action, resource in Toolward::Server::"fs");
@id("in-other-server") permit(principal, action, resource in Toolward::Server::"web");
@id("attributes") permit(principal, action, resource)
when { resource.server == "fs" && resource.name == "write_file" && resource.effect == "local-change" };
@id("context") permit(principal, action, resource)
when { context.session_id == "session-1" && context.time_ms == 1700000000000 && context.call_id == "call-1" && context.arguments_sha256 == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" };
@id("no-labels") permit(principal, action, resource)
when { !context.session.untrusted && context.session.confidentiality == "" && context.session.confidentiality_rank == 0 && context.session.tags.isEmpty() };
@id("no-attributes") permit(principal, action, resource) when { context.principal_attributes == {} };
@id("scalars") permit(principal, action, resource)
when { context.arguments has path && context.arguments has force && context.arguments has n && context.arguments has opts
  && context.arguments.opts has depth && context.arguments.opts.depth has max
  && context.arguments.path == "/a" && context.arguments.force && context.arguments.n == -9223372036854775808 && context.arguments.opts.depth.max == 3 };
@id("nothing-left-out") permit(principal, action, resource) when { context.unrepresentable.isEmpty() };
@id("big-integer") permit(principal, action, resource)
when { context.unrepresentable == ["/big"] };
@id("decimals") permit(principal, action, resource)
when { context.arguments has ratio && context.arguments has max
  && context.arguments.ratio == decimal("0.1234") && context.arguments.max == decimal("922337203685477.5807") };
@id("bad-decimals") permit(principal, action, resource)
when { context.unrepresentable.containsAll(["/fine", "/large", "/tiny", "/huge"]) };
@id("null") permit(principal, action, resource) when { context.unrepresentable == ["/a~1b"] };
@id("sets") permit(principal, action, resource)
when { context.arguments has paths && context.arguments.paths == ["/b", "/a"] && context.arguments.paths.contains("/b") };
@id("bad-array") permit(principal, action, resource)
when { context.unrepresentable == ["/ids"] };
@id("facts") permit(principal, action, resource)
when { context.facts has tool && context.facts.tool has forwarded && context.facts.tool.forwarded has minute
  && context.facts has server && context.facts.server has held && context.facts.server.held has hour
  && context.facts.tool.forwarded.minute == 3 && context.facts.server.held.hour == 12 };
"#;

fn mapping() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| configure(MAPPING).unwrap())
}

/// The mapping permits satisfied by a write with `arguments`.
fn satisfied(arguments: &str, facts: &[(&str, &str)]) -> Vec<String> {
    let policy = mapping();
    let mut c = write(arguments);
    c.facts = facts
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    let answer = policy.answer(&c);
    assert_eq!(answer.decision, Decision::Allow, "{answer:?}");
    answer.determined_by.unwrap()
}

fn has(ids: &[String], id: &str) -> bool {
    ids.iter().any(|i| i == id)
}

#[test]
fn the_request_names_principal_action_tool_inside_its_server_and_its_attributes() {
    let ids = satisfied("{}", &[]);
    for id in ["principal", "action", "tool", "in-server", "attributes"] {
        assert!(has(&ids, id), "{id}: {ids:?}");
    }
    assert!(!has(&ids, "in-other-server"), "{ids:?}");
}

#[test]
fn the_context_holds_the_sha256_session_id_time_and_call_id() {
    assert!(has(&satisfied("{}", &[]), "context"));
}

#[test]
fn a_session_that_has_seen_nothing_and_a_principal_without_attributes_are_empty() {
    let ids = satisfied("{}", &[]);
    assert!(has(&ids, "no-labels"), "{ids:?}");
    assert!(has(&ids, "no-attributes"), "{ids:?}");
}

#[test]
fn strings_booleans_objects_and_integers_within_i64_convert() {
    let ids = satisfied(
        r#"{"path":"/a","force":true,"n":-9223372036854775808,"opts":{"depth":{"max":3}}}"#,
        &[],
    );
    assert!(has(&ids, "scalars"), "{ids:?}");
    assert!(has(&ids, "nothing-left-out"), "{ids:?}");
    // One less than i64's least is not an i64: left out, and `scalars` reads it.
    let answer = mapping().answer(&write(
        r#"{"path":"/a","force":true,"n":-9223372036854775809,"opts":{"depth":{"max":3}}}"#,
    ));
    assert!(deny_reason(&answer).contains("`/n`"), "{answer:?}");
    assert_eq!(self::ids(&answer), ["scalars"]);
}

#[test]
fn an_integer_outside_i64_is_left_out_and_named() {
    assert!(has(
        &satisfied(r#"{"big":9223372036854775808}"#, &[]),
        "big-integer"
    ));
}

#[test]
fn decimals_of_up_to_four_fraction_digits_convert_exactly() {
    let ids = satisfied(r#"{"ratio":0.1234,"max":922337203685477.5807}"#, &[]);
    assert!(has(&ids, "decimals"), "{ids:?}");
}

#[test]
fn decimals_cedar_cannot_hold_are_left_out_and_named() {
    let ids = satisfied(
        r#"{"fine":0.12345,"large":922337203685477.6,"tiny":1e-7,"huge":1e300}"#,
        &[],
    );
    assert!(has(&ids, "bad-decimals"), "{ids:?}");
}

#[test]
fn null_is_left_out_and_named() {
    assert!(has(&satisfied(r#"{"a/b":null}"#, &[]), "null"));
}

#[test]
fn arrays_become_sets() {
    assert!(has(
        &satisfied(r#"{"paths":["/a","/b","/a"]}"#, &[]),
        "sets"
    ));
}

#[test]
fn an_array_holding_an_unrepresentable_value_is_left_out_whole() {
    let ids = satisfied(r#"{"ids":[1,18446744073709551616]}"#, &[]);
    assert!(has(&ids, "bad-array"), "{ids:?}");
}

#[test]
fn facts_become_nested_records_of_longs() {
    let ids = satisfied(
        "{}",
        &[("tool.forwarded.minute", "3"), ("server.held.hour", "12")],
    );
    assert!(has(&ids, "facts"), "{ids:?}");
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
    assert!(
        error.contains("policy `f` is a forbid with `@hold`"),
        "{error}"
    );
}

#[test]
#[cfg(feature = "internals")]
fn a_0_1_0_component_names_nothing() {
    // The example custom policy is a `policy@0.1.0` component.
    let bytes = std::fs::read(crate::guests::CUSTOM_POLICY_WASM).unwrap();
    let loaded = host().load(&bytes, "custom").unwrap();
    assert!(!loaded.exports_policy_v2() && !loaded.exports_policy_v3());
    let policy = host()
        .configure_policy(
            &loaded,
            r#"{"rules":{"decisions":{"local-change":"allow"}},"write_root":"/"}"#,
        )
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
const READ_SCHEMA: &str = r#"{"type":"object","properties":{"path":{"type":"string"}}}"#;

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
            tool("read_file", READ_SCHEMA),
        ])
        .unwrap();
    assert_eq!(problems, Vec::<String>::new());
}

/// Problems of one policy set with four faults, each named by its policy.
fn invalid_problems() -> Vec<String> {
    let policy = configure(
        "permit(principal, action, resource);\n@id(\"wrong\") forbid(principal, action, resource == Toolward::Tool::\"fs/write_file\")\n  when { context.arguments.path > 3 };\n\
         @id(\"ratio\") forbid(principal, action, resource == Toolward::Tool::\"fs/write_file\") when { context.arguments.ratio == 1 };\n\
         @id(\"mode\") forbid(principal, action, resource == Toolward::Tool::\"fs/write_file\") when { context.arguments.mode == 1 };\n\
         @id(\"typo\") forbid(principal, action, resource == Toolward::Tool::\"fs/write_fil\");",
    )
    .unwrap();
    policy
        .validate(&[
            tool("write_file", WRITE_SCHEMA),
            tool("read_file", READ_SCHEMA),
        ])
        .unwrap()
}

fn problem_of<'a>(problems: &'a [String], policy: &str) -> Vec<&'a String> {
    let prefix = format!("policy `{policy}`: ");
    problems.iter().filter(|p| p.starts_with(&prefix)).collect()
}

#[test]
fn validation_names_the_policy_place_and_tool_of_each_error() {
    static PROBLEMS: OnceLock<Vec<String>> = OnceLock::new();
    let problems = PROBLEMS.get_or_init(invalid_problems);
    assert_eq!(problems.len(), 4, "{problems:?}");

    let wrong = problem_of(problems, "wrong");
    assert_eq!(wrong.len(), 1, "{problems:?}");
    assert!(
        wrong[0].starts_with("policy `wrong`: line 3, column"),
        "{}",
        wrong[0]
    );
    assert!(
        wrong[0].ends_with("(for tool `fs/write_file`)"),
        "{}",
        wrong[0]
    );

    // `ratio` (a JSON Schema number) is left out of the type; `mode` (an integer) is
    // optional although `required` lists it, since an integer outside i64 is left out.
    assert_eq!(problem_of(problems, "ratio").len(), 1, "{problems:?}");
    assert_eq!(problem_of(problems, "mode").len(), 1, "{problems:?}");

    assert_eq!(
        problem_of(problems, "typo"),
        [r#"policy `typo`: names `Toolward::Tool::"fs/write_fil"`, which no server registered"#]
    );
}

/// The scopes the component says its policies read (`facts@0.2.0`): the host counts only
/// these, so a policy must never be said to read fewer than it can (`docs/facts.md`).
#[test]
fn the_component_names_exactly_the_fact_scopes_its_policies_read_and_every_scope_when_context_is_used_whole()
 {
    let scopes = |policies: &str| configure(policies).unwrap().fact_scopes().unwrap();
    // Other attributes of `context` read no fact.
    assert!(
        scopes(
            r#"permit(principal, action, resource) when { context.arguments has path && context.time_ms > 0 };"#
        )
        .is_empty()
    );
    // Each spelling of an access names its scope.
    assert_eq!(
        scopes(
            r#"permit(principal, action, resource) when { context.facts.tool.forwarded.minute < 3 };
               forbid(principal, action, resource) when { context["facts"]["server"].held.hour > 9 };
               forbid(principal, action, resource) when { context has facts.principal.forwarded && context.facts has session };"#
        ),
        ["principal", "server", "session", "tool"]
    );
    // `context.facts` or `context` used as a value reads every fact.
    for whole in [
        r#"permit(principal, action, resource) when { context.facts == {} };"#,
        r#"permit(principal, action, resource) unless { context == {"arguments": {}} };"#,
    ] {
        assert_eq!(scopes(whole), ["*"], "{whole}");
        assert_eq!(
            crate::facts::FactScopes::from_names(scopes(whole).iter().map(String::as_str)),
            crate::facts::FactScopes::ALL
        );
    }
}

/// Settings with three levels, reviews, and what two tools return; policies reading the
/// session's labels and the principal's attributes.
fn labelled() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| {
        let rules = r#"{
            "reviews": ["secrets", "hidden-characters"],
            "labels": {"levels": ["public", "internal", "private"]},
            "servers": {"fs": {"tools": {
                "read_file": {"effect": "read-only", "returns": {"confidentiality": "internal", "tags": ["fs"]}},
                "fetch": {"effect": "read-only", "returns": {"untrusted": true, "confidentiality": "public"},
                          "accepts_untrusted": false}
            }}}
        }"#;
        configure(&crate::cedar::settings(LABELLED, Some(rules))).unwrap()
    })
}

const LABELLED: &str = r#"
@id("calls") permit(principal, action, resource);
@id("untrusted-fetch") @hold("this session has seen untrusted content")
permit(principal, action, resource == Toolward::Tool::"fs/fetch") when { context.session.untrusted };
@id("private-fetch") @reason("this session has seen data above internal")
forbid(principal, action, resource == Toolward::Tool::"fs/fetch") when { context.session.confidentiality_rank > 2 };
@id("tagged") @reason("no writes after a read of the file system")
forbid(principal, action, resource == Toolward::Tool::"fs/write_file")
when { context.session.tags.contains("fs") };
@id("admins-only") @reason("only admins delete")
forbid(principal, action, resource == Toolward::Tool::"fs/delete")
unless { context.principal_attributes has groups && context.principal_attributes.groups.contains("admins") };
"#;

fn labels(untrusted: bool, confidentiality: &str, tags: &[&str]) -> crate::component::Labels {
    crate::component::Labels {
        untrusted,
        confidentiality: confidentiality.to_owned(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
    }
}

#[test]
fn a_fetch_is_held_once_the_session_is_untrusted_and_denied_once_its_rank_is_high() {
    let policy = labelled();
    let fetch = |labels: crate::component::Labels| {
        let mut c = call("fetch", Effect::ReadOnly, r#"{"url":"http://127.0.0.1/"}"#);
        c.labels = labels;
        policy.answer(&c)
    };
    for allowed in [
        labels(false, "", &[]),
        labels(false, "public", &[]),
        labels(false, "internal", &["fs"]),
    ] {
        let answer = fetch(allowed.clone());
        assert_eq!(answer.decision, Decision::Allow, "{allowed:?}");
        assert_eq!(ids(&answer), ["calls"]);
    }
    // Untrusted: held.
    let answer = fetch(labels(true, "public", &[]));
    assert_eq!(
        answer.decision,
        Decision::Hold("this session has seen untrusted content".to_owned())
    );
    assert_eq!(ids(&answer), ["untrusted-fetch"]);
    // `private` (rank 3 of the settings' levels), or a level the settings do not name
    // (rank 4, above them all): denied, also when untrusted (a forbid beats a hold).
    for denied in [
        labels(false, "private", &[]),
        labels(false, "top-secret", &[]),
        labels(true, "private", &[]),
    ] {
        let answer = fetch(denied.clone());
        assert_eq!(
            answer.decision,
            Decision::Deny("this session has seen data above internal".to_owned()),
            "{denied:?}"
        );
        assert_eq!(ids(&answer), ["private-fetch"]);
    }
    // The tags reach the policies too.
    let mut write_call = write("{}");
    assert_eq!(policy.answer(&write_call).decision, Decision::Allow);
    write_call.labels = labels(false, "internal", &["fs"]);
    assert_eq!(
        policy.answer(&write_call).decision,
        Decision::Deny("no writes after a read of the file system".to_owned())
    );
}

#[test]
fn principal_attributes_convert_as_arguments_and_a_left_out_one_that_is_read_denies() {
    let policy = labelled();
    let delete = |attributes: &[(&str, &str)]| {
        let mut c = call("delete", Effect::Destructive, "{}");
        c.principal_attributes = attributes
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        policy.answer(&c)
    };
    assert_eq!(
        delete(&[
            ("groups", r#"["staff","admins"]"#),
            ("email", r#""a@example.com""#)
        ])
        .decision,
        Decision::Allow
    );
    assert_eq!(
        delete(&[("groups", r#"["staff"]"#)]).decision,
        Decision::Deny("only admins delete".to_owned())
    );
    assert_eq!(
        delete(&[]).decision,
        Decision::Deny("only admins delete".to_owned())
    );
    // A value Cedar cannot hold, one that is not JSON, or a name given twice is left out;
    // `admins-only` reads it, so the call is denied naming both.
    for attributes in [
        vec![("groups", r#"["admins",null]"#)],
        vec![("groups", "admins")],
        vec![("groups", r#"["admins"]"#), ("groups", r#"["staff"]"#)],
    ] {
        let answer = delete(&attributes);
        let reason = deny_reason(&answer);
        assert!(
            reason.contains("principal attribute `/groups`")
                && reason.contains("policy `admins-only`"),
            "{attributes:?}: {reason}"
        );
        assert_eq!(ids(&answer), ["admins-only"]);
    }
    // An attribute no policy reads does not stop the call.
    assert_eq!(
        delete(&[("groups", r#"["admins"]"#), ("age", "1e400")]).decision,
        Decision::Allow
    );
}

#[test]
fn configure_refuses_a_policy_using_context_session_whole() {
    for policies in [
        r#"@id("old") forbid(principal, action, resource) when { context.session == "s-1" };"#,
        r#"@id("old") permit(principal, action, resource) when { context.session like "s-*" };"#,
    ] {
        let error = configure(policies).unwrap_err().to_string();
        assert!(
            error.contains("policy `old` uses `context.session` whole")
                && error.contains("`context.session_id`"),
            "{error}"
        );
    }
    // Through its attributes, and `has`, it is the labels.
    assert!(
        configure(
            r#"permit(principal, action, resource) when { context has session && context.session has untrusted && !context.session.untrusted };"#
        )
        .is_ok()
    );
}

#[test]
fn validation_types_the_session_and_refuses_a_misspelt_label() {
    let policy = configure(
        r#"@id("labels") forbid(principal, action, resource == Toolward::Tool::"fs/write_file")
           when { context.session.untrusted || context.session.confidentiality_rank > 1
                  || context.session.confidentiality == "private" || context.session.tags.contains("x")
                  || context.session_id == "" };
           @id("typo") forbid(principal, action, resource == Toolward::Tool::"fs/write_file")
           when { context.session.untrustd };
           @id("attribute") forbid(principal, action, resource == Toolward::Tool::"fs/write_file")
           when { context.principal_attributes.groups.contains("x") };"#,
    )
    .unwrap();
    let problems = policy
        .validate(&[tool("write_file", WRITE_SCHEMA)])
        .unwrap();
    assert!(problem_of(&problems, "labels").is_empty(), "{problems:?}");
    assert_eq!(problem_of(&problems, "typo").len(), 1, "{problems:?}");
    // No attribute is typed until an identity provider supplies them.
    assert_eq!(problem_of(&problems, "attribute").len(), 1, "{problems:?}");
}

#[test]
fn the_cedar_component_reviews_results_redacting_a_token_and_labelling_as_the_settings_say() {
    let policy = labelled();
    assert_eq!(
        policy.reviews(),
        &crate::component::ReviewSettings {
            reviews: vec![
                "secrets".into(),
                "hidden-characters".into(),
                "labels".into()
            ],
            levels: vec!["public".into(), "internal".into(), "private".into()],
        }
    );
    let token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let text = format!("config: {token}");
    let view = crate::component::ResultView::of(
        &[serde_json::json!({"type": "text", "text": text})],
        None,
        false,
        0,
    );
    let answer = policy.review(&call("read_file", Effect::ReadOnly, "{}"), &view);
    assert_eq!(
        answer.action,
        crate::component::ResultAction::Redact(vec![crate::component::Span {
            block: 0,
            start: 8,
            end: 48,
            kind: "secret:github-pat".to_owned(),
        }])
    );
    // `internal` from the tool's `returns`, raised to the highest level by the secret.
    assert_eq!(answer.labels, labels(false, "private", &["fs"]));
    assert_eq!(answer.determined_by, ["labels", "secrets"]);

    // A result with nothing to redact passes, labelled as its tool returns.
    let view = crate::component::ResultView::of(
        &[serde_json::json!({"type": "text", "text": "a page"})],
        None,
        false,
        0,
    );
    let answer = policy.review(&call("fetch", Effect::ReadOnly, "{}"), &view);
    assert_eq!(answer.action, crate::component::ResultAction::Pass);
    assert_eq!(answer.labels, labels(true, "public", &[]));
    assert_eq!(answer.determined_by, ["labels"]);
}

#[test]
fn policies_alone_review_nothing_and_settings_name_their_faults() {
    // The `.cedar` text alone: no review, so the host copies no result into the component.
    assert_eq!(
        outcomes().reviews(),
        &crate::component::ReviewSettings {
            reviews: Vec::new(),
            levels: vec!["public".into(), "private".into()],
        }
    );
    for (settings, fault) in [
        (r#"{"reviews": ["secrets"]}"#, "no `cedar` string"),
        (
            r#"{"cedar": "permit(principal, action, resource);", "reviews": ["entropy"]}"#,
            "reviews[0]: unknown review",
        ),
        (
            r#"{"cedar": "permit(principal, action, resource);", "decisions": {}}"#,
            "decisions: unknown key",
        ),
        (
            r#"{"cedar": "permit(principal, action resource);"}"#,
            "line 1, column",
        ),
        ("{", "not valid JSON"),
    ] {
        let error = configure(settings).unwrap_err().to_string();
        assert!(error.contains(fault), "{settings}: {error}");
    }
}

#[test]
fn the_host_gives_the_cedar_component_the_rules_results_members_only_when_there_are_any() {
    let policies = "permit(principal, action, resource);";
    assert_eq!(crate::cedar::settings(policies, None), policies);
    assert_eq!(
        crate::cedar::settings(
            policies,
            Some(
                r#"{"decisions": {"local-change": "allow"}, "servers": {"fs": {"tools": {"read": {"effect": "read-only"}}}}}"#
            )
        ),
        policies
    );
    let settings: serde_json::Value = serde_json::from_str(&crate::cedar::settings(
        policies,
        Some(
            r#"{"decisions": {}, "reviews": ["secrets"], "labels": {"levels": ["public", "private"]},
                "servers": {"fs": {"limits": {}, "tools": {
                    "read": {"effect": "read-only", "returns": {"confidentiality": "private"}, "accepts_untrusted": false},
                    "write": {"effect": "local-change"}}},
                "web": {"tools": {"get": {"effect": "read-only"}}}}}"#,
        ),
    ))
    .unwrap();
    assert_eq!(
        settings,
        serde_json::json!({
            "cedar": policies,
            "reviews": ["secrets"],
            "labels": {"levels": ["public", "private"]},
            "servers": {"fs": {"tools": {"read": {"returns": {"confidentiality": "private"}}}}}
        })
    );
}
