use super::*;
use crate::canonical::parse;
use proptest::prelude::*;

fn schema(text: &str) -> Value {
    parse(text.as_bytes()).unwrap()
}

/// server-filesystem's `edit_file` `inputSchema`, as the server sends it.
const EDIT_FILE: &str = r#"{"type":"object","properties":{"path":{"type":"string"},"edits":{"type":"array","items":{"type":"object","properties":{"oldText":{"type":"string","description":"Text to search for - must match exactly"},"newText":{"type":"string","description":"Text to replace with"}},"required":["oldText","newText"],"additionalProperties":false}},"dryRun":{"type":"boolean","default":false,"description":"Preview changes using git-style diff format"}},"required":["path","edits"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}"#;

fn refusal(text: &str) -> SchemaRefusal {
    check_input_schema(&schema(text)).unwrap_err()
}

fn narrow_refusal(text: &str, hidden: &[&str]) -> SchemaRefusal {
    narrow(&schema(text), hidden).unwrap_err()
}

// --- dialect and root --------------------------------------------------------------------

#[test]
fn edit_file_schema_passes_as_draft07() {
    assert_eq!(check_input_schema(&schema(EDIT_FILE)), Ok(Dialect::Draft7));
}

#[test]
fn absent_dialect_means_2020_12() {
    let s = schema(r#"{"type":"object","properties":{"q":{"type":"string"}}}"#);
    assert_eq!(check_input_schema(&s), Ok(Dialect::Draft202012));
    assert_eq!(Dialect::of(&s), Ok(Dialect::DEFAULT));
}

#[test]
fn known_dialect_uris_are_recognised_with_or_without_trailing_hash() {
    for (uri, dialect) in [
        ("http://json-schema.org/draft-07/schema#", Dialect::Draft7),
        ("http://json-schema.org/draft-07/schema", Dialect::Draft7),
        (
            "https://json-schema.org/draft/2019-09/schema",
            Dialect::Draft201909,
        ),
        (
            "https://json-schema.org/draft/2019-09/schema#",
            Dialect::Draft201909,
        ),
        (
            "https://json-schema.org/draft/2020-12/schema",
            Dialect::Draft202012,
        ),
        (
            "https://json-schema.org/draft/2020-12/schema#",
            Dialect::Draft202012,
        ),
    ] {
        let s = schema(&format!(r#"{{"$schema":"{uri}","type":"object"}}"#));
        assert_eq!(check_input_schema(&s), Ok(dialect), "{uri}");
        assert_eq!(Dialect::from_uri(dialect.meta_schema_uri()), Some(dialect));
    }
}

#[test]
fn unknown_dialect_refuses() {
    for uri in [
        "http://json-schema.org/draft-04/schema#",
        "https://json-schema.org/schema",
        "https://evil.example/meta.json",
        "",
    ] {
        let r = refusal(&format!(r#"{{"$schema":"{uri}","type":"object"}}"#));
        assert!(
            matches!(r, SchemaRefusal::UnknownDialect { .. }),
            "{uri}: {r:?}"
        );
        assert_eq!(r.pointer(), "/$schema");
    }
}

#[test]
fn unknown_dialect_in_a_subschema_refuses() {
    let r = refusal(
        r#"{"type":"object","properties":{"a":{"$schema":"https://evil.example/meta","type":"string"}}}"#,
    );
    assert!(matches!(r, SchemaRefusal::UnknownDialect { .. }), "{r:?}");
    assert_eq!(r.pointer(), "/properties/a/$schema");
}

#[test]
fn boolean_root_is_refused() {
    for text in ["true", "false"] {
        let r = refusal(text);
        assert!(matches!(r, SchemaRefusal::RootNotObject { .. }), "{r:?}");
        assert_eq!(r.pointer(), "");
        assert_eq!(
            r.to_string(),
            "the schema root is a boolean schema, not an object schema"
        );
    }
}

#[test]
fn non_object_root_is_refused() {
    for text in ["null", "1", r#""object""#, "[]"] {
        assert!(
            matches!(refusal(text), SchemaRefusal::RootNotObject { .. }),
            "{text}"
        );
    }
}

#[test]
fn root_without_type_object_is_refused() {
    let r = refusal(r#"{"properties":{"a":{}}}"#);
    assert!(
        matches!(r, SchemaRefusal::RootTypeNotObject { .. }),
        "{r:?}"
    );
    assert_eq!(r.pointer(), "");
    let r = refusal(r#"{"type":"string"}"#);
    assert_eq!(r.pointer(), "/type");
    assert_eq!(
        r.to_string(),
        "the schema root has `type` `string` where `type` `object` is required"
    );
    let r = refusal(r#"{"type":["object","null"]}"#);
    assert!(
        matches!(r, SchemaRefusal::RootTypeNotObject { .. }),
        "{r:?}"
    );
}

#[test]
fn boolean_subschemas_are_legal_inside() {
    let s = schema(
        r#"{"type":"object","properties":{"any":true,"never":false},"additionalProperties":false,
            "items":true,"allOf":[true]}"#,
    );
    assert_eq!(check_input_schema(&s), Ok(Dialect::Draft202012));
}

#[test]
fn malformed_subschema_keywords_refuse() {
    let r = refusal(r#"{"type":"object","allOf":{"type":"object"}}"#);
    assert!(matches!(r, SchemaRefusal::Malformed { .. }), "{r:?}");
    assert_eq!(r.pointer(), "/allOf");
    let r = refusal(r#"{"type":"object","properties":{"a":5}}"#);
    assert!(matches!(r, SchemaRefusal::NotASchema { .. }), "{r:?}");
    assert_eq!(r.pointer(), "/properties/a");
    let r = refusal(r#"{"type":"object","properties":{"a":{"$ref":7}}}"#);
    assert_eq!(r.pointer(), "/properties/a/$ref");
}

// --- depth ---------------------------------------------------------------------------------

/// A schema whose innermost `{}` sits at JSON depth `1 + 2 * levels` (one `properties`
/// nesting costs two levels).
fn nested(levels: usize) -> String {
    let mut text = String::from("{}");
    for _ in 0..levels {
        text = format!(r#"{{"properties":{{"a":{text}}}}}"#);
    }
    format!(r#"{{"type":"object","properties":{{"a":{text}}}}}"#)
}

#[test]
fn nesting_past_depth_bound_refuses() {
    // Innermost `{}` at depth 2 + 2 * 32 = 66 > 64; the first place past 64 is at 65.
    let r = refusal(&nested(32));
    assert_eq!(
        r,
        SchemaRefusal::TooDeep {
            pointer: r.pointer().to_owned(),
            depth: MAX_SCHEMA_DEPTH + 1,
            limit: MAX_SCHEMA_DEPTH
        }
    );
    assert_eq!(r.pointer().split('/').count() - 1, MAX_SCHEMA_DEPTH + 1);
    assert!(r.pointer().starts_with("/properties/a/properties/a"));
    let message = r.to_string();
    assert!(
        message.starts_with("schema nests 65 levels deep at `/properties/a/"),
        "{message}"
    );
    assert!(message.ends_with("`, past the limit of 64"), "{message}");
}

#[test]
fn nesting_at_depth_bound_passes() {
    // Innermost `{}` at depth 2 + 2 * 31 = 64.
    assert!(check_input_schema(&schema(&nested(31))).is_ok());
}

// --- references ----------------------------------------------------------------------------

#[test]
fn ref_to_http_is_refused_before_anything_is_fetched() {
    // The host does not resolve; the check is purely on the text, so an unroutable address
    // proves nothing is fetched (the test would hang or fail otherwise).
    let r = refusal(r#"{"type":"object","properties":{"a":{"$ref":"http://evil/x.json"}}}"#);
    assert_eq!(r.pointer(), "/properties/a");
    assert_eq!(
        r.to_string(),
        "`$ref` `http://evil/x.json` at `/properties/a` refers outside the schema"
    );
}

#[test]
fn refs_to_files_urns_and_relative_paths_are_refused() {
    for reference in [
        "https://example.com/s.json#/defs/a",
        "file:///etc/passwd",
        "urn:uuid:deadbeef-1234-5678-9abc-def012345678",
        "other.json",
        "./other.json#/a",
        "//evil.example/x",
        "",
        " #/properties/b",
    ] {
        let r = refusal(&format!(
            r#"{{"type":"object","properties":{{"a":{{"$ref":"{reference}"}},"b":{{}}}}}}"#
        ));
        assert!(
            matches!(r, SchemaRefusal::ExternalRef { .. }),
            "{reference}: {r:?}"
        );
    }
}

#[test]
fn dangling_local_ref_is_refused() {
    let r =
        refusal(r##"{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}},"$defs":{}}"##);
    assert!(matches!(r, SchemaRefusal::DanglingRef { .. }), "{r:?}");
    assert_eq!(r.pointer(), "/properties/a");
    let r = refusal(r##"{"type":"object","properties":{"a":{"$ref":"#nowhere"}}}"##);
    assert!(matches!(r, SchemaRefusal::DanglingRef { .. }), "{r:?}");
}

#[test]
fn ref_into_a_value_that_is_not_a_subschema_is_refused() {
    // `default` holds data, not a schema; an unknown keyword is not walked either.
    for target in [
        "#/properties/a/default",
        "#/x-extra",
        "#/properties/a/default/$ref",
    ] {
        let r = refusal(&format!(
            r#"{{"type":"object","x-extra":{{"$ref":"http://evil/"}},"properties":{{"a":{{"default":{{"$ref":"http://evil/"}}}},"b":{{"$ref":"{target}"}}}}}}"#
        ));
        assert!(
            matches!(r, SchemaRefusal::DanglingRef { .. }),
            "{target}: {r:?}"
        );
    }
}

#[test]
fn recursive_local_refs_are_legal() {
    let s = schema(
        r##"{"type":"object","properties":{"tree":{"$ref":"#/$defs/node"},"self":{"$ref":"#"}},
            "$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}"##,
    );
    assert_eq!(check_input_schema(&s), Ok(Dialect::Draft202012));
}

#[test]
fn escaped_and_percent_encoded_pointer_refs_resolve() {
    let s = schema(
        r##"{"type":"object","$defs":{"a/b":{"type":"string"},"c~d":{"type":"string"},"e f":{"type":"string"},"é":{}},
            "properties":{"x":{"$ref":"#/$defs/a~1b"},"y":{"$ref":"#/$defs/c~0d"},"z":{"$ref":"#/$defs/e%20f"},"w":{"$ref":"#/$defs/%C3%A9"}}}"##,
    );
    assert!(check_input_schema(&s).is_ok());
    for bad in ["#/$defs/a~2b", "#/$defs/e%2", "#/$defs/%FF"] {
        let r = refusal(&format!(
            r#"{{"type":"object","$defs":{{"a":{{}}}},"properties":{{"x":{{"$ref":"{bad}"}}}}}}"#
        ));
        assert!(
            matches!(r, SchemaRefusal::DanglingRef { .. }),
            "{bad}: {r:?}"
        );
    }
}

#[test]
fn anchors_resolve_by_dialect() {
    let s = schema(
        r##"{"type":"object","$defs":{"n":{"$anchor":"name","type":"string"}},"properties":{"a":{"$ref":"#name"}}}"##,
    );
    assert!(check_input_schema(&s).is_ok());
    let s = schema(
        r##"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"n":{"$id":"#name","type":"string"}},"properties":{"a":{"$ref":"#name"}}}"##,
    );
    assert_eq!(check_input_schema(&s), Ok(Dialect::Draft7));
    // `$anchor` is not a keyword of draft-07.
    let r = refusal(
        r##"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"n":{"$anchor":"name"}},"properties":{"a":{"$ref":"#name"}}}"##,
    );
    assert!(matches!(r, SchemaRefusal::DanglingRef { .. }), "{r:?}");
}

#[test]
fn dynamic_and_recursive_refs_are_checked() {
    let s = schema(
        r##"{"type":"object","$dynamicAnchor":"node","properties":{"kids":{"type":"array","items":{"$dynamicRef":"#node"}}}}"##,
    );
    assert!(check_input_schema(&s).is_ok());
    let r =
        refusal(r#"{"type":"object","properties":{"a":{"$dynamicRef":"https://evil/x#node"}}}"#);
    assert!(
        matches!(
            r,
            SchemaRefusal::ExternalRef {
                keyword: "$dynamicRef",
                ..
            }
        ),
        "{r:?}"
    );
    let s = schema(
        r##"{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object","$recursiveAnchor":true,"properties":{"a":{"$recursiveRef":"#"}}}"##,
    );
    assert_eq!(check_input_schema(&s), Ok(Dialect::Draft201909));
}

#[test]
fn relative_ref_made_external_by_id_is_refused() {
    let r =
        refusal(r#"{"type":"object","properties":{"a":{"$id":"http://x/y","$ref":"other.json"}}}"#);
    assert!(matches!(r, SchemaRefusal::ExternalRef { .. }), "{r:?}");
    assert_eq!(r.pointer(), "/properties/a");
}

#[test]
fn local_ref_inside_an_embedded_resource_is_refused() {
    // `#/$defs/b` here means `http://x/y#/$defs/b`, not the document's `$defs`.
    let r = refusal(
        r##"{"type":"object","$defs":{"b":{}},"properties":{"a":{"$id":"http://x/y","properties":{"c":{"$ref":"#/$defs/b"}}}}}"##,
    );
    assert!(matches!(r, SchemaRefusal::RefUnderId { .. }), "{r:?}");
    assert_eq!(r.pointer(), "/properties/a/properties/c");
    assert_eq!(
        r.to_string(),
        "`$ref` `#/$defs/b` at `/properties/a/properties/c` resolves against `$id` `http://x/y` at `/properties/a`, not against the schema document"
    );
    // A relative `$id` changes the base just as well.
    let r = refusal(r##"{"type":"object","properties":{"a":{"$id":"sub.json","$ref":"#"}}}"##);
    assert!(matches!(r, SchemaRefusal::RefUnderId { .. }), "{r:?}");
}

#[test]
fn root_id_and_fragment_ids_keep_local_refs_local() {
    let s = schema(
        r##"{"$id":"https://example.com/tool.json","type":"object","$defs":{"b":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/b"}}}"##,
    );
    assert!(check_input_schema(&s).is_ok());
    let s = schema(
        r##"{"$schema":"http://json-schema.org/draft-07/schema","type":"object","properties":{"a":{"$id":"#a","properties":{"c":{"$ref":"#/properties/b"}}},"b":{}}}"##,
    );
    assert!(check_input_schema(&s).is_ok());
}

#[test]
fn draft07_items_array_and_dependencies() {
    let s = schema(
        r##"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
            "properties":{"pair":{"type":"array","items":[{"type":"string"},{"$ref":"#/definitions/n"}],"additionalItems":false},
                          "from":{"type":"string"},"to":{"type":"string"}},
            "dependencies":{"from":["to"],"to":{"required":["from"]}},
            "definitions":{"n":{"type":"number"}}}"##,
    );
    assert_eq!(check_input_schema(&s), Ok(Dialect::Draft7));
    // A reference inside a tuple `items` entry is checked like any other.
    let r = refusal(
        r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"pair":{"items":[{},{"$ref":"x.json"}]}}}"#,
    );
    assert_eq!(r.pointer(), "/properties/pair/items/1");
    // So is one inside a schema-valued dependency.
    let r = refusal(r#"{"type":"object","dependencies":{"a":{"$ref":"x.json"}}}"#);
    assert_eq!(r.pointer(), "/dependencies/a");
}

#[test]
fn output_schema_gets_the_same_reference_and_dialect_checks() {
    let ok = schema(
        r#"{"type":"object","properties":{"content":{"type":"string"}},"required":["content"]}"#,
    );
    assert_eq!(check_output_schema(&ok), Ok(Dialect::Draft202012));
    let r = check_output_schema(&schema(
        r#"{"type":"object","properties":{"a":{"$ref":"https://evil/"}}}"#,
    ))
    .unwrap_err();
    assert!(matches!(r, SchemaRefusal::ExternalRef { .. }), "{r:?}");
    let r = check_output_schema(&schema(r#"{"type":"array"}"#)).unwrap_err();
    assert!(
        matches!(r, SchemaRefusal::RootTypeNotObject { .. }),
        "{r:?}"
    );
    let r = check_output_schema(&schema(r#"{"$schema":"x","type":"object"}"#)).unwrap_err();
    assert!(matches!(r, SchemaRefusal::UnknownDialect { .. }), "{r:?}");
}

// --- narrowing -----------------------------------------------------------------------------

#[test]
fn denied_parameter_disappears_from_properties_and_required() {
    let narrowed = narrow(&schema(EDIT_FILE), &["path"]).unwrap();
    assert_eq!(parameter_names(&narrowed), ["dryRun", "edits"]);
    assert_eq!(narrowed.get("required"), Some(&schema(r#"["edits"]"#)));
    // Nothing else changes: the nested `oldText`/`newText` and the dialect stay.
    assert_eq!(
        changed_pointers(&schema(EDIT_FILE), &narrowed),
        ["/properties/path", "/required/0", "/required/1"]
    );
    assert_eq!(check_input_schema(&narrowed), Ok(Dialect::Draft7));
}

#[test]
fn fixed_and_denied_parameters_together_and_an_emptied_required_is_dropped() {
    let narrowed = narrow(&schema(EDIT_FILE), &["path", "edits", "path"]).unwrap();
    assert_eq!(parameter_names(&narrowed), ["dryRun"]);
    assert_eq!(narrowed.get("required"), None);
}

#[test]
fn narrowing_nothing_returns_the_schema_unchanged() {
    let s = schema(EDIT_FILE);
    assert_eq!(narrow(&s, &[]), Ok(s));
}

#[test]
fn narrowing_checks_the_schema_first() {
    let r = narrow_refusal(
        r#"{"type":"object","properties":{"a":{"$ref":"http://evil/"}}}"#,
        &[],
    );
    assert!(matches!(r, SchemaRefusal::ExternalRef { .. }), "{r:?}");
}

#[test]
fn hidden_name_that_is_not_a_property_refuses() {
    let r = narrow_refusal(EDIT_FILE, &["recursive"]);
    assert_eq!(
        r,
        SchemaRefusal::HiddenNotAProperty {
            pointer: "/properties".into(),
            name: "recursive".into()
        }
    );
    assert_eq!(
        r.to_string(),
        "hidden parameter `recursive` is not a property of the schema"
    );
}

#[test]
fn hidden_name_in_anyof_refuses_the_tool() {
    let text = r#"{"type":"object","properties":{"path":{"type":"string"},"paths":{"type":"array"}},
        "anyOf":[{"required":["path"]},{"required":["paths"]}]}"#;
    let r = narrow_refusal(text, &["path"]);
    assert_eq!(
        r,
        SchemaRefusal::HiddenMentioned {
            pointer: "/anyOf/0/required/0".into(),
            name: "path".into(),
            keyword: "required"
        }
    );
    assert_eq!(
        r.to_string(),
        "hidden parameter `path` is mentioned by `required` at `/anyOf/0/required/0`"
    );
    // Hiding the other parameter is refused too, and hiding neither is fine.
    assert_eq!(
        narrow_refusal(text, &["paths"]).pointer(),
        "/anyOf/1/required/0"
    );
    assert!(narrow(&schema(text), &[]).is_ok());
}

#[test]
fn hidden_name_in_allof_oneof_and_not_refuses_the_tool() {
    for (combinator, pointer) in [
        (
            r#""allOf":[{"properties":{"mode":{"const":"x"}}}]"#,
            "/allOf/0/properties/mode",
        ),
        (
            r#""oneOf":[{"required":["mode"]},{}]"#,
            "/oneOf/0/required/0",
        ),
        (r#""not":{"required":["mode"]}"#, "/not/required/0"),
    ] {
        let text =
            format!(r#"{{"type":"object","properties":{{"mode":{{}},"q":{{}}}},{combinator}}}"#);
        assert_eq!(
            narrow_refusal(&text, &["mode"]).pointer(),
            pointer,
            "{combinator}"
        );
    }
}

#[test]
fn hidden_name_in_if_then_else_refuses_the_tool() {
    let text = r#"{"type":"object","properties":{"mode":{"enum":["fast","safe"]},"backup":{"type":"boolean"}},
        "if":{"properties":{"mode":{"const":"safe"}}},"then":{"required":["backup"]}}"#;
    assert_eq!(
        narrow_refusal(text, &["mode"]).pointer(),
        "/if/properties/mode"
    );
    assert_eq!(
        narrow_refusal(text, &["backup"]).pointer(),
        "/then/required/0"
    );
}

#[test]
fn hidden_name_in_dependent_keywords_refuses_the_tool() {
    let text = r#"{"type":"object","properties":{"user":{},"password":{},"token":{}},
        "dependentRequired":{"user":["password"]},"dependentSchemas":{"token":{"required":["user"]}}}"#;
    assert_eq!(
        narrow_refusal(text, &["user"]).pointer(),
        "/dependentRequired/user"
    );
    assert_eq!(
        narrow_refusal(text, &["password"]).pointer(),
        "/dependentRequired/user/0"
    );
    assert_eq!(
        narrow_refusal(text, &["token"]).pointer(),
        "/dependentSchemas/token"
    );
}

#[test]
fn hidden_name_in_draft07_dependencies_refuses_the_tool() {
    let text = r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
        "properties":{"from":{},"to":{},"via":{}},"dependencies":{"from":["to"],"via":{"required":["from"]}}}"#;
    assert_eq!(
        narrow_refusal(text, &["to"]).pointer(),
        "/dependencies/from/0"
    );
    let r = narrow_refusal(text, &["via"]);
    assert_eq!(r.pointer(), "/dependencies/via");
    assert!(
        matches!(
            r,
            SchemaRefusal::HiddenMentioned {
                keyword: "dependencies",
                ..
            }
        ),
        "{r:?}"
    );
}

#[test]
fn hidden_name_in_definitions_refuses_the_tool() {
    let text = r##"{"type":"object","properties":{"path":{"type":"string"},"opts":{"$ref":"#/$defs/Opts"}},
        "$defs":{"Opts":{"type":"object","properties":{"path":{"type":"string"}}}}}"##;
    let r = narrow_refusal(text, &["path"]);
    assert_eq!(r.pointer(), "/$defs/Opts/properties/path");
    let text = r##"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"path":{}},
        "definitions":{"Base":{"required":["path"]}},"allOf":[{"$ref":"#/definitions/Base"}]}"##;
    assert_eq!(
        narrow_refusal(text, &["path"]).pointer(),
        "/definitions/Base/required/0"
    );
}

#[test]
fn hidden_name_reached_through_a_root_level_ref_refuses_the_tool() {
    // The target is not a definition: only following the `$ref` finds the mention.
    let text = r##"{"type":"object","properties":{"path":{},"shape":{"x-doc":1,"required":["path"]}},
        "allOf":[{"$ref":"#/properties/shape"}]}"##;
    assert_eq!(
        narrow_refusal(text, &["path"]).pointer(),
        "/properties/shape/required/0"
    );
}

#[test]
fn pattern_properties_or_property_names_at_the_root_refuse_when_a_name_is_hidden() {
    let text =
        r#"{"type":"object","properties":{"path":{},"q":{}},"patternProperties":{"^x-":{}}}"#;
    let r = narrow_refusal(text, &["path"]);
    assert_eq!(r.pointer(), "/patternProperties");
    assert!(matches!(r, SchemaRefusal::HiddenMayMatch { .. }), "{r:?}");
    assert!(narrow(&schema(text), &[]).is_ok());
    let text =
        r#"{"type":"object","properties":{"path":{}},"allOf":[{"propertyNames":{"maxLength":8}}]}"#;
    assert_eq!(
        narrow_refusal(text, &["path"]).pointer(),
        "/allOf/0/propertyNames"
    );
    // Below the root they constrain nested objects, not parameters.
    let text = r#"{"type":"object","properties":{"path":{},"env":{"type":"object","patternProperties":{"^[A-Z_]+$":{"type":"string"}}}}}"#;
    assert_eq!(
        parameter_names(&narrow(&schema(text), &["path"]).unwrap()),
        ["env"]
    );
}

#[test]
fn hidden_name_in_root_default_or_examples_refuses_the_tool() {
    let text = r#"{"type":"object","properties":{"path":{},"q":{}},"examples":[{"q":"a"},{"path":"/etc","q":"b"}]}"#;
    assert_eq!(
        narrow_refusal(text, &["path"]).pointer(),
        "/examples/1/path"
    );
    let text = r#"{"type":"object","properties":{"path":{},"q":{}},"default":{"path":"/"}}"#;
    assert_eq!(narrow_refusal(text, &["path"]).pointer(), "/default/path");
}

#[test]
fn ref_to_the_root_or_into_a_hidden_parameter_refuses_narrowing() {
    let text =
        r##"{"type":"object","properties":{"path":{"type":"string"},"child":{"$ref":"#"}}}"##;
    let r = narrow_refusal(text, &["path"]);
    assert!(matches!(r, SchemaRefusal::RefIntoNarrowed { .. }), "{r:?}");
    assert_eq!(r.pointer(), "/properties/child");
    let text = r##"{"type":"object","properties":{"path":{"type":"string"},"also":{"$ref":"#/properties/path"}}}"##;
    let r = narrow_refusal(text, &["path"]);
    assert!(matches!(r, SchemaRefusal::RefIntoNarrowed { .. }), "{r:?}");
    // A reference to a sibling whose name merely starts with the hidden one is fine.
    let text = r##"{"type":"object","properties":{"path":{},"paths":{},"also":{"$ref":"#/properties/paths"}}}"##;
    assert!(narrow(&schema(text), &["path"]).is_ok());
}

#[test]
fn nested_property_of_the_same_name_outside_definitions_and_combinators_is_fine() {
    let narrowed = narrow(&schema(EDIT_FILE), &["dryRun"]).unwrap();
    assert_eq!(parameter_names(&narrowed), ["edits", "path"]);
    let text = r#"{"type":"object","properties":{"path":{},"file":{"type":"object","properties":{"path":{}},"required":["path"]}}}"#;
    assert_eq!(
        parameter_names(&narrow(&schema(text), &["path"]).unwrap()),
        ["file"]
    );
}

#[test]
fn root_allowing_additional_properties_still_narrows() {
    // The call path refuses a hidden name by name; narrowing need not refuse.
    let text = r#"{"type":"object","properties":{"path":{},"q":{}},"required":["q"]}"#;
    let narrowed = narrow(&schema(text), &["path"]).unwrap();
    assert_eq!(
        narrowed,
        schema(r#"{"type":"object","properties":{"q":{}},"required":["q"]}"#)
    );
}

#[test]
fn parameter_names_lists_root_properties() {
    assert_eq!(
        parameter_names(&schema(EDIT_FILE)),
        ["dryRun", "edits", "path"]
    );
    assert!(parameter_names(&schema("true")).is_empty());
    assert!(parameter_names(&schema(r#"{"type":"object"}"#)).is_empty());
}

// --- changed pointers ----------------------------------------------------------------------

#[test]
fn changed_pointers_reports_the_deepest_differences() {
    let a = schema(
        r#"{"type":"object","properties":{"n":{"maximum":9007199254740993},"a/b":{}},"required":["n"]}"#,
    );
    let b = schema(
        r#"{"type":"object","properties":{"n":{"maximum":9007199254740992,"minimum":0},"c~d":{}},"required":["n","m"]}"#,
    );
    assert_eq!(
        changed_pointers(&a, &b),
        [
            "/properties/a~1b",
            "/properties/c~0d",
            "/properties/n/maximum",
            "/properties/n/minimum",
            "/required/1"
        ]
    );
    assert_eq!(changed_pointers(&b, &a).len(), 5);
    assert!(changed_pointers(&a, &a).is_empty());
    assert_eq!(changed_pointers(&schema("true"), &a), [""]);
    assert_eq!(
        changed_pointers(&schema(r#"{"a":[1]}"#), &schema(r#"{"a":{"0":1}}"#)),
        ["/a"]
    );
}

#[test]
fn changed_pointers_is_safe_on_deep_documents() {
    let mut a = Value::Null;
    let mut b = Value::Bool(true);
    for _ in 0..10_000 {
        a = Value::Array(vec![a]);
        b = Value::Array(vec![b]);
    }
    let changed = changed_pointers(&a, &b);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].len(), 2 * 10_000);
    // Drop the deep values without recursion.
    for mut v in [a, b] {
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or(Value::Null);
        }
    }
}

// --- messages ------------------------------------------------------------------------------

#[test]
fn messages_are_lowercase_one_line_without_trailing_period() {
    let cases = [
        refusal("true"),
        refusal(r#"{"type":"string"}"#),
        refusal(r#"{"$schema":"x","type":"object"}"#),
        refusal(r#"{"type":"object","allOf":{}}"#),
        refusal(r#"{"type":"object","properties":{"a":1}}"#),
        refusal(r#"{"type":"object","properties":{"a":{"$ref":"x.json"}}}"#),
        refusal(r##"{"type":"object","properties":{"a":{"$ref":"#/nope"}}}"##),
        refusal(&nested(40)),
        narrow_refusal(EDIT_FILE, &["nope"]),
        narrow_refusal(
            r#"{"type":"object","properties":{"a":{}},"patternProperties":{"x":{}}}"#,
            &["a"],
        ),
    ];
    for refusal in cases {
        let message = refusal.to_string();
        let first = message.chars().next().unwrap();
        assert!(!first.is_uppercase(), "{message}");
        assert!(!message.ends_with('.'), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }
}

// --- properties ----------------------------------------------------------------------------

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| parse(n.to_string().as_bytes()).unwrap()),
        "[a-c/~]{0,3}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c/~]{0,3}", inner, 0..4)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn changed_pointers_is_empty_exactly_for_equal_documents(a in json_value(), b in json_value()) {
        prop_assert!(changed_pointers(&a, &a).is_empty());
        prop_assert_eq!(changed_pointers(&a, &b).is_empty(), a == b);
        // Every reported place exists in at least one of the documents.
        for pointer in changed_pointers(&a, &b) {
            prop_assert!(a.pointer(&pointer).is_some() || b.pointer(&pointer).is_some(), "{}", pointer);
        }
    }

    #[test]
    fn narrowing_removes_exactly_the_hidden_parameters(
        names in prop::collection::btree_set("[a-e]{1,2}", 1..6),
        picks in prop::collection::vec(any::<(bool, bool)>(), 6),
    ) {
        let names: Vec<String> = names.into_iter().collect();
        let mut required = Vec::new();
        let mut hidden = Vec::new();
        for (name, (is_required, is_hidden)) in names.iter().zip(&picks) {
            if *is_required { required.push(Value::String(name.clone())); }
            if *is_hidden { hidden.push(name.as_str()); }
        }
        let properties = names.iter().map(|n| (n.clone(), Value::Object(vec![]))).collect();
        let mut root = vec![("properties".to_owned(), Value::Object(properties))];
        if !required.is_empty() { root.push(("required".to_owned(), Value::Array(required.clone()))); }
        root.push(("type".to_owned(), Value::String("object".to_owned())));
        let s = Value::Object(root);
        let narrowed = narrow(&s, &hidden).unwrap();
        let kept: Vec<&str> = names.iter().map(String::as_str).filter(|n| !hidden.contains(n)).collect();
        prop_assert_eq!(parameter_names(&narrowed), kept);
        let kept_required: Vec<Value> = required.into_iter()
            .filter(|r| !matches!(r, Value::String(n) if hidden.contains(&n.as_str()))).collect();
        let expected = if kept_required.is_empty() { None } else { Some(Value::Array(kept_required)) };
        prop_assert_eq!(narrowed.get("required").cloned(), expected);
    }
}
