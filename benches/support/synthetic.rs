//! Synthetic `tools/list` listings for the benchmarks: deterministic (a fixed-seed
//! SplitMix64), shaped like the reference servers' tools. Each tool has a `name`, a
//! `description` of about 200 characters (some with a line break or quotes), and an
//! `inputSchema` (draft-07 `$schema`, `type: object`) with 3 to 6 properties drawn from
//! strings with descriptions, bounded integers, numbers with fractions, string enums,
//! booleans with defaults, arrays of strings and nested objects; the first one or two are
//! `required`, and about half the tools carry `annotations` (consistent with [`rules`]). Members are written in the order a
//! server writes them (not sorted), compact, as Node's `JSON.stringify` does.
#![allow(dead_code, reason = "each benchmark uses part of it")]

use std::fmt::Write as _;

/// The names the tools of a synthetic listing get: `tool_000000`, `tool_000001`, ….
pub fn tool_name(index: usize) -> String {
    format!("tool_{index:06}")
}

/// One deterministic generator per listing.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const WORDS: &[&str] = &[
    "read",
    "the",
    "contents",
    "of",
    "a",
    "file",
    "from",
    "disk",
    "and",
    "return",
    "them",
    "as",
    "text",
    "only",
    "works",
    "within",
    "allowed",
    "directories",
    "use",
    "this",
    "to",
    "search",
    "for",
    "matching",
    "entries",
    "in",
    "repository",
    "with",
    "optional",
    "filters",
    "results",
    "are",
    "sorted",
    "by",
    "relevance",
    "limit",
    "number",
    "items",
    "returned",
    "each",
    "call",
    "creates",
    "updates",
    "record",
    "when",
    "it",
    "does",
    "not",
    "exist",
    "yet",
    "fails",
    "if",
    "path",
    "is",
    "outside",
    "sandbox",
    "remote",
    "service",
    "account",
    "project",
    "issue",
];

const PROPERTY_NAMES: &[&str] = &[
    "path",
    "query",
    "limit",
    "offset",
    "sort",
    "options",
    "tags",
    "recursive",
    "encoding",
    "timeout",
    "branch",
    "message",
    "target",
    "format",
    "filter",
    "depth",
    "title",
    "priority",
];

const ENUMS: &[&[&str]] = &[
    &["asc", "desc"],
    &["utf-8", "latin1", "base64"],
    &["low", "medium", "high", "urgent"],
    &["json", "text", "markdown"],
];

fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

fn sentence(rng: &mut Rng, at_least: usize) -> String {
    let mut text = String::new();
    while text.len() < at_least {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[rng.below(WORDS.len())]);
    }
    let mut chars = text.chars();
    let first = chars.next().map(|c| c.to_ascii_uppercase()).unwrap_or('A');
    format!("{first}{}.", chars.as_str())
}

fn description(rng: &mut Rng) -> String {
    let mut text = sentence(rng, 120);
    match rng.below(4) {
        0 => text.push_str("\nReturns \"ok\" on success."),
        1 => text.push_str(" Use `dryRun` to preview the change first."),
        _ => {}
    }
    text.push(' ');
    text.push_str(&sentence(rng, 200usize.saturating_sub(text.len()).max(20)));
    text
}

fn property(rng: &mut Rng) -> String {
    match rng.below(7) {
        0 => format!(
            r#"{{"type":"string","description":{}}}"#,
            quoted(&sentence(rng, 40))
        ),
        1 => format!(
            r#"{{"type":"integer","minimum":0,"maximum":{},"description":{}}}"#,
            100 * (1 + rng.below(100)),
            quoted(&sentence(rng, 30))
        ),
        2 => format!(
            r#"{{"type":"number","exclusiveMinimum":0,"default":{}.{}}}"#,
            rng.below(10),
            1 + rng.below(99)
        ),
        3 => {
            let values = ENUMS[rng.below(ENUMS.len())];
            let items: Vec<String> = values.iter().map(|v| quoted(v)).collect();
            format!(
                r#"{{"type":"string","enum":[{}],"default":{}}}"#,
                items.join(","),
                quoted(values[0])
            )
        }
        4 => format!(r#"{{"type":"boolean","default":{}}}"#, rng.below(2) == 1),
        5 => format!(
            r#"{{"type":"array","items":{{"type":"string"}},"maxItems":{},"description":{}}}"#,
            4 + rng.below(60),
            quoted(&sentence(rng, 25))
        ),
        _ => String::from(
            r#"{"type":"object","properties":{"host":{"type":"string"},"port":{"type":"integer","minimum":1,"maximum":65535},"secure":{"type":"boolean"}},"required":["host"],"additionalProperties":false}"#,
        ),
    }
}

/// The property names of tool `index`'s schema, in order (the first `required` of them are
/// required): what a rule may deny.
pub fn tool_properties(rng: &mut Rng) -> (Vec<&'static str>, usize) {
    let count = 3 + rng.below(4);
    let start = rng.below(PROPERTY_NAMES.len());
    let names = (0..count)
        .map(|k| PROPERTY_NAMES[(start + k * 5) % PROPERTY_NAMES.len()])
        .collect();
    (names, 1 + rng.below(2))
}

/// One tool entry's JSON text, and the names of its optional (not required) properties.
pub fn tool(index: usize, rng: &mut Rng) -> (String, Vec<&'static str>) {
    let (names, required) = tool_properties(rng);
    let mut properties = String::new();
    for (k, name) in names.iter().enumerate() {
        if k > 0 {
            properties.push(',');
        }
        let _ = write!(properties, "{}:{}", quoted(name), property(rng));
    }
    let required_list: Vec<String> = names.iter().take(required).map(|n| quoted(n)).collect();
    let mut text = format!(
        r#"{{"name":{},"description":{},"inputSchema":{{"type":"object","properties":{{{properties}}},"required":[{}],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}}"#,
        quoted(&tool_name(index)),
        quoted(&description(rng)),
        required_list.join(",")
    );
    if rng.below(2) == 0 {
        // Consistent with the effect `rules` gives the tool: a hint that claims more than
        // the operator's effect would refuse it.
        let read_only = !index.is_multiple_of(10);
        let _ = write!(
            text,
            r#","annotations":{{"title":{},"readOnlyHint":{read_only},"destructiveHint":false,"openWorldHint":false}}"#,
            quoted(&sentence(rng, 12))
        );
    }
    text.push('}');
    (text, names.into_iter().skip(required).collect())
}

/// A synthetic listing of `tools` tools in pages of at most `per_page` (the exact bytes of
/// each `tools/list` result, `nextCursor` linking them), and each tool's optional properties.
pub fn listing(tools: usize, per_page: usize) -> (Vec<Vec<u8>>, Vec<Vec<&'static str>>) {
    let mut rng = Rng::new(0x746f_6f6c_7761_7264);
    let mut pages = Vec::new();
    let mut optional = Vec::with_capacity(tools);
    let mut page = String::new();
    for index in 0..tools {
        page.push_str(if page.is_empty() {
            r#"{"tools":["#
        } else {
            ","
        });
        let (text, names) = tool(index, &mut rng);
        page.push_str(&text);
        optional.push(names);
        let last = index + 1 == tools;
        if (index + 1).is_multiple_of(per_page) || last {
            page.push(']');
            if !last {
                let _ = write!(
                    page,
                    r#","nextCursor":{}"#,
                    quoted(&format!("p{}", index + 1))
                );
            }
            page.push('}');
            pages.push(std::mem::take(&mut page).into_bytes());
        }
    }
    if pages.is_empty() {
        pages.push(br#"{"tools":[]}"#.to_vec());
    }
    (pages, optional)
}

/// A rules file classifying every tool of a synthetic listing of server `server`: one in ten
/// `local-change`, the rest `read-only`, and one in five denying its last optional property
/// (so narrowing has work to do).
pub fn rules(server: &str, optional: &[Vec<&str>]) -> String {
    let mut text = format!(r#"{{"servers":{{{}:{{"tools":{{"#, quoted(server));
    for (index, names) in optional.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        let effect = if index.is_multiple_of(10) {
            "local-change"
        } else {
            "read-only"
        };
        let _ = write!(
            text,
            r#"{}:{{"effect":"{effect}""#,
            quoted(&tool_name(index))
        );
        if index.is_multiple_of(5)
            && let Some(name) = names.last()
        {
            let _ = write!(text, r#","deny":[{}]"#, quoted(name));
        }
        text.push('}');
    }
    text.push_str("}}}}");
    text
}

/// Listing bounds past every listing here (the defaults stop at 4,096 tools and 16 MiB a
/// page).
pub fn unbounded() -> toolward::listing::ListingBounds {
    toolward::listing::ListingBounds {
        max_pages: u64::MAX,
        max_tools: u64::MAX,
        max_page_bytes: u64::MAX,
        max_listing_bytes: u64::MAX,
        ..toolward::listing::ListingBounds::default()
    }
}
