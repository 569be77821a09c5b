//! Listing rules on synthetic `tools/list` pages: no server needed.

use super::*;

const SCHEMA: &str = r#"{"type":"object","properties":{"path":{"type":"string"}}}"#;

/// A tool entry named `name` with the default schema.
fn tool(name: &str) -> String {
    format!(r#"{{"name":"{name}","description":"does {name}","inputSchema":{SCHEMA}}}"#)
}

/// A page of `entries`, with `cursor` as its `nextCursor` when given.
fn page(entries: &[String], cursor: Option<&str>) -> Vec<u8> {
    let tools = entries.join(",");
    match cursor {
        Some(cursor) => format!(r#"{{"tools":[{tools}],"nextCursor":"{cursor}"}}"#),
        None => format!(r#"{{"tools":[{tools}]}}"#),
    }
    .into_bytes()
}

/// Feeds `pages` to a builder for server `srv`, as `list_tools` would.
fn listing(pages: &[Vec<u8>], bounds: ListingBounds) -> Result<Listing, ListingError> {
    let mut builder = ListingBuilder::new("srv", bounds);
    for bytes in pages {
        if builder.push_page(bytes)?.is_none() {
            return Ok(builder.finish());
        }
    }
    Ok(builder.finish())
}

fn single(entry: &str) -> PageEntry {
    let bytes = format!(r#"{{"tools":[{entry}]}}"#);
    let page = parse_page("srv", 1, bytes.as_bytes(), &ListingBounds::default()).unwrap();
    assert_eq!(page.entries.len(), 1);
    page.entries.into_iter().next().unwrap()
}

fn reason(entry: &str) -> String {
    match single(entry).tool {
        Ok(tool) => panic!("expected a malformed entry, got {tool:?}"),
        Err(reason) => reason,
    }
}

#[test]
fn parse_page_reads_tools_in_server_order_with_their_hashes() {
    let bytes = page(&[tool("b"), tool("a")], None);
    let page = parse_page("srv", 1, &bytes, &ListingBounds::default()).unwrap();
    assert_eq!(page.next_cursor, None);
    let names: Vec<_> = page
        .entries
        .iter()
        .map(|e| e.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["b", "a"]);
    let b = page.entries[0].tool.as_ref().unwrap();
    assert_eq!(b.description, "does b");
    assert_eq!(b.description_sha256, canonical::sha256_hex(b"does b"));
    assert_eq!(
        b.input_schema_sha256,
        canonical::sha256_hex(
            canonical::canonicalize(SCHEMA.as_bytes())
                .unwrap()
                .as_bytes()
        )
    );
    assert_eq!(b.annotations, Annotations::default());
    assert_eq!(b.annotations_raw, None);
    assert_eq!(b.output_schema, None);
}

#[test]
fn a_missing_description_is_the_empty_string() {
    let entry = format!(r#"{{"name":"t","inputSchema":{SCHEMA}}}"#);
    let tool = single(&entry).tool.unwrap();
    assert_eq!(tool.description, "");
    assert_eq!(tool.description_sha256, canonical::sha256_hex(b""));
}

#[test]
fn the_description_hash_is_over_the_decoded_text_not_the_escapes() {
    let escaped = format!(r#"{{"name":"t","description":"caf\u00e9","inputSchema":{SCHEMA}}}"#);
    let raw = format!(r#"{{"name":"t","description":"café","inputSchema":{SCHEMA}}}"#);
    let a = single(&escaped).tool.unwrap();
    let b = single(&raw).tool.unwrap();
    assert_eq!(a.description, "café");
    assert_eq!(a.description_sha256, b.description_sha256);
    assert_eq!(
        a.description_sha256,
        canonical::sha256_hex("café".as_bytes())
    );
}

#[test]
fn a_bound_past_f64_precision_changes_the_schema_hash() {
    let entry = |n: &str| {
        format!(
            r#"{{"name":"t","inputSchema":{{"type":"object","properties":{{"n":{{"type":"integer","maximum":{n}}}}}}}}}"#
        )
    };
    let a = single(&entry("9007199254740993")).tool.unwrap();
    let b = single(&entry("9007199254740992")).tool.unwrap();
    assert_ne!(a.input_schema_sha256, b.input_schema_sha256);
    assert_ne!(a.input_schema, b.input_schema);
    // And whitespace or key order of the server does not.
    let spaced = single(
        r#"{"inputSchema" : {"properties":{"n":{"maximum":9007199254740993, "type":"integer"}},"type":"object"}, "name":"t"}"#,
    )
    .tool
    .unwrap();
    assert_eq!(a.input_schema_sha256, spaced.input_schema_sha256);
}

#[test]
fn an_entry_without_a_string_name_is_malformed_by_position() {
    let pages = [page(
        &[
            tool("a"),
            format!(r#"{{"inputSchema":{SCHEMA}}}"#),
            format!(r#"{{"name":7,"inputSchema":{SCHEMA}}}"#),
            String::from("42"),
        ],
        None,
    )];
    let listing = listing(&pages, ListingBounds::default()).unwrap();
    assert_eq!(listing.tools.len(), 1);
    assert_eq!(
        listing.malformed,
        [
            (String::from("#1"), String::from("it has no `name`")),
            (String::from("#2"), String::from("`name` is not a string")),
            (
                String::from("#3"),
                String::from("the entry is not an object")
            ),
        ]
    );
}

#[test]
fn a_malformed_entry_is_numbered_across_pages() {
    let pages = [
        page(&[tool("a"), tool("b")], Some("next")),
        page(&[String::from(r#"{"description":"x"}"#)], None),
    ];
    let listing = listing(&pages, ListingBounds::default()).unwrap();
    assert_eq!(listing.malformed[0].0, "#2");
}

#[test]
fn an_entry_without_an_input_schema_is_malformed_and_the_rest_loads() {
    let pages = [page(
        &[
            tool("a"),
            String::from(r#"{"name":"b","description":"x"}"#),
            tool("c"),
        ],
        None,
    )];
    let listing = listing(&pages, ListingBounds::default()).unwrap();
    let names: Vec<_> = listing.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(
        listing.malformed,
        [(String::from("b"), String::from("it has no `inputSchema`"))]
    );
}

#[test]
fn wrongly_typed_members_are_malformed_with_a_reason() {
    let cases = [
        (r#"{"name":"","inputSchema":{}}"#, "`name` is empty"),
        (
            r#"{"name":"t","description":1,"inputSchema":{}}"#,
            "`description` is not a string",
        ),
        (
            r#"{"name":"t","inputSchema":true}"#,
            "`inputSchema` is not an object",
        ),
        (
            r#"{"name":"t","inputSchema":{},"outputSchema":[]}"#,
            "`outputSchema` is not an object",
        ),
        (
            r#"{"name":"t","inputSchema":{},"annotations":"ro"}"#,
            "`annotations` is not an object",
        ),
        (
            r#"{"name":"t","inputSchema":{},"annotations":{"readOnlyHint":"yes"}}"#,
            "`annotations.readOnlyHint` is not a boolean",
        ),
        (
            r#"{"name":"t","inputSchema":{},"annotations":{"destructiveHint":0}}"#,
            "`annotations.destructiveHint` is not a boolean",
        ),
        (
            r#"{"name":"t","inputSchema":{},"annotations":{"title":false}}"#,
            "`annotations.title` is not a string",
        ),
        (
            r#"{"name":"t","title":1,"inputSchema":{}}"#,
            "`title` is not a string",
        ),
    ];
    for (entry, expected) in cases {
        assert_eq!(reason(entry), expected, "{entry}");
    }
}

#[test]
fn null_optional_members_count_as_absent() {
    let tool = single(
        r#"{"name":"t","description":null,"inputSchema":{},"outputSchema":null,"annotations":null}"#,
    )
    .tool
    .unwrap();
    assert_eq!(tool.description, "");
    assert_eq!(tool.output_schema, None);
    assert_eq!(tool.annotations_raw, None);
}

#[test]
fn annotations_are_decoded_and_kept_as_received() {
    let tool = single(
        r#"{"name":"t","inputSchema":{},"annotations":{"readOnlyHint":true,"destructiveHint":false,"title":"T","x-extra":1.50}}"#,
    )
    .tool
    .unwrap();
    assert_eq!(tool.annotations.read_only_hint, Some(true));
    assert_eq!(tool.annotations.destructive_hint, Some(false));
    assert_eq!(tool.annotations.idempotent_hint, None);
    assert_eq!(tool.annotations.title.as_deref(), Some("T"));
    let raw = tool.annotations_raw.unwrap();
    assert_eq!(
        canonical::to_canonical(&raw),
        r#"{"destructiveHint":false,"readOnlyHint":true,"title":"T","x-extra":1.5}"#
    );
}

#[test]
fn an_output_schema_is_kept_with_its_hash() {
    let tool = single(r#"{"name":"t","inputSchema":{},"outputSchema":{"type":"object"}}"#)
        .tool
        .unwrap();
    assert_eq!(
        tool.output_schema_sha256.as_deref(),
        Some(canonical::sha256_hex(br#"{"type":"object"}"#).as_str())
    );
}

#[test]
fn a_tool_listed_twice_on_one_page_is_a_duplicate_and_every_entry_is_dropped() {
    let pages = [page(&[tool("a"), tool("b"), tool("a")], None)];
    let listing = listing(&pages, ListingBounds::default()).unwrap();
    assert_eq!(listing.duplicates, ["a"]);
    let names: Vec<_> = listing.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["b"]);
}

#[test]
fn a_tool_listed_on_two_pages_is_a_duplicate() {
    let pages = [
        page(&[tool("a"), tool("b")], Some("2")),
        page(&[tool("c"), tool("b")], None),
    ];
    let listing = listing(&pages, ListingBounds::default()).unwrap();
    assert_eq!(listing.duplicates, ["b"]);
    let names: Vec<_> = listing.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(listing.pages, 2);
}

#[test]
fn a_malformed_entry_still_makes_its_name_a_duplicate() {
    let pages = [page(&[tool("a"), String::from(r#"{"name":"a"}"#)], None)];
    let listing = listing(&pages, ListingBounds::default()).unwrap();
    assert_eq!(listing.duplicates, ["a"]);
    assert!(listing.tools.is_empty());
    assert_eq!(listing.malformed.len(), 1);
}

#[test]
fn pages_are_followed_by_cursor_and_counted() {
    let pages = [
        page(&[tool("a")], Some("p2")),
        page(&[tool("b")], Some("p3")),
        page(&[tool("c")], None),
    ];
    let bytes: usize = pages.iter().map(Vec::len).sum();
    let listing = listing(&pages, ListingBounds::default()).unwrap();
    assert_eq!(listing.tools.len(), 3);
    assert_eq!(listing.pages, 3);
    assert_eq!(listing.bytes, bytes as u64);
    assert_eq!(listing.server, "srv");
}

#[test]
fn a_null_next_cursor_ends_the_listing() {
    let mut builder = ListingBuilder::new("srv", ListingBounds::default());
    let next = builder
        .push_page(br#"{"tools":[],"nextCursor":null}"#)
        .unwrap();
    assert_eq!(next, None);
}

#[test]
fn a_repeated_cursor_refuses_the_listing() {
    let pages = [
        page(&[tool("a")], Some("x")),
        page(&[tool("b")], Some("y")),
        page(&[tool("c")], Some("x")),
    ];
    let error = listing(&pages, ListingBounds::default()).unwrap_err();
    assert!(
        matches!(error, ListingError::CursorRepeated { page: 3, .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "server `srv` repeated the cursor `x` on `tools/list` page 3, so its listing would not end"
    );
}

#[test]
fn an_empty_string_cursor_is_a_cursor_and_its_repeat_refuses_the_listing() {
    let mut builder = ListingBuilder::new("srv", ListingBounds::default());
    let next = builder.push_page(&page(&[tool("a")], Some(""))).unwrap();
    assert_eq!(next.as_deref(), Some(""));
    let error = builder
        .push_page(&page(&[tool("b")], Some("")))
        .unwrap_err();
    assert!(
        matches!(error, ListingError::CursorRepeated { .. }),
        "{error:?}"
    );
}

#[test]
fn a_cursor_with_hidden_characters_is_quoted_visibly() {
    let mut builder = ListingBuilder::new("srv", ListingBounds::default());
    let cursor = "a\\u202eb";
    builder.push_page(&page(&[], Some(cursor))).unwrap();
    let error = builder.push_page(&page(&[], Some(cursor))).unwrap_err();
    assert!(error.to_string().contains("`a\\u{202E}b`"), "{error}");
}

#[test]
fn more_pages_than_the_bound_refuse_the_listing() {
    let bounds = ListingBounds {
        max_pages: 2,
        ..ListingBounds::default()
    };
    let two = [page(&[tool("a")], Some("2")), page(&[tool("b")], None)];
    assert_eq!(listing(&two, bounds).unwrap().pages, 2);
    let three = [
        page(&[tool("a")], Some("2")),
        page(&[tool("b")], Some("3")),
        page(&[tool("c")], None),
    ];
    let error = listing(&three, bounds).unwrap_err();
    assert_eq!(
        error.to_string(),
        "server `srv` listed more than 2 pages of tools (bound `max_listing_pages`)"
    );
}

#[test]
fn more_tools_than_the_bound_refuse_the_listing() {
    let bounds = ListingBounds {
        max_tools: 3,
        ..ListingBounds::default()
    };
    let three = [
        page(&[tool("a"), tool("b")], Some("2")),
        page(&[tool("c")], None),
    ];
    assert_eq!(listing(&three, bounds).unwrap().tools.len(), 3);
    let five = [
        page(&[tool("a"), tool("b")], Some("2")),
        page(&[tool("c"), tool("d"), tool("e")], None),
    ];
    let error = listing(&five, bounds).unwrap_err();
    assert_eq!(
        error.to_string(),
        "server `srv` listed 5 tools, more than 3 (bound `max_tools`)"
    );
}

#[test]
fn malformed_entries_count_toward_the_tool_bound() {
    let bounds = ListingBounds {
        max_tools: 1,
        ..ListingBounds::default()
    };
    let pages = [page(&[tool("a"), String::from("{}")], None)];
    assert!(matches!(
        listing(&pages, bounds),
        Err(ListingError::TooManyTools {
            count: 2,
            limit: 1,
            ..
        })
    ));
}

#[test]
fn a_page_longer_than_the_bound_refuses_the_listing() {
    let bytes = page(&[tool("a")], None);
    let length = bytes.len() as u64;
    let bounds = ListingBounds {
        max_page_bytes: length,
        ..ListingBounds::default()
    };
    assert!(parse_page("srv", 1, &bytes, &bounds).is_ok());
    let bounds = ListingBounds {
        max_page_bytes: length - 1,
        ..ListingBounds::default()
    };
    let error = parse_page("srv", 1, &bytes, &bounds).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "server `srv` sent `tools/list` page 1 of {length} bytes, more than {} (bound `max_page_bytes`)",
            length - 1
        )
    );
}

#[test]
fn pages_longer_together_than_the_bound_refuse_the_listing() {
    let first = page(&[tool("a")], Some("2"));
    let second = page(&[tool("b")], None);
    let limit = (first.len() + second.len() - 1) as u64;
    let bounds = ListingBounds {
        max_listing_bytes: limit,
        ..ListingBounds::default()
    };
    let error = listing(&[first.clone(), second.clone()], bounds).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "server `srv` sent {} bytes of `tools/list` pages, more than {limit} (bound `max_listing_bytes`)",
            limit + 1
        )
    );
}

#[test]
fn a_tool_longer_than_the_bound_is_refused_alone() {
    let long = format!(
        r#"{{"name":"long","description":"{}","inputSchema":{SCHEMA}}}"#,
        "x".repeat(1000)
    );
    let bounds = ListingBounds {
        max_tool_bytes: 500,
        ..ListingBounds::default()
    };
    let pages = [page(&[tool("a"), long.clone()], None)];
    let listing = listing(&pages, bounds).unwrap();
    assert_eq!(listing.tools.len(), 1);
    let length = canonical::canonicalize(long.as_bytes()).unwrap().len();
    assert_eq!(
        listing.malformed,
        [(
            String::from("long"),
            format!("the entry is {length} bytes long, more than 500 (bound `max_tool_bytes`)")
        )]
    );
}

#[test]
fn a_page_that_is_not_a_listing_refuses_it() {
    let bounds = ListingBounds::default();
    let cases: [(&[u8], &str); 4] = [
        (
            b"{\"tools\":",
            "server `srv` sent `tools/list` page 1, which is not valid JSON",
        ),
        (
            b"{}",
            "server `srv` sent `tools/list` page 1, which has no `tools` array",
        ),
        (
            br#"{"tools":{}}"#,
            "server `srv` sent `tools/list` page 1, which has no `tools` array",
        ),
        (
            br#"{"tools":[],"nextCursor":3}"#,
            "server `srv` sent `tools/list` page 1, which has a `nextCursor` that is not a string",
        ),
    ];
    for (bytes, expected) in cases {
        let error = parse_page("srv", 1, bytes, &bounds).unwrap_err();
        assert_eq!(error.to_string(), expected);
    }
}

#[test]
fn hidden_characters_in_the_description_are_named_by_code_point() {
    let cases = [
        ("\\u200b", "zero-width character U+200B"),
        ("\\u2060", "zero-width character U+2060"),
        ("\\ufeff", "zero-width character U+FEFF"),
        ("\\u202e", "bidirectional control U+202E"),
        ("\\u2066", "bidirectional control U+2066"),
        ("\\u001b[2J", "control character U+001B"),
        ("\\u0085", "control character U+0085"),
        ("\\u007f", "control character U+007F"),
        ("\\r", "control character U+000D"),
        ("\\udb40\\udc41", "tag character U+E0041"),
    ];
    for (escape, kind) in cases {
        let entry = format!(r#"{{"name":"t","description":"read{escape} it","inputSchema":{{}}}}"#);
        assert_eq!(
            reason(&entry),
            format!("{kind} in `description`, which a reviewer would not see"),
            "{escape}"
        );
    }
}

#[test]
fn tab_and_line_breaks_are_allowed_in_descriptions() {
    let tool = single(r#"{"name":"t","description":"a\tb\nc\r\nd","inputSchema":{}}"#)
        .tool
        .unwrap();
    assert_eq!(tool.description, "a\tb\nc\r\nd");
}

#[test]
fn hidden_characters_in_the_name_refuse_the_tool() {
    assert_eq!(
        reason(r#"{"name":"read\u200bfile","inputSchema":{}}"#),
        "zero-width character U+200B in `name`, which a reviewer would not see"
    );
    assert_eq!(
        reason(r#"{"name":"read\nfile","inputSchema":{}}"#),
        "control character U+000A in `name`, which a reviewer would not see"
    );
}

#[test]
fn hidden_characters_in_a_schema_are_named_with_their_pointer() {
    assert_eq!(
        reason(
            r#"{"name":"t","inputSchema":{"type":"object","properties":{"p":{"description":"ok","enum":["a","b\u2067"]}}}}"#
        ),
        "bidirectional control U+2067 in `inputSchema` at `/properties/p/enum/1`, which a reviewer would not see"
    );
    assert_eq!(
        reason(r#"{"name":"t","inputSchema":{"type":"object","properties":{"a/b\u200d":{}}}}"#),
        "zero-width character U+200D in `inputSchema` in the key at `/properties/a~1b\\u{200D}`, which a reviewer would not see"
    );
    assert_eq!(
        reason(r#"{"name":"t","inputSchema":{},"outputSchema":{"title":"\u0007"}}"#),
        "control character U+0007 in `outputSchema` at `/title`, which a reviewer would not see"
    );
    assert_eq!(
        reason(r#"{"name":"t","inputSchema":{},"annotations":{"title":"x\u202a"}}"#),
        "bidirectional control U+202A in `annotations` at `/title`, which a reviewer would not see"
    );
}

#[test]
fn the_first_hidden_character_in_document_order_is_reported() {
    let why =
        reason(r#"{"name":"t","inputSchema":{"a":"\u200b","b":["\u200c"],"c":{"d":"\u200d"}}}"#);
    assert!(why.contains("U+200B") && why.contains("`/a`"), "{why}");
}

#[test]
fn a_schema_nested_too_deep_is_malformed() {
    let deep = format!(
        "{}{}",
        "[".repeat(MAX_TOOL_VALUE_DEPTH + 1),
        "]".repeat(MAX_TOOL_VALUE_DEPTH + 1)
    );
    let entry = format!(r#"{{"name":"t","inputSchema":{{"x":{deep}}}}}"#);
    assert_eq!(
        reason(&entry),
        format!("`inputSchema` nests deeper than {MAX_TOOL_VALUE_DEPTH} levels")
    );
    let fits = format!(
        r#"{{"name":"t","inputSchema":{{"x":{}{}}}}}"#,
        "[".repeat(MAX_TOOL_VALUE_DEPTH - 1),
        "]".repeat(MAX_TOOL_VALUE_DEPTH - 1)
    );
    assert!(single(&fits).tool.is_ok());
}

#[test]
fn hidden_character_classifies_the_ranges_at_their_edges() {
    for c in ['\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}'] {
        assert_eq!(hidden_character(c), Some("control character"), "{c:?}");
    }
    for c in ['\u{200b}', '\u{200f}', '\u{2060}', '\u{2064}', '\u{feff}'] {
        assert_eq!(hidden_character(c), Some("zero-width character"), "{c:?}");
    }
    for c in ['\u{61c}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}'] {
        assert_eq!(hidden_character(c), Some("bidirectional control"), "{c:?}");
    }
    for c in ['\u{e0000}', '\u{e007f}'] {
        assert_eq!(hidden_character(c), Some("tag character"), "{c:?}");
    }
    for c in ['\u{fe00}', '\u{fe0f}', '\u{e0100}', '\u{e01ef}'] {
        assert_eq!(hidden_character(c), Some("variation selector"), "{c:?}");
    }
    for c in ['\u{2028}', '\u{2029}'] {
        assert_eq!(
            hidden_character(c),
            Some("line or paragraph separator"),
            "{c:?}"
        );
    }
    for c in [
        '\u{ad}',
        '\u{2065}',
        '\u{206a}',
        '\u{206f}',
        '\u{e0080}',
        '\u{e0fff}',
    ] {
        assert_eq!(hidden_character(c), Some("invisible character"), "{c:?}");
    }
    for c in [
        ' ',
        '~',
        '\u{a0}',
        '\u{200a}',
        '\u{2010}',
        '\u{2027}',
        '\u{202f}',
        '\u{fdff}',
        '\u{fe10}',
        '\u{f0000}',
        '\u{e1000}',
    ] {
        assert_eq!(hidden_character(c), None, "{c:?}");
    }
}

/// Every invisible code point a security tester pinned through the first version of the
/// check (which knew zero-width, bidirectional, tag and control characters only), and the
/// variation selectors that can carry one byte each, refuse the tool; an emoji's presentation
/// selector does not.
#[test]
fn invisible_characters_and_variation_selectors_refuse_the_tool_but_an_emoji_selector_does_not() {
    let hidden = [
        '\u{ad}',
        '\u{34f}',
        '\u{115f}',
        '\u{1160}',
        '\u{17b4}',
        '\u{180e}',
        '\u{2028}',
        '\u{2029}',
        '\u{2065}',
        '\u{206a}',
        '\u{3164}',
        '\u{ffa0}',
        '\u{fff9}',
        '\u{fffb}',
        '\u{2800}',
        '\u{1d159}',
        '\u{1d173}',
        '\u{13430}',
        '\u{110bd}',
        '\u{fe00}',
        '\u{e0080}',
        '\u{e0100}',
        '\u{e01ef}',
    ];
    for c in hidden {
        assert!(hidden_character(c).is_some(), "{c:?}");
        let description = format!("Read a file.{c}");
        let entry = serde_json::json!({"name": "t", "description": description, "inputSchema": {}});
        let reason = reason(&entry.to_string());
        assert!(
            reason.contains(&format!("U+{:04X}", u32::from(c))),
            "{c:?}: {reason}"
        );
    }
    // A run of selectors after a visible character, or one after a space, is hidden text.
    for description in [
        "warn \u{26a0}\u{fe0f}\u{fe0f}",
        "a \u{fe0f}b",
        "\u{fe0f}start",
    ] {
        let entry = serde_json::json!({"name": "t", "description": description, "inputSchema": {}});
        assert!(
            reason(&entry.to_string()).contains("variation selector U+FE0F"),
            "{description:?}"
        );
    }
    let entry = serde_json::json!({"name": "t", "description": "careful \u{26a0}\u{fe0f} 1\u{fe0f}\u{20e3}", "inputSchema": {}});
    let tool = single(&entry.to_string()).tool.unwrap();
    assert!(text::escape(&tool.description).contains("\u{26a0}\\u{FE0F}"));
}

#[test]
fn default_bounds_are_the_config_defaults() {
    let bounds = ListingBounds::default();
    assert_eq!(bounds.max_pages, crate::config::DEFAULT_MAX_LISTING_PAGES);
    assert_eq!(bounds.max_tools, crate::config::DEFAULT_MAX_TOOLS);
    assert_eq!(bounds.max_page_bytes, crate::config::DEFAULT_MAX_PAGE_BYTES);
    assert_eq!(
        bounds.max_listing_bytes,
        crate::config::DEFAULT_MAX_LISTING_BYTES
    );
    assert_eq!(bounds.max_tool_bytes, crate::config::DEFAULT_MAX_TOOL_BYTES);
}
