use super::*;

/// Whether `text` holds a raw character the rule escapes.
fn holds_escapable(text: &str) -> bool {
    text.chars().any(is_escaped)
}

#[test]
fn line_breaks_and_tab_are_escaped_by_their_short_names() {
    assert_eq!(escape("a\nb\r\nc\td\re"), "a\\nb\\r\\nc\\td\\re");
}

#[test]
fn c0_controls_del_and_c1_controls_are_escaped_so_no_escape_sequence_starts() {
    assert_eq!(escape("\u{1b}[31mred"), "\\u{001B}[31mred");
    assert_eq!(escape("\u{9b}31m"), "\\u{009B}31m");
    assert_eq!(
        escape("bell\u{7}del\u{7f}nul\u{0}"),
        "bell\\u{0007}del\\u{007F}nul\\u{0000}"
    );
    for c in ('\u{0}'..='\u{1f}').chain('\u{7f}'..='\u{9f}') {
        assert!(!holds_escapable(&escape(&c.to_string())), "{c:?}");
        assert!(escape(&c.to_string()).starts_with('\\'), "{c:?}");
    }
}

#[test]
fn bidi_controls_are_escaped() {
    for c in [
        '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
        '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
    ] {
        assert_eq!(
            escape(&format!("a{c}b")),
            format!("a\\u{{{:04X}}}b", u32::from(c))
        );
    }
    assert_eq!(escape("report\u{202e}fdp.exe"), "report\\u{202E}fdp.exe");
}

#[test]
fn zero_width_and_other_format_characters_are_escaped() {
    for c in [
        '\u{200b}',
        '\u{200c}',
        '\u{200d}',
        '\u{2060}',
        '\u{2063}',
        '\u{2064}',
        '\u{feff}',
        '\u{ad}',
        '\u{180e}',
        '\u{600}',
        '\u{6dd}',
        '\u{70f}',
        '\u{890}',
        '\u{8e2}',
        '\u{fff9}',
        '\u{110bd}',
        '\u{13430}',
        '\u{1d173}',
    ] {
        let shown = escape(&format!("a{c}b"));
        assert_eq!(shown, format!("a\\u{{{:04X}}}b", u32::from(c)), "{c:?}");
    }
}

#[test]
fn tag_characters_are_escaped_across_their_whole_block() {
    for c in [
        '\u{e0000}',
        '\u{e0001}',
        '\u{e0020}',
        '\u{e0041}',
        '\u{e007f}',
    ] {
        assert_eq!(escape(&c.to_string()), format!("\\u{{{:X}}}", u32::from(c)));
    }
}

#[test]
fn separators_variation_selectors_and_blanks_are_escaped() {
    assert_eq!(escape("a\u{2028}b\u{2029}"), "a\\u{2028}b\\u{2029}");
    assert_eq!(escape("\u{fe0f}"), "\\u{FE0F}");
    assert_eq!(escape("x\u{fe01}"), "x\\u{FE01}");
    assert_eq!(escape("\u{2800}\u{3164}"), "\\u{2800}\\u{3164}");
}

#[test]
fn even_an_emoji_presentation_selector_is_escaped() {
    assert_eq!(escape("⚠\u{fe0f} careful"), "⚠\\u{FE0F} careful");
}

#[test]
fn visible_text_and_backslashes_are_kept() {
    assert_eq!(
        escape("plain café ✓ 東京 \\u{200B}"),
        "plain café ✓ 東京 \\u{200B}"
    );
}

#[test]
fn every_escaped_character_leaves_nothing_escapable_behind() {
    let all: String = (0..=0x10ffff_u32).filter_map(char::from_u32).collect();
    assert!(!holds_escapable(&escape(&all)));
}

#[test]
fn quote_cuts_at_a_character_boundary_and_replaces_backticks() {
    assert_eq!(quote("a`b\n", 10), "a'b\\n");
    assert_eq!(quote("éé", 3), "é…");
    assert_eq!(quote("\u{202e}abc", 4), "\\u{202E}a…");
}

#[test]
fn lines_split_at_line_feeds_and_escape_everything_else() {
    let shown: Vec<String> = lines("one\r\ntwo\tx\rthree\n\u{1b}[2J\u{2028}").collect();
    assert_eq!(
        shown,
        ["one\\r", "two\\tx\\rthree", "\\u{001B}[2J\\u{2028}"]
    );
}

#[test]
fn json_for_the_terminal_escapes_bidi_and_c1_controls_and_stays_the_same_json() {
    let value = serde_json::json!({"content": "\u{202e}evil\u{9b}31m\u{7f}ok é \u{e0041}"});
    let text = escape_json(&value.to_string());
    assert!(!holds_escapable(&text), "{text}");
    assert!(text.contains("\\u202e") && text.contains("\\u009b") && text.contains('é'));
    assert!(text.contains("\\udb40\\udc41"), "{text}");
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back, value);
}

/// `auth status --json` prints a pretty document: its line breaks and indents are layout, not
/// text, and must stay raw or the output is not JSON.
#[test]
fn pretty_json_for_the_terminal_keeps_its_layout_and_stays_the_same_json() {
    let value = serde_json::json!([{"issuer": "https://as.example\u{202e}", "scopes": ["a\nb"]}]);
    let text = escape_json(&serde_json::to_string_pretty(&value).unwrap());
    assert!(text.contains("\\u202e") && text.contains("a\\nb"), "{text}");
    assert!(text.starts_with("[\n  {"), "{text}");
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back, value);
}

/// Found by an outside attack: the printed `auth login --principal` named the escaped text
/// (a backtick turned into `'`, U+202E into the six characters `\u{202E}`), so running it
/// signed in another principal. The shell must read back exactly the name.
#[test]
fn a_shell_word_is_read_back_by_the_shell_as_exactly_the_text() {
    for text in [
        "alice",
        "eve`x`",
        "O'Brien; rm -rf ~",
        "a\u{202e}b\u{200b}",
        "x\u{2028}y'z\\",
        "$(id)",
    ] {
        let word = shell_word(text);
        assert!(!word.chars().any(|c| is_escaped(c) || c == '`'), "{word}");
        let Ok(output) = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {word}"))
            .output()
        else {
            panic!("bash is needed to read the word back");
        };
        assert_eq!(String::from_utf8(output.stdout).unwrap(), text, "{word}");
    }
}
