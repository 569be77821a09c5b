//! A server built on rmcp (the official Rust MCP SDK) for the protocol-version matrix:
//! `toolward-rmcp-server VERSION[,VERSION…]` speaks MCP over stdio and supports only the
//! protocol versions given, so each revision is tried against the SDK's own negotiation
//! (`initialize` for 2024-11-05 to 2025-11-25, `server/discover` and per-request `_meta`
//! for 2026-07-28). One tool, `echo`, answers its arguments as text.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fixture"
)]

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    Tool,
};
use rmcp::service::{RequestContext, ServiceExt};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::json;

struct Fixture {
    versions: Vec<ProtocolVersion>,
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> InitializeResult {
        let capabilities: ServerCapabilities =
            serde_json::from_value(json!({ "tools": {} })).unwrap();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("rmcp-fixture", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(self.versions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = json!({ "type": "object", "properties": { "text": { "type": "string" } } });
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Echoes its arguments.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let text = serde_json::Value::Object(request.arguments.unwrap_or_default()).to_string();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let wanted = std::env::args()
        .nth(1)
        .expect("usage: toolward-rmcp-server VERSION[,VERSION…]");
    let versions: Vec<ProtocolVersion> = wanted
        .split(',')
        .map(|version| {
            ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .find(|known| known.as_str() == version)
                .cloned()
                .unwrap_or_else(|| panic!("rmcp does not know protocol version `{version}`"))
        })
        .collect();
    let running = Fixture { versions }
        .serve(rmcp::transport::stdio())
        .await
        .expect("serve on stdio");
    let _ = running.waiting().await;
}
