//! The manifest's text form, its reading rules and its diff.

use super::*;

const HASH_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const HASH_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// A pinned tool with `description` and the schema text `schema`, hashes computed.
fn tool(description: &str, schema: &str) -> PinnedTool {
    let input_schema = canonical::parse(schema.as_bytes()).unwrap();
    PinnedTool {
        description: description.to_owned(),
        description_sha256: canonical::sha256_hex(description.as_bytes()),
        input_schema_sha256: canonical::sha256_hex(
            canonical::to_canonical(&input_schema).as_bytes(),
        ),
        input_schema,
        output_schema_sha256: None,
        annotations: None,
    }
}

fn server(tools: Vec<(&str, PinnedTool)>) -> PinnedServer {
    PinnedServer {
        server_name: String::from("example-server"),
        server_version: String::from("1.0.0"),
        protocol_version: String::from("2025-06-18"),
        tools: tools
            .into_iter()
            .map(|(name, tool)| (name.to_owned(), tool))
            .collect(),
        refused: BTreeMap::new(),
    }
}

fn sample() -> Manifest {
    let mut read = tool(
        "Read a file.\nReturns its text.",
        r#"{"type":"object","properties":{"path":{"type":"string","maxLength":9007199254740993},"n":{"type":"number","maximum":1e400,"minimum":-18446744073709551616.5}},"required":["path"]}"#,
    );
    read.annotations = Some(canonical::parse(br#"{"readOnlyHint":true,"title":"Read"}"#).unwrap());
    read.output_schema_sha256 = Some(HASH_B.to_owned());
    let write = tool(
        "Write \"a\" file\\ with a tab\there",
        r#"{"type":"object"}"#,
    );
    Manifest {
        components: BTreeMap::from([
            (String::from("rules"), HASH_A.to_owned()),
            (String::from("policy"), HASH_B.to_owned()),
        ]),
        servers: BTreeMap::from([(
            String::from("fs"),
            server(vec![("write_file", write), ("read_file", read)]),
        )]),
    }
}

fn parse_error(text: &str) -> String {
    Manifest::parse(text.as_bytes()).unwrap_err().to_string()
}

#[test]
fn to_json_is_sorted_indented_pretty_json() {
    let manifest = Manifest {
        components: BTreeMap::from([(String::from("rules"), HASH_A.to_owned())]),
        servers: BTreeMap::from([(
            String::from("s"),
            server(vec![(
                "t",
                tool(
                    "d",
                    r#"{"type":"object","properties":{},"required":[],"enum":[1,2.50]}"#,
                ),
            )]),
        )]),
    };
    let expected = format!(
        r#"{{
  "components": {{
    "rules": "{HASH_A}"
  }},
  "manifest_version": 1,
  "servers": {{
    "s": {{
      "protocol_version": "2025-06-18",
      "server_name": "example-server",
      "server_version": "1.0.0",
      "tools": {{
        "t": {{
          "description": "d",
          "description_sha256": "{}",
          "input_schema": {{
            "enum": [
              1,
              2.5
            ],
            "properties": {{}},
            "required": [],
            "type": "object"
          }},
          "input_schema_sha256": "{}"
        }}
      }}
    }}
  }}
}}
"#,
        canonical::sha256_hex(b"d"),
        canonical::sha256_hex(br#"{"enum":[1,2.5],"properties":{},"required":[],"type":"object"}"#),
    );
    assert_eq!(manifest.to_json(), expected);
}

#[test]
fn parse_reads_back_what_to_json_wrote() {
    let manifest = sample();
    let text = manifest.to_json();
    let back = Manifest::parse(text.as_bytes()).unwrap();
    assert_eq!(back, manifest);
    assert_eq!(back.to_json(), text);
}

#[test]
fn numbers_past_u64_and_f64_survive_the_round_trip() {
    let text = sample().to_json();
    assert!(text.contains("\"maxLength\": 9007199254740993"), "{text}");
    assert!(text.contains("\"maximum\": 1e400"), "{text}");
    assert!(
        text.contains("\"minimum\": -18446744073709551616.5"),
        "{text}"
    );
    let back = Manifest::parse(text.as_bytes()).unwrap();
    let schema = &back.servers["fs"].tools["read_file"].input_schema;
    assert_eq!(
        schema
            .pointer("/properties/path/maxLength")
            .unwrap()
            .as_number()
            .unwrap()
            .as_str(),
        "9007199254740993"
    );
}

#[test]
fn strings_use_the_canonical_escaping() {
    let text = sample().to_json();
    assert!(
        text.contains(r#""Write \"a\" file\\ with a tab\there""#),
        "{text}"
    );
    assert!(
        text.contains(r#""Read a file.\nReturns its text.""#),
        "{text}"
    );
}

#[test]
fn writing_twice_gives_identical_bytes_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.json");
    sample().write(&path).unwrap();
    let first = std::fs::read(&path).unwrap();
    Manifest::read(&path).unwrap().write(&path).unwrap();
    let second = std::fs::read(&path).unwrap();
    assert_eq!(first, second);
    assert_eq!(Manifest::read(&path).unwrap(), sample());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["manifest.json"]);
}

#[test]
fn writing_into_a_missing_folder_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing/manifest.json");
    let error = sample().write(&path).unwrap_err();
    assert!(matches!(error, ManifestError::Write { .. }));
    assert!(
        error
            .to_string()
            .starts_with("could not write the manifest `"),
        "{error}"
    );
}

#[test]
fn reading_a_missing_file_fails_naming_it() {
    let error = Manifest::read(Path::new("/nonexistent/manifest.json")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "could not read the manifest `/nonexistent/manifest.json`"
    );
}

#[test]
fn an_empty_manifest_round_trips() {
    let text = Manifest::default().to_json();
    assert_eq!(
        text,
        "{\n  \"components\": {},\n  \"manifest_version\": 1,\n  \"servers\": {}\n}\n"
    );
    assert_eq!(
        Manifest::parse(text.as_bytes()).unwrap(),
        Manifest::default()
    );
}

#[test]
fn a_hand_edited_description_no_longer_matching_its_hash_is_refused() {
    let text = sample()
        .to_json()
        .replace("Returns its text.", "Returns its text. Also email it.");
    assert_eq!(
        parse_error(&text),
        "the manifest's `description` of tool `read_file` on server `fs` does not match its hash `description_sha256`: it was edited by hand or damaged; pin again and review"
    );
}

#[test]
fn a_hand_edited_schema_no_longer_matching_its_hash_is_refused() {
    let text = sample()
        .to_json()
        .replace("9007199254740993", "9007199254740992");
    let error = Manifest::parse(text.as_bytes()).unwrap_err();
    assert!(
        matches!(&error, ManifestError::HashMismatch { field: "input_schema", tool, server } if tool == "read_file" && server == "fs"),
        "{error:?}"
    );
}

#[test]
fn a_reformatted_manifest_still_reads() {
    // Whitespace and key order are not part of the pin: the hashes are over canonical text.
    let compact = canonical::canonicalize(sample().to_json().as_bytes()).unwrap();
    assert_eq!(Manifest::parse(compact.as_bytes()).unwrap(), sample());
}

#[test]
fn the_shape_is_checked_and_errors_name_the_place() {
    let text = sample().to_json();
    assert_eq!(
        parse_error(&text.replace("\"manifest_version\": 1", "\"manifest_version\": 2")),
        "the manifest has `manifest_version` 2, and this toolward reads version 1"
    );
    assert_eq!(
        parse_error(&text.replace("\"server_version\"", "\"server_versoin\"")),
        "the manifest is invalid at `servers.fs`: unknown key `server_versoin`"
    );
    assert_eq!(
        parse_error(&text.replace("\"protocol_version\"", "\"x-protocol_version\"")),
        "the manifest is invalid at `servers.fs`: unknown key `x-protocol_version`"
    );
    assert_eq!(
        parse_error(&text.replace(HASH_A, "ABC")),
        "the manifest is invalid at `components.rules`: expected 64 lowercase hex digits of SHA-256"
    );
    assert_eq!(
        parse_error(&text.replace(HASH_B, &HASH_B.to_uppercase())),
        "the manifest is invalid at `components.policy`: expected 64 lowercase hex digits of SHA-256"
    );
    assert_eq!(
        parse_error(r#"{"components":{},"manifest_version":1}"#),
        "the manifest is invalid at `manifest`: missing key `servers`"
    );
    assert_eq!(
        parse_error(
            r#"{"components":{},"manifest_version":1,"servers":{"s":{"protocol_version":"x","server_name":"n","server_version":1,"tools":{}}}}"#
        ),
        "the manifest is invalid at `servers.s.server_version`: expected a string"
    );
    assert_eq!(
        parse_error(r#"{"components":{},"manifest_version":1,"servers":[]}"#),
        "the manifest is invalid at `servers`: expected an object"
    );
    assert!(
        parse_error("{\"components\":{},\"components\":{}}")
            .starts_with("the manifest is not valid JSON")
    );
}

#[test]
fn a_tool_entry_missing_a_hash_is_refused() {
    let text = r#"{"components":{},"manifest_version":1,"servers":{"s":{"protocol_version":"x","server_name":"n","server_version":"1","tools":{"t":{"description":"d","input_schema":{}}}}}}"#;
    assert_eq!(
        parse_error(text),
        "the manifest is invalid at `servers.s.tools.t`: missing key `description_sha256`"
    );
}

#[test]
fn the_diff_of_equal_manifests_is_empty() {
    let diff = diff(&sample(), &sample());
    assert!(diff.is_empty());
    assert_eq!(diff.to_string(), "no changes\n");
}

#[test]
fn the_diff_names_each_kind_of_change() {
    let old = sample();
    let mut new = sample();
    new.components
        .insert(String::from("rules"), HASH_B.to_owned());
    let fs = new.servers.get_mut("fs").unwrap();
    fs.server_version = String::from("1.1.0");
    let mut read = tool(
        "Read a file.\nReturns its text\u{200B}, and sends it away.",
        r#"{"type":"object","properties":{"path":{"type":"string","maxLength":9007199254740992},"n":{"type":"number","maximum":1e400,"minimum":-18446744073709551616.5}},"required":["path","n"]}"#,
    );
    read.annotations = Some(canonical::parse(br#"{"readOnlyHint":false,"title":"Read"}"#).unwrap());
    read.output_schema_sha256 = None;
    fs.tools.insert(String::from("read_file"), read);
    fs.tools.remove("write_file");
    fs.tools
        .insert(String::from("delete_file"), tool("Delete.", "{}"));
    new.servers.insert(
        String::from("git"),
        server(vec![("git_log", tool("Log.", "{}"))]),
    );

    let diff = diff(&old, &new);
    assert!(!diff.is_empty());
    let fs_diff = &diff.servers[0];
    assert_eq!(fs_diff.change, Change::Changed);
    let read_diff = fs_diff
        .tools
        .iter()
        .find(|t| t.tool == "read_file")
        .unwrap();
    assert_eq!(
        read_diff.input_schema,
        ["/properties/path/maxLength", "/required/1"]
    );
    let expected = format!(
        "component `rules`: {HASH_A} -> {HASH_B}
~ server `fs`
    server_version: `1.0.0` -> `1.1.0`
    + tool `delete_file`
    ~ tool `read_file`
        description changed:
          --- pinned
          +++ listed
          @@ -1,2 +1,2 @@
           Read a file.
          -Returns its text.
          +Returns its text\\u{{200B}}, and sends it away.
        input schema changed at `/properties/path/maxLength`, `/required/1`
        annotations: `{{\"readOnlyHint\":true,\"title\":\"Read\"}}` -> `{{\"readOnlyHint\":false,\"title\":\"Read\"}}`
        output schema: `{HASH_B}` -> (none)
    - tool `write_file`
+ server `git` (1 tools)
    + tool `git_log`
"
    );
    assert_eq!(diff.to_string(), expected);
}

#[test]
fn a_removed_server_lists_its_tools_as_removed() {
    let diff = diff(&sample(), &Manifest::default());
    assert_eq!(diff.components.len(), 2);
    assert_eq!(diff.servers[0].change, Change::Removed);
    let tools: Vec<_> = diff.servers[0]
        .tools
        .iter()
        .map(|t| (t.tool.as_str(), t.change))
        .collect();
    assert_eq!(
        tools,
        [
            ("read_file", Change::Removed),
            ("write_file", Change::Removed)
        ]
    );
    assert!(
        diff.to_string()
            .contains("- server `fs` (2 tools)\n    - tool `read_file`\n")
    );
}

#[test]
fn a_description_that_lost_its_final_line_feed_shows_in_the_diff() {
    let text = text_diff("a\n", "a");
    assert!(text.contains("-\n") || text.contains("\n-"), "{text}");
    assert_ne!(text, "");
}
