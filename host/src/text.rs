//! Foreign text made safe to show, on a terminal or in a log line.
//!
//! Text toolward did not write — what an MCP server sends (its standard error, its
//! `notifications/message`, an HTTP error body, its `serverInfo`, tool names and
//! descriptions), what a caller sends (a principal, arguments), a policy's reason, what a
//! client config holds — passes through this module before it is printed, logged or put in an
//! error message. There is one rule, [`escape`]; [`quote`], [`lines`] and [`escape_json`] are
//! the same rule for a one-line quotation, a multi-line layout and JSON output.
//!
//! # The rule
//!
//! Every character a terminal could act on, or a reader would not see, is written as a visible
//! escape:
//!
//! - line feed, carriage return and tab as `\n`, `\r` and `\t`;
//! - every other C0 control, DEL and every C1 control as `\u{001B}`, so no escape sequence
//!   (`ESC [`, or CSI U+009B) can start and no bell rings;
//! - Unicode's format characters (general category Cf): the bidirectional controls
//!   (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), the zero-width characters
//!   (U+200B–U+200D, U+2060–U+2064, U+FEFF), the soft hyphen U+00AD, U+180E, the tag
//!   characters (the whole block U+E0000–U+E007F) and the rest of the category;
//! - every other kind [`hidden_character`] names: the remaining default-ignorable code points,
//!   variation selectors, the line and paragraph separators U+2028 and U+2029, and blanks.
//!
//! Each of the last three as `\u{XXXX}`: uppercase hexadecimal, at least four digits, the
//! spelling of pins and refusal reasons (`U+202E`). There is no exception and no context: a
//! character is escaped or not by what it is alone. Even an emoji's presentation selector
//! (`⚠\u{FE0F}`), which a tool's description may hold ([`presentation_selector`]), is shown
//! escaped: a reader of a report or of an approval reads text, not emoji.
//!
//! # What the result guarantees
//!
//! The result of [`escape`] holds none of the characters above, so it is one line, moves no
//! cursor, changes no colour and reorders nothing around it. Nothing is dropped: every escaped
//! character is shown, in place. A backslash is kept as it is, so text that already spells
//! `\u{200B}` reads the same as text that held the character; the escape shows that something
//! is there, which is what a reader of a terminal or a log needs.

/// How what an embedder gave as bytes, not as a file, is named in messages and in the load
/// report (rules, policy settings, Cedar text, components, counters kept in memory).
pub const IN_MEMORY: &str = "(given in memory)";

use std::fmt::Write as _;

/// Longest piece of foreign text quoted in an error message, a refusal or a log line, in
/// bytes (a tool name from the client, a server's error text beyond the result cap): a
/// message stays one readable line, and an attacker's text cannot flood it.
pub const MAX_QUOTED_BYTES: usize = 512;

/// What kind of character `c` is when a reviewer reading it would not see it, or `None` for
/// a visible character:
///
/// - `"control character"`: C0 controls U+0000–U+001F, DEL U+007F and C1 controls
///   U+0080–U+009F. Tab and line feed are layout, not hidden, where text may span lines
///   (descriptions, titles, string values in schemas); a carriage return there is layout only
///   right before a line feed (a lone one moves a terminal's cursor back over the line).
///   Names and schema keys take no control character at all. Those cases are decided by the
///   callers of this function ([`crate::listing`]), which reports every control;
/// - `"zero-width character"`: U+200B–U+200F, U+2060–U+2064, U+FEFF;
/// - `"bidirectional control"`: U+061C, U+202A–U+202E, U+2066–U+2069;
/// - `"tag character"`: U+E0000–U+E007F;
/// - `"line or paragraph separator"`: U+2028, U+2029 (a line break to some readers, none to
///   others);
/// - `"variation selector"`: U+FE00–U+FE0F, U+E0100–U+E01EF (one selector can stand for any
///   byte, so a run of them carries text nobody sees); U+FE0E and U+FE0F right after a
///   visible character choose how it is drawn (emoji or text) and are allowed there, see
///   [`presentation_selector`];
/// - `"invisible character"`: the rest of Unicode's default-ignorable code points (U+00AD,
///   U+034F, U+115F, U+1160, U+17B4, U+17B5, U+180B–U+180F, U+2065, U+206A–U+206F, U+3164,
///   U+FFA0, U+FFF0–U+FFF8, U+1BCA0–U+1BCA3, U+1D173–U+1D17A, U+E0080–U+E0FFF), the format
///   controls U+110BD, U+110CD, U+13430–U+1343F, U+FFF9–U+FFFB, and the blanks U+2800 and
///   U+1D159 that draw as nothing.
pub fn hidden_character(c: char) -> Option<&'static str> {
    match c {
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => Some("control character"),
        '\u{200b}'..='\u{200f}' | '\u{2060}'..='\u{2064}' | '\u{feff}' => {
            Some("zero-width character")
        }
        '\u{61c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            Some("bidirectional control")
        }
        '\u{e0000}'..='\u{e007f}' => Some("tag character"),
        '\u{2028}' | '\u{2029}' => Some("line or paragraph separator"),
        '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}' => Some("variation selector"),
        '\u{ad}'
        | '\u{34f}'
        | '\u{115f}'
        | '\u{1160}'
        | '\u{17b4}'
        | '\u{17b5}'
        | '\u{180b}'..='\u{180f}'
        | '\u{2065}'
        | '\u{206a}'..='\u{206f}'
        | '\u{2800}'
        | '\u{3164}'
        | '\u{ffa0}'
        | '\u{fff0}'..='\u{fffb}'
        | '\u{110bd}'
        | '\u{110cd}'
        | '\u{13430}'..='\u{1343f}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d159}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0080}'..='\u{e0fff}' => Some("invisible character"),
        _ => None,
    }
}

/// Whether `c`, right after `previous`, is a presentation selector: U+FE0E (text) or U+FE0F
/// (emoji) following a character that is itself visible (not hidden, not white space), as in
/// `⚠️`. Such a selector only chooses how that character is drawn; a second selector in a row,
/// or one after nothing visible, is hidden text.
pub fn presentation_selector(c: char, previous: Option<char>) -> bool {
    matches!(c, '\u{fe0e}' | '\u{fe0f}')
        && previous.is_some_and(|p| !p.is_whitespace() && hidden_character(p).is_none())
}

/// The format characters (Unicode 16.0, general category Cf) [`hidden_character`] does not
/// name, because they are drawn (the Arabic and Syriac signs spanning the digits after them):
/// escaped for display all the same, as the rule is the whole category.
fn drawn_format_character(c: char) -> bool {
    matches!(
        c,
        '\u{600}'..='\u{605}' | '\u{6dd}' | '\u{70f}' | '\u{890}'..='\u{891}' | '\u{8e2}'
    )
}

/// Whether [`escape`] escapes `c` (see the module's rule).
pub fn is_escaped(c: char) -> bool {
    hidden_character(c).is_some() || drawn_format_character(c)
}

/// Appends `c`, escaped by the module's rule, to `out`.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => {
            let _ = write!(out, "\\u{{{:04X}}}", u32::from(c));
        }
    }
}

/// `text` on one line with every character of the module's rule escaped: `\n`, `\r`, `\t`, and
/// `\u{XXXX}` for the rest (`\u{202E}`, `\u{001B}`, `\u{E0041}`).
pub fn escape(text: &str) -> String {
    // Printable ASCII never needs an escape, and most text is nothing else.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_escaped(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` for a quotation between backticks in a one-line message: its start of at most
/// `max_bytes` bytes (cut at a character boundary, then `…`), escaped as [`escape`] does, with
/// each backtick written as `'` so the quotation cannot end early.
pub fn quote(text: &str, max_bytes: usize) -> String {
    let mut end = text.len().min(max_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut quoted = escape(text.get(..end).unwrap_or_default()).replace('`', "'");
    if end < text.len() {
        quoted.push('…');
    }
    quoted
}

/// `text` split at each line feed, each line escaped as [`escape`] does: for a report that
/// shows foreign text over lines of its own. No line holds a raw line break; a carriage return,
/// before a line feed or not, is shown as `\r`, so a change of line ends still shows in a
/// diff.
pub fn lines(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split('\n').map(escape)
}

/// `json` (JSON text, as serde writes it) with every character of the module's rule that it
/// holds raw written as a JSON `\uXXXX` escape (two for a character past U+FFFF), so the result
/// is the same JSON value and safe to print. Such characters can stand only inside JSON strings,
/// where a `\uXXXX` escape means the character itself. JSON's own escapes (`\n`, `\"`) are
/// kept, and so is the whitespace between values (a pretty-printed document's line breaks and
/// indents): serde writes no raw line break or tab inside a string, and one outside a string
/// cannot be written as an escape.
pub fn escape_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_escaped(c) && !matches!(c, '\n' | '\r' | '\t') {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One line: an error and each of its sources, joined by `: `.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    text
}

/// `text` as one word of a POSIX shell command, the same text when the shell reads it: as
/// it is when it holds only characters no shell reads specially; else in single quotes (`'`
/// written `'\''`); and when it holds a character [`escape`] would escape (a control,
/// bidirectional or hidden one) or a backtick (messages show commands between backticks), as
/// `$'…'` with those characters' UTF-8 bytes as `\xHH` (POSIX.1-2024, bash, zsh, ksh), so no
/// such character reaches a terminal and the command still names exactly `text`. Written before as the
/// escaped text, the command named another principal than the one refused.
pub fn shell_word(text: &str) -> String {
    let needs_bytes = |c: char| is_escaped(c) || c == '`';
    if text.chars().any(needs_bytes) {
        let mut word = String::from("$'");
        for c in text.chars() {
            match c {
                '\\' => word.push_str("\\\\"),
                '\'' => word.push_str("\\'"),
                c if needs_bytes(c) => {
                    let mut bytes = [0u8; 4];
                    for byte in c.encode_utf8(&mut bytes).bytes() {
                        let _ = write!(word, "\\x{byte:02x}");
                    }
                }
                c => word.push(c),
            }
        }
        word.push('\'');
        return word;
    }
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c))
    {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The command that signs in to `server`: `toolward auth login SERVER`, with `--principal P`
/// for a principal's grant and `--scope 'A B'` for scopes to ask for beyond the usual ones
/// (each scope checked by the caller against RFC 6749's grammar).
pub fn login_command(server: &str, principal: Option<&str>, scopes: &[String]) -> String {
    let mut command = format!("toolward auth login {server}");
    if let Some(principal) = principal {
        command.push_str(" --principal ");
        command.push_str(&shell_word(principal));
    }
    if !scopes.is_empty() {
        command.push_str(" --scope ");
        command.push_str(&shell_word(&scopes.join(" ")));
    }
    command
}

/// The command that deletes the grant of `server` (and `principal`).
pub fn logout_command(server: &str, principal: Option<&str>) -> String {
    match principal {
        None => format!("toolward auth logout {server}"),
        Some(principal) => format!(
            "toolward auth logout {server} --principal {}",
            shell_word(principal)
        ),
    }
}

#[cfg(test)]
#[path = "text/tests.rs"]
mod tests;
