//! The MCP clients toolward knows, where each keeps its servers and in which shape. Sources
//! (each client's own documentation) are listed in `docs/operators.md`.

use serde_json::{Map, Value};

/// The syntax of a client's config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// JSON; comments and trailing commas are kept where a client allows them (VS Code and
    /// Zed read JSONC).
    Json,
    /// TOML (Codex).
    Toml,
}

/// One MCP client: where its config is and how its servers are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSpec {
    /// The name on the command line (`claude-desktop`).
    pub id: &'static str,
    /// The client's own name.
    pub name: &'static str,
    /// The file's syntax.
    pub format: FileFormat,
    /// The key of the server map at the top of the file (`mcpServers`, `servers`,
    /// `context_servers`, `mcp_servers`).
    pub servers_key: &'static str,
    /// The file on Linux, relative to `HOME` (or to the project folder).
    pub linux: &'static str,
    /// The file on macOS, relative to `HOME`.
    pub macos: &'static str,
    /// The file on Windows (documented only: toolward does not run there yet).
    pub windows: &'static str,
    /// A project's file, shared with everyone who checks the project out: `init` and
    /// `client connect` edit it only when named.
    pub project: bool,
    /// Whether a stdio entry carries `"type": "stdio"` (VS Code requires it).
    pub stdio_type: bool,
}

impl ClientSpec {
    /// The file's path relative to `HOME` (or the project) on this platform.
    #[must_use]
    pub fn path(&self) -> &'static str {
        if cfg!(target_os = "macos") {
            self.macos
        } else {
            self.linux
        }
    }
}

/// Every client toolward reads, in the order `init` lists them.
pub const KNOWN_CLIENTS: &[ClientSpec] = &[
    ClientSpec {
        id: "claude-desktop",
        name: "Claude Desktop",
        format: FileFormat::Json,
        servers_key: "mcpServers",
        linux: ".config/Claude/claude_desktop_config.json",
        macos: "Library/Application Support/Claude/claude_desktop_config.json",
        windows: "%APPDATA%\\Claude\\claude_desktop_config.json",
        project: false,
        stdio_type: false,
    },
    ClientSpec {
        id: "claude-code",
        name: "Claude Code (user)",
        format: FileFormat::Json,
        servers_key: "mcpServers",
        linux: ".claude.json",
        macos: ".claude.json",
        windows: "%USERPROFILE%\\.claude.json",
        project: false,
        stdio_type: false,
    },
    ClientSpec {
        id: "project",
        name: "project .mcp.json (Claude Code project scope)",
        format: FileFormat::Json,
        servers_key: "mcpServers",
        linux: ".mcp.json",
        macos: ".mcp.json",
        windows: ".mcp.json",
        project: true,
        stdio_type: false,
    },
    ClientSpec {
        id: "cursor",
        name: "Cursor",
        format: FileFormat::Json,
        servers_key: "mcpServers",
        linux: ".cursor/mcp.json",
        macos: ".cursor/mcp.json",
        windows: "%USERPROFILE%\\.cursor\\mcp.json",
        project: false,
        stdio_type: false,
    },
    ClientSpec {
        id: "vscode",
        name: "VS Code (user mcp.json)",
        format: FileFormat::Json,
        servers_key: "servers",
        linux: ".config/Code/User/mcp.json",
        macos: "Library/Application Support/Code/User/mcp.json",
        windows: "%APPDATA%\\Code\\User\\mcp.json",
        project: false,
        stdio_type: true,
    },
    ClientSpec {
        id: "windsurf",
        name: "Windsurf",
        format: FileFormat::Json,
        servers_key: "mcpServers",
        linux: ".codeium/windsurf/mcp_config.json",
        macos: ".codeium/windsurf/mcp_config.json",
        windows: "%USERPROFILE%\\.codeium\\windsurf\\mcp_config.json",
        project: false,
        stdio_type: false,
    },
    ClientSpec {
        id: "zed",
        name: "Zed",
        format: FileFormat::Json,
        servers_key: "context_servers",
        linux: ".config/zed/settings.json",
        macos: ".config/zed/settings.json",
        windows: "%APPDATA%\\Zed\\settings.json",
        project: false,
        stdio_type: false,
    },
    ClientSpec {
        id: "codex",
        name: "Codex",
        format: FileFormat::Toml,
        servers_key: "mcp_servers",
        linux: ".codex/config.toml",
        macos: ".codex/config.toml",
        windows: "%USERPROFILE%\\.codex\\config.toml",
        project: false,
        stdio_type: false,
    },
    ClientSpec {
        id: "gemini",
        name: "Gemini CLI",
        format: FileFormat::Json,
        servers_key: "mcpServers",
        linux: ".gemini/settings.json",
        macos: ".gemini/settings.json",
        windows: "%USERPROFILE%\\.gemini\\settings.json",
        project: false,
        stdio_type: false,
    },
];

/// The client named `id` on the command line.
#[must_use]
pub fn client_by_id(id: &str) -> Option<&'static ClientSpec> {
    KNOWN_CLIENTS.iter().find(|c| c.id == id)
}

/// A server entry in the common shape (`command`, `args`, `env`, `url`, `headers`): Zed's
/// older form, `"command": {"path", "args", "env"}`, is flattened; Gemini's `httpUrl` and
/// Windsurf's `serverUrl` become `url`. Other keys are kept as they are.
#[must_use]
pub fn flatten_entry(entry: &Map<String, Value>) -> Map<String, Value> {
    let mut out = entry.clone();
    if let Some(Value::Object(command)) = entry.get("command") {
        out.remove("command");
        if let Some(path) = command.get("path") {
            out.insert("command".to_owned(), path.clone());
        }
        for key in ["args", "env"] {
            if let Some(value) = command.get(key) {
                out.insert(key.to_owned(), value.clone());
            }
        }
    }
    for alias in ["httpUrl", "serverUrl"] {
        if let Some(url) = out.remove(alias) {
            out.entry("url").or_insert(url);
        }
    }
    out
}
