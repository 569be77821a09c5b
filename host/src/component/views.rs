//! What a guest sees: the tools, annotations, classifications and calls passed to it.

use super::Effect;

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
    /// The client connection.
    pub session: String,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Host facts: name and JSON text (none in this version).
    pub facts: Vec<(String, String)>,
}
