//! Listing: a server's tools from `tools/list` (MCP specification, "Tools", listing tools),
//! page after page by `nextCursor`, read from the exact bytes the server sent.
//!
//! # Pages
//!
//! [`list_tools`] asks for the first page without a cursor, then for each next page with the
//! previous page's `nextCursor`, until a page has none (or has `null`). Each page is read by
//! [`parse_page`] with [`canonical::parse`], so a number keeps its exact decimal value and the
//! hashes see a bound moved from `9007199254740993` to `9007199254740992`. The whole listing
//! of a server is refused ([`ListingError`]) when:
//!
//! - a `nextCursor` repeats one the server gave before (the empty string is a cursor like any
//!   other): the listing would never end;
//! - a page is longer than [`ListingBounds::max_page_bytes`], the pages together longer than
//!   [`ListingBounds::max_listing_bytes`], the entries more than [`ListingBounds::max_tools`],
//!   or the server has more than [`ListingBounds::max_pages`] pages; each message names the
//!   value, the limit and the config field that sets it;
//! - a page is not JSON, has no `tools` array, or a `nextCursor` that is not a string.
//!
//! # Tools
//!
//! One tool entry that is wrong refuses that tool only ([`Listing::malformed`], with a
//! reason), and the rest loads. An entry is malformed when:
//!
//! - its canonical JSON text is longer than [`ListingBounds::max_tool_bytes`] (measured on the
//!   canonical text, so the server's whitespace and escapes neither help nor hurt);
//! - it is not an object, has no string `name`, or an empty one;
//! - `description` or `title` is not a string; `inputSchema` is missing or not an object;
//!   `outputSchema` or `annotations` is present and not an object; a hint of `annotations`
//!   (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`) is not a boolean,
//!   or its `title` is not a string;
//! - `inputSchema`, `outputSchema` or `annotations` nests deeper than
//!   [`MAX_TOOL_VALUE_DEPTH`] (so that the pinned manifest, which nests them two levels deeper
//!   than a page does, can always be read back);
//! - text aimed at the model holds a character the operator reviewing it would not see (see
//!   [`crate::text::hidden_character`]): in the `name`, `title` or `description`, or in any
//!   key or string value of `inputSchema`, `outputSchema` or `annotations`. The reason names
//!   the code point (`U+200B`) and where it sits (`description`, or the schema and a JSON
//!   Pointer).
//!
//! An optional member (`description`, `title`, `outputSchema`, `annotations`) that is `null`
//! counts as absent. A name listed twice, on one page or on two, is a duplicate
//! ([`Listing::duplicates`]): every entry of that name is left out of [`Listing::tools`],
//! since toolward cannot tell which one the server will run.

use std::collections::{HashMap, HashSet};

use crate::canonical::{self, CanonicalError, Value};
use crate::component::Annotations;
use crate::config::Limits;
use crate::text::{self, hidden_character, presentation_selector};
use crate::transport::{TransportError, Upstream};

/// Deepest nesting of a tool's `inputSchema`, `outputSchema` or `annotations`, in JSON levels
/// below the value itself (see [`crate::schema::MAX_SCHEMA_DEPTH`], whose value it takes:
/// load refuses a deeper schema anyway). Far below [`canonical::MAX_JSON_DEPTH`], so the
/// manifest that embeds these values a few levels deeper still parses.
pub const MAX_TOOL_VALUE_DEPTH: usize = crate::schema::MAX_SCHEMA_DEPTH;

/// Longest piece of server text (a cursor) quoted in an error message, in bytes.
const MAX_QUOTED_BYTES: usize = 128;

/// The bounds on one server's listing. Every field is a config limit (`limits`, or a
/// server's own `limits`), with the config's defaults:
/// `max_pages` [`crate::config::DEFAULT_MAX_LISTING_PAGES`] (64), `max_tools`
/// [`crate::config::DEFAULT_MAX_TOOLS`] (4096), `max_page_bytes` [`crate::config::DEFAULT_MAX_PAGE_BYTES`]
/// (16 MiB), `max_listing_bytes` [`crate::config::DEFAULT_MAX_LISTING_BYTES`] (64 MiB),
/// `max_tool_bytes` [`crate::config::DEFAULT_MAX_TOOL_BYTES`] (256 KiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingBounds {
    /// Most pages (`max_listing_pages`).
    pub max_pages: u64,
    /// Most tool entries over all pages, malformed ones included (`max_tools`).
    pub max_tools: u64,
    /// Longest page: the bytes of one `result` object (`max_page_bytes`).
    pub max_page_bytes: u64,
    /// Most bytes over all pages (`max_listing_bytes`).
    pub max_listing_bytes: u64,
    /// Longest tool entry, in bytes of its canonical JSON text (`max_tool_bytes`).
    pub max_tool_bytes: u64,
}

impl Default for ListingBounds {
    fn default() -> Self {
        Self::from(&Limits::default())
    }
}

impl From<&Limits> for ListingBounds {
    fn from(limits: &Limits) -> Self {
        Self {
            max_pages: limits.max_listing_pages,
            max_tools: limits.max_tools,
            max_page_bytes: limits.max_page_bytes,
            max_listing_bytes: limits.max_listing_bytes,
            max_tool_bytes: limits.max_tool_bytes,
        }
    }
}

/// One well-formed tool as the server listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTool {
    /// `name`.
    pub name: String,
    /// `description`, decoded; `""` when absent.
    pub description: String,
    /// SHA-256 of the description's UTF-8 bytes, lowercase hex.
    pub description_sha256: String,
    /// `inputSchema`, exact.
    pub input_schema: Value,
    /// SHA-256 of the canonical text of `inputSchema`, lowercase hex.
    pub input_schema_sha256: String,
    /// The canonical text of `inputSchema`: what its hash is of, kept for the rules
    /// component, which classifies the tool by it (writing it again took a twelfth of a load).
    pub input_schema_text: String,
    /// `outputSchema`, exact, when present.
    pub output_schema: Option<Value>,
    /// SHA-256 of the canonical text of `outputSchema`, lowercase hex, when present.
    pub output_schema_sha256: Option<String>,
    /// `annotations`, decoded; every field `None` when absent.
    pub annotations: Annotations,
    /// `annotations` as received (exact, members sorted), when present.
    pub annotations_raw: Option<Value>,
}

/// A server's whole listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The server's name in the configuration.
    pub server: String,
    /// The well-formed tools, in the server's order; names are unique, and no name of
    /// [`Listing::duplicates`] is among them.
    pub tools: Vec<ListedTool>,
    /// Names listed more than once (on one page or across pages), in order of first listing:
    /// every entry of such a name is left out of [`Listing::tools`].
    pub duplicates: Vec<String>,
    /// Malformed entries, in the server's order: the tool's name (or `#index`, its position in
    /// the whole listing counted from 0, when it has no string name) and why. A malformed
    /// entry of a duplicated name is listed here too.
    pub malformed: Vec<(String, String)>,
    /// Pages read.
    pub pages: u64,
    /// Bytes read, over all pages.
    pub bytes: u64,
}

/// One page of `tools/list`, read by [`parse_page`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The entries of `tools`, in order.
    pub entries: Vec<PageEntry>,
    /// `nextCursor`, when the page has one (`null` counts as none).
    pub next_cursor: Option<String>,
}

/// One entry of a page's `tools`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEntry {
    /// Its position in the page, from 0.
    pub index: u64,
    /// Its `name`, when that is a string (even when the entry is malformed).
    pub name: Option<String>,
    /// The tool, or why the entry is malformed.
    pub tool: Result<ListedTool, String>,
}

/// Why a server's listing was refused as a whole. Each names the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListingError {
    /// A `tools/list` request failed.
    #[error("could not list the tools of server `{server}`")]
    Transport {
        /// The server's name in the configuration.
        server: String,
        /// Why (boxed: it is large, and rare).
        #[source]
        source: Box<TransportError>,
    },
    /// A page is not JSON text.
    #[error("server `{server}` sent `tools/list` page {page}, which is not valid JSON")]
    NotJson {
        /// The server's name in the configuration.
        server: String,
        /// The page, counted from 1.
        page: u64,
        /// Why.
        #[source]
        source: CanonicalError,
    },
    /// A page is JSON but not a `tools/list` result.
    #[error("server `{server}` sent `tools/list` page {page}, which {detail}")]
    PageShape {
        /// The server's name in the configuration.
        server: String,
        /// The page, counted from 1.
        page: u64,
        /// What is wrong.
        detail: &'static str,
    },
    /// A `nextCursor` the server gave before: the listing would not end.
    #[error(
        "server `{server}` repeated the cursor `{cursor}` on `tools/list` page {page}, so its listing would not end"
    )]
    CursorRepeated {
        /// The server's name in the configuration.
        server: String,
        /// The page, counted from 1.
        page: u64,
        /// The cursor, escaped (see [`crate::text`]) and shortened.
        cursor: String,
    },
    /// More pages than [`ListingBounds::max_pages`].
    #[error(
        "server `{server}` listed more than {limit} pages of tools (bound `max_listing_pages`)"
    )]
    TooManyPages {
        /// The server's name in the configuration.
        server: String,
        /// The bound.
        limit: u64,
    },
    /// More tool entries than [`ListingBounds::max_tools`].
    #[error("server `{server}` listed {count} tools, more than {limit} (bound `max_tools`)")]
    TooManyTools {
        /// The server's name in the configuration.
        server: String,
        /// Entries listed up to and including the page that went past the bound.
        count: u64,
        /// The bound.
        limit: u64,
    },
    /// A page longer than [`ListingBounds::max_page_bytes`].
    #[error(
        "server `{server}` sent `tools/list` page {page} of {bytes} bytes, more than {limit} (bound `max_page_bytes`)"
    )]
    PageTooLarge {
        /// The server's name in the configuration.
        server: String,
        /// The page, counted from 1.
        page: u64,
        /// Its length (bytes).
        bytes: u64,
        /// The bound (bytes).
        limit: u64,
    },
    /// Pages together longer than [`ListingBounds::max_listing_bytes`].
    #[error(
        "server `{server}` sent {bytes} bytes of `tools/list` pages, more than {limit} (bound `max_listing_bytes`)"
    )]
    ListingTooLarge {
        /// The server's name in the configuration.
        server: String,
        /// Bytes up to and including the page that went past the bound.
        bytes: u64,
        /// The bound (bytes).
        limit: u64,
    },
}

/// Lists every tool of `upstream`, following `nextCursor` (see the module documentation).
/// The server stays open; the caller closes it.
///
/// # Errors
///
/// [`ListingError::Transport`] when a request fails; any other [`ListingError`] when the
/// listing breaks a rule or a bound. A malformed or duplicated tool is not an error: it is in
/// [`Listing::malformed`] or [`Listing::duplicates`].
pub async fn list_tools(
    upstream: &Upstream,
    bounds: &ListingBounds,
) -> Result<Listing, ListingError> {
    let mut builder = ListingBuilder::new(upstream.server(), *bounds);
    let mut cursor: Option<String> = None;
    loop {
        let bytes = upstream
            .list_tools_page(cursor.as_deref())
            .await
            .map_err(|source| ListingError::Transport {
                server: upstream.server().to_owned(),
                source: Box::new(source),
            })?;
        match builder.push_page(&bytes)? {
            Some(next) => cursor = Some(next),
            None => return Ok(builder.finish()),
        }
    }
}

/// Builds a [`Listing`] from pages as they arrive, applying every rule and bound of the module
/// documentation; [`list_tools`] drives it, tests feed it synthetic pages.
#[derive(Debug)]
pub struct ListingBuilder {
    server: String,
    bounds: ListingBounds,
    cursors: HashSet<String>,
    entries: u64,
    listing: Listing,
    /// Every entry's name with the number of entries that carry it.
    names: HashMap<String, u64>,
    /// Names in order of first listing.
    order: Vec<String>,
}

impl ListingBuilder {
    /// A listing of server `server` (its name in the configuration) under `bounds`.
    pub fn new(server: &str, bounds: ListingBounds) -> Self {
        Self {
            server: server.to_owned(),
            bounds,
            cursors: HashSet::new(),
            entries: 0,
            listing: Listing {
                server: server.to_owned(),
                ..Listing::default()
            },
            names: HashMap::new(),
            order: Vec::new(),
        }
    }

    /// Adds the next page (the exact bytes of a `tools/list` `result`). Returns the cursor to
    /// ask for the next page with, or `None` when the listing is complete.
    ///
    /// # Errors
    ///
    /// Any [`ListingError`] but [`ListingError::Transport`]; the listing is then refused as a
    /// whole and the builder should be dropped.
    pub fn push_page(&mut self, bytes: &[u8]) -> Result<Option<String>, ListingError> {
        let page_number = self.listing.pages + 1;
        let length = len_u64(bytes);
        let total = self.listing.bytes.saturating_add(length);
        // A page past its own bound is refused for that bound, by `parse_page`.
        if length <= self.bounds.max_page_bytes && total > self.bounds.max_listing_bytes {
            return Err(ListingError::ListingTooLarge {
                server: self.server.clone(),
                bytes: total,
                limit: self.bounds.max_listing_bytes,
            });
        }
        let page = parse_page(&self.server, page_number, bytes, &self.bounds)?;
        self.listing.pages = page_number;
        self.listing.bytes = total;

        let count = self.entries.saturating_add(len_u64(&page.entries));
        if count > self.bounds.max_tools {
            return Err(ListingError::TooManyTools {
                server: self.server.clone(),
                count,
                limit: self.bounds.max_tools,
            });
        }
        if let Some(cursor) = &page.next_cursor {
            if self.cursors.contains(cursor) {
                return Err(ListingError::CursorRepeated {
                    server: self.server.clone(),
                    page: page_number,
                    cursor: text::quote(cursor, MAX_QUOTED_BYTES),
                });
            }
            if page_number >= self.bounds.max_pages {
                return Err(ListingError::TooManyPages {
                    server: self.server.clone(),
                    limit: self.bounds.max_pages,
                });
            }
            self.cursors.insert(cursor.clone());
        }

        for entry in page.entries {
            let position = self.entries + entry.index;
            if let Some(name) = &entry.name {
                let seen = self.names.entry(name.clone()).or_insert(0);
                if *seen == 0 {
                    self.order.push(name.clone());
                }
                *seen += 1;
            }
            match entry.tool {
                Ok(tool) => self.listing.tools.push(tool),
                Err(reason) => {
                    let label = entry.name.unwrap_or_else(|| format!("#{position}"));
                    self.listing.malformed.push((label, reason));
                }
            }
        }
        self.entries = count;
        Ok(page.next_cursor)
    }

    /// The listing of the pages added so far, duplicates taken out of the tools.
    pub fn finish(self) -> Listing {
        let mut listing = self.listing;
        let names = self.names;
        let repeated = |name: &String| names.get(name).is_some_and(|&n| n > 1);
        listing.duplicates = self.order.into_iter().filter(|n| repeated(n)).collect();
        listing.tools.retain(|tool| !repeated(&tool.name));
        listing
    }
}

/// Reads one `tools/list` page: the exact bytes of the `result` object. `server` and `page`
/// (counted from 1) name it in errors. Pure: no server needed.
///
/// # Errors
///
/// [`ListingError::PageTooLarge`] past [`ListingBounds::max_page_bytes`] (checked before
/// parsing), [`ListingError::NotJson`], [`ListingError::PageShape`] when `tools` is missing or
/// not an array or `nextCursor` is neither a string nor `null`.
pub fn parse_page(
    server: &str,
    page: u64,
    bytes: &[u8],
    bounds: &ListingBounds,
) -> Result<Page, ListingError> {
    let length = len_u64(bytes);
    if length > bounds.max_page_bytes {
        return Err(ListingError::PageTooLarge {
            server: server.to_owned(),
            page,
            bytes: length,
            limit: bounds.max_page_bytes,
        });
    }
    let mut value = canonical::parse(bytes).map_err(|source| ListingError::NotJson {
        server: server.to_owned(),
        page,
        source,
    })?;
    let shape = |detail| ListingError::PageShape {
        server: server.to_owned(),
        page,
        detail,
    };
    if value.as_object().is_none() {
        return Err(shape("is not an object"));
    }
    let next_cursor = match value.get("nextCursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(cursor.clone()),
        Some(_) => return Err(shape("has a `nextCursor` that is not a string")),
    };
    // Owned, so each tool keeps its schemas without a deep copy (copying every schema, and
    // dropping the copies, took two fifths of reading a page: BENCHMARKS.md §10.4).
    let Some(Value::Array(tools)) = value.take_member("tools") else {
        return Err(shape("has no `tools` array"));
    };
    let entries = tools
        .into_iter()
        .zip(0_u64..)
        .map(|(mut entry, index)| PageEntry {
            index,
            name: entry.get("name").and_then(Value::as_str).map(str::to_owned),
            tool: read_tool(&mut entry, bounds),
        })
        .collect();
    Ok(Page {
        entries,
        next_cursor,
    })
}

/// The first hidden character of `text` with its kind; `layout` allows tab, line feed and a
/// carriage return before a line feed.
fn find_hidden(text: &str, layout: bool) -> Option<(char, &'static str)> {
    // Printable ASCII is never hidden, and most text is nothing else: skip the char walk.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    let mut chars = text.chars().peekable();
    let mut previous = None;
    while let Some(c) = chars.next() {
        let before = previous.replace(c);
        let Some(kind) = hidden_character(c) else {
            continue;
        };
        if presentation_selector(c, before) {
            continue;
        }
        let is_layout = c == '\t' || c == '\n' || (c == '\r' && chars.peek() == Some(&'\n'));
        if !(layout && is_layout) {
            return Some((c, kind));
        }
    }
    None
}

/// The reason for a hidden character `c` of kind `kind` found `where_`.
fn hidden_reason(c: char, kind: &str, where_: &str) -> String {
    format!(
        "{kind} U+{:04X} in {where_}, which a reviewer would not see",
        u32::from(c)
    )
}

/// Refuses hidden characters in a member's text: `what` names the member (`` `description` ``).
fn check_text(text: &str, layout: bool, what: &str) -> Result<(), String> {
    match find_hidden(text, layout) {
        Some((c, kind)) => Err(hidden_reason(c, kind, what)),
        None => Ok(()),
    }
}

/// Refuses hidden characters in every key (no layout allowed) and string value (layout
/// allowed) of `value`, the member `what` of the tool; the reason gives the JSON Pointer.
fn check_strings(value: &Value, what: &str) -> Result<(), String> {
    // Most values hold nothing hidden: find that out without building a pointer per value
    // (that was a fifth of reading a page), and build pointers only to name the place.
    if !any_hidden(value) {
        return Ok(());
    }
    let mut stack: Vec<(String, &Value)> = vec![(String::new(), value)];
    while let Some((pointer, value)) = stack.pop() {
        match value {
            Value::String(text) => {
                if let Some((c, kind)) = find_hidden(text, true) {
                    let at = format!("{what} at `{}`", text::escape(&pointer));
                    return Err(hidden_reason(c, kind, &at));
                }
            }
            Value::Array(items) => {
                // Reversed, so the walk reports the first place in document order.
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push((format!("{pointer}/{i}"), item));
                }
            }
            Value::Object(members) => {
                for (key, item) in members.iter().rev() {
                    let member = format!("{pointer}/{}", canonical::pointer_token(key));
                    if let Some((c, kind)) = find_hidden(key, false) {
                        let at = format!("{what} in the key at `{}`", text::escape(&member));
                        return Err(hidden_reason(c, kind, &at));
                    }
                    stack.push((member, item));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    Ok(())
}

/// Whether any key (no layout allowed) or string value (layout allowed) of `value` holds a
/// hidden character: what [`check_strings`] refuses, without the pointers.
fn any_hidden(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(text) => {
                if find_hidden(text, true).is_some() {
                    return true;
                }
            }
            Value::Array(items) => stack.extend(items),
            Value::Object(members) => {
                for (key, item) in members {
                    if find_hidden(key, false).is_some() {
                        return true;
                    }
                    stack.push(item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    false
}

/// Member `key` of a tool entry; `null` counts as absent.
fn optional<'v>(entry: &'v Value, key: &str) -> Option<&'v Value> {
    entry.get(key).filter(|value| !value.is_null())
}

/// An object-valued member (`inputSchema`, `outputSchema`, `annotations`), checked for depth
/// and hidden characters.
fn object_member<'v>(entry: &'v Value, key: &str) -> Result<Option<&'v Value>, String> {
    let Some(value) = optional(entry, key) else {
        return Ok(None);
    };
    let what = format!("`{key}`");
    if value.as_object().is_none() {
        return Err(format!("{what} is not an object"));
    }
    if value.nests_deeper_than(MAX_TOOL_VALUE_DEPTH) {
        return Err(format!(
            "{what} nests deeper than {MAX_TOOL_VALUE_DEPTH} levels"
        ));
    }
    check_strings(value, &what)?;
    Ok(Some(value))
}

/// Reads one entry of `tools`, or says why it is malformed. What the tool keeps (its
/// description, schemas and annotations) is moved out of `entry`, which is left with `null`s.
fn read_tool(entry: &mut Value, bounds: &ListingBounds) -> Result<ListedTool, String> {
    let Some(members) = entry.as_object() else {
        return Err(String::from("the entry is not an object"));
    };
    // The text hashed below, written first so that the entry's length counts it without a
    // second walk over the schema (that walk was a fifth of reading a page). `null` counts
    // as absent; any other value that is not an object is refused below, its text unused.
    let input_text = optional(entry, "inputSchema").map(canonical::to_canonical);
    let known = input_text.as_ref().map(|text| ("inputSchema", text.len()));
    let bytes = u64::try_from(canonical::object_len(members, known)).unwrap_or(u64::MAX);
    if bytes > bounds.max_tool_bytes {
        return Err(format!(
            "the entry is {bytes} bytes long, more than {} (bound `max_tool_bytes`)",
            bounds.max_tool_bytes
        ));
    }
    let name = match entry.get("name") {
        Some(Value::String(name)) => name,
        Some(_) => return Err(String::from("`name` is not a string")),
        None => return Err(String::from("it has no `name`")),
    };
    if name.is_empty() {
        return Err(String::from("`name` is empty"));
    }
    check_text(name, false, "`name`")?;
    let description = match optional(entry, "description") {
        None => "",
        Some(Value::String(text)) => text.as_str(),
        Some(_) => return Err(String::from("`description` is not a string")),
    };
    check_text(description, true, "`description`")?;
    match optional(entry, "title") {
        None => {}
        Some(Value::String(title)) => check_text(title, true, "`title`")?,
        Some(_) => return Err(String::from("`title` is not a string")),
    }
    let (Some(_), Some(input_text)) = (object_member(entry, "inputSchema")?, input_text) else {
        return Err(String::from("it has no `inputSchema`"));
    };
    let output_schema = object_member(entry, "outputSchema")?;
    let annotations_raw = object_member(entry, "annotations")?;
    let annotations = match annotations_raw {
        Some(raw) => read_annotations(raw)?,
        None => Annotations::default(),
    };
    let name = name.clone();
    let description_sha256 = canonical::sha256_hex(description.as_bytes());
    let input_schema_sha256 = canonical::sha256_hex(input_text.as_bytes());
    let output_schema_sha256 = output_schema
        .map(|schema| canonical::sha256_hex(canonical::to_canonical(schema).as_bytes()));
    // Checked above: move what is kept out of the entry instead of copying it (`null` counts
    // as absent, as in `optional`).
    let mut take = |key: &str| entry.take_member(key).filter(|value| !value.is_null());
    let description = match take("description") {
        Some(Value::String(text)) => text,
        _ => String::new(),
    };
    let input_schema = take("inputSchema").unwrap_or(Value::Null);
    let output_schema = take("outputSchema");
    let annotations_raw = take("annotations");
    Ok(ListedTool {
        name,
        description,
        description_sha256,
        input_schema_sha256,
        input_schema_text: input_text,
        input_schema,
        output_schema_sha256,
        output_schema,
        annotations,
        annotations_raw,
    })
}

/// The annotations (MCP specification, "Tool annotations"); a hint that is present must be a
/// boolean and `title` a string (`null` counts as absent). Other members are kept only in
/// [`ListedTool::annotations_raw`].
fn read_annotations(raw: &Value) -> Result<Annotations, String> {
    let hint = |key: &str| match optional(raw, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("`annotations.{key}` is not a boolean")),
    };
    let title = match optional(raw, "title") {
        None => None,
        Some(Value::String(title)) => Some(title.clone()),
        Some(_) => return Err(String::from("`annotations.title` is not a string")),
    };
    Ok(Annotations {
        title,
        read_only_hint: hint("readOnlyHint")?,
        destructive_hint: hint("destructiveHint")?,
        idempotent_hint: hint("idempotentHint")?,
        open_world_hint: hint("openWorldHint")?,
    })
}

/// A length as `u64` (lengths in memory always fit).
fn len_u64<T>(items: &[T]) -> u64 {
    u64::try_from(items.len()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "listing/tests.rs"]
mod tests;
