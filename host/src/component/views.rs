//! What a guest sees: the tools, annotations, classifications and calls passed to it.

use base64::Engine as _;
use serde_json::Value as Json;

use super::Effect;
use crate::canonical;

/// The host's view of a tool, passed to `classify` (WIT `types.tool`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolView {
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's name as the server sent it.
    pub name: String,
    /// The description, decoded.
    pub description: String,
    /// The input schema in canonical JSON form.
    pub input_schema: String,
    /// The server's annotations.
    pub annotations: Annotations,
    /// SHA-256 of the description, lowercase hex.
    pub description_sha256: String,
    /// SHA-256 of the canonical input schema, lowercase hex.
    pub input_schema_sha256: String,
}

/// A registered tool as `validation.validate` sees it (WIT 0.2.0 `types.registered-tool`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredToolView {
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's name as the server knows it.
    pub name: String,
    /// The operator's effect.
    pub effect: Effect,
    /// The tool's `inputSchema` as the server sent it, canonical JSON.
    pub input_schema: String,
}

/// A tool's annotations as received (MCP spec, "Tool annotations"); `None` when absent.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Annotations {
    /// `title`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `readOnlyHint`
    #[serde(rename = "readOnlyHint", skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`
    #[serde(rename = "destructiveHint", skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`
    #[serde(rename = "idempotentHint", skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// `openWorldHint`
    #[serde(rename = "openWorldHint", skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// The operator's classification of a tool, as a rules component returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// The operator's effect.
    pub effect: Effect,
    /// Parameters hidden and refused.
    pub denied_parameters: Vec<String>,
    /// Parameters hidden and set by the host: name and JSON text.
    pub fixed_parameters: Vec<(String, String)>,
    /// The description the model sees instead of the server's.
    pub description_override: Option<String>,
    /// Accept a hint claiming more effect than `effect`.
    pub allow_hint_mismatch: bool,
}

/// One call, as the policy sees it (WIT `types.call`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallView {
    /// Host-generated call id.
    pub id: String,
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's upstream name.
    pub tool: String,
    /// The operator's effect.
    pub effect: Effect,
    /// Final arguments, canonical JSON.
    pub arguments: String,
    /// SHA-256 of `arguments`, lowercase hex.
    pub arguments_sha256: String,
    /// Who asked.
    pub principal: String,
    /// The principal's attributes: name and JSON text (`policy@0.3.0` only; empty until an
    /// identity provider supplies them).
    pub principal_attributes: Vec<(String, String)>,
    /// The client connection.
    pub session: String,
    /// The labels of the session (or principal) before this call (`policy@0.3.0` only).
    pub labels: Labels,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Host facts: name and JSON text.
    pub facts: Vec<(String, String)>,
}

/// What a session has seen (WIT 0.3.0 `types.labels`): whether untrusted content reached
/// it, the highest confidentiality of what reached it, and free tags. Joined as results
/// arrive, never lowered within a session (`LabelSettings::join` joins them).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Labels {
    /// Untrusted content has reached the session.
    #[serde(default)]
    pub untrusted: bool,
    /// The highest confidentiality level that reached it; empty: none labelled.
    #[serde(default)]
    pub confidentiality: String,
    /// Free tags, sorted, without duplicates.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// What kind of content block a [`BlockView`] is (WIT 0.3.0 `types.block-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// A `text` block.
    Text,
    /// The result's `structuredContent`, as canonical JSON text.
    Structured,
    /// An embedded `resource` with `text`.
    ResourceText,
    /// A `resource_link`, as canonical JSON text.
    ResourceLink,
    /// An `image` block.
    Image,
    /// An `audio` block.
    Audio,
    /// An embedded `resource` with a `blob`.
    Blob,
    /// A block of another type, as canonical JSON text.
    Other,
}

impl BlockKind {
    /// Whether the block carries text a review reads and may redact.
    pub fn has_text(self) -> bool {
        matches!(
            self,
            BlockKind::Text
                | BlockKind::Structured
                | BlockKind::ResourceText
                | BlockKind::ResourceLink
                | BlockKind::Other
        )
    }
}

/// One block of a result as a review sees it (WIT 0.3.0 `types.block`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockView {
    /// The kind of block.
    pub kind: BlockKind,
    /// The text reviewed; empty for binary blocks.
    pub text: String,
    /// The MIME type the server gave.
    pub mime_type: Option<String>,
    /// The URI of a resource or link; empty otherwise.
    pub uri: String,
    /// Size in bytes of the text or of the decoded binary data.
    pub size: u64,
    /// SHA-256 of the decoded binary data, lowercase hex; empty for text blocks.
    pub sha256: String,
}

/// What a tool returned, as a review sees it (WIT 0.3.0 `types.tool-result`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResultView {
    /// The server marked the result an error.
    pub is_error: bool,
    /// The content blocks, then `structuredContent` as the last block when present.
    pub blocks: Vec<BlockView>,
    /// Size in bytes of the result as received.
    pub received_bytes: u64,
}

impl ResultView {
    /// A result as a review sees it: its blocks ([`ResultView::blocks`]): each content item in order, then
    /// `structured` (the `structuredContent`) when present.
    pub fn of(content: &[Json], structured: Option<&Json>, is_error: bool, received_bytes: u64) -> ResultView {
        let mut blocks: Vec<BlockView> = content.iter().map(block_view).collect();
        if let Some(structured) = structured {
            let text = canonical_text(structured);
            blocks.push(BlockView {
                kind: BlockKind::Structured,
                size: text.len() as u64,
                text,
                mime_type: None,
                uri: String::new(),
                sha256: String::new(),
            });
        }
        ResultView {
            is_error,
            blocks,
            received_bytes,
        }
    }
}

fn canonical_text(value: &Json) -> String {
    canonical::to_canonical(&canonical::Value::from_serde_json(value))
}

fn text_block(kind: BlockKind, text: String, mime_type: Option<String>, uri: String) -> BlockView {
    BlockView {
        kind,
        size: text.len() as u64,
        text,
        mime_type,
        uri,
        sha256: String::new(),
    }
}

/// A binary block: the size and SHA-256 of the decoded data (of the text itself when it is
/// not valid base64: the review still sees what arrived).
fn binary_block(kind: BlockKind, data: &str, mime_type: Option<String>, uri: String) -> BlockView {
    let decoded = base64::engine::general_purpose::STANDARD.decode(data.as_bytes());
    let bytes = decoded.as_deref().unwrap_or(data.as_bytes());
    BlockView {
        kind,
        text: String::new(),
        mime_type,
        uri,
        size: bytes.len() as u64,
        sha256: canonical::sha256_hex(bytes),
    }
}

fn block_view(item: &Json) -> BlockView {
    let str_of = |value: Option<&Json>| value.and_then(Json::as_str).map(str::to_owned);
    let kind = item.get("type").and_then(Json::as_str).unwrap_or("");
    let mime = str_of(item.get("mimeType"));
    match kind {
        "text" => match item.get("text").and_then(Json::as_str) {
            Some(text) => text_block(BlockKind::Text, text.to_owned(), None, String::new()),
            None => text_block(BlockKind::Other, canonical_text(item), None, String::new()),
        },
        "image" | "audio" => match item.get("data").and_then(Json::as_str) {
            Some(data) => binary_block(
                if kind == "image" { BlockKind::Image } else { BlockKind::Audio },
                data,
                mime,
                String::new(),
            ),
            None => text_block(BlockKind::Other, canonical_text(item), mime, String::new()),
        },
        "resource" => {
            let resource = item.get("resource");
            let uri = str_of(resource.and_then(|r| r.get("uri"))).unwrap_or_default();
            let mime = str_of(resource.and_then(|r| r.get("mimeType")));
            match (
                resource.and_then(|r| r.get("text")).and_then(Json::as_str),
                resource.and_then(|r| r.get("blob")).and_then(Json::as_str),
            ) {
                (Some(text), None) => text_block(BlockKind::ResourceText, text.to_owned(), mime, uri),
                (None, Some(blob)) => binary_block(BlockKind::Blob, blob, mime, uri),
                _ => text_block(BlockKind::Other, canonical_text(item), mime, uri),
            }
        }
        "resource_link" => {
            let uri = str_of(item.get("uri")).unwrap_or_default();
            text_block(BlockKind::ResourceLink, canonical_text(item), mime, uri)
        }
        _ => text_block(BlockKind::Other, canonical_text(item), mime, String::new()),
    }
}


/// A byte range of one block's text to replace with a marker naming `kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// Index into [`ResultView::blocks`].
    pub block: usize,
    /// Start, a UTF-8 byte offset on a character boundary.
    pub start: usize,
    /// End (excluded).
    pub end: usize,
    /// What was found (for example `secret:github-pat`).
    pub kind: String,
}

/// What happens to a result (WIT 0.3.0 `types.result-action`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultAction {
    /// Deliver it as it is.
    Pass,
    /// Deliver it with these spans replaced by markers.
    Redact(Vec<Span>),
    /// Do not deliver it; the reason reaches the model as a tool error.
    Withhold(String),
    /// Deliver it only after a person approves; the reason is shown.
    Hold(String),
}

/// A review's answer on one result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewAnswer {
    /// What happens to the result.
    pub action: ResultAction,
    /// The labels the result brings to the session.
    pub labels: Labels,
    /// The reviews or policies that determined the action, in the component's naming.
    pub determined_by: Vec<String>,
}
