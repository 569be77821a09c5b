//! `toolward init`: the operator's first step. Finds the MCP client configs on this machine
//! ([`crate::client_config`]), lists each with its servers, imports the chosen servers into a
//! new `toolward.json`, pins them, and writes a rules file that lists every tool for the
//! operator to classify.
//!
//! # Contract
//!
//! - It writes only in its own folder (`toolward.json`, `rules.json`, `manifest.json`,
//!   `state/`) and refuses to overwrite a `toolward.json`. Each file is reached through the
//!   folder's handle ([`crate::config::rewrite::HeldFile`]): a folder, file or link of
//!   another user or writable by others is refused, and a link put at a name meanwhile is
//!   replaced or refused, never written through. It never edits a client's file
//!   (`toolward client connect` does, when asked).
//! - No secret is copied into toolward's files: each `env` value (and header) of an imported
//!   server becomes `${VAR}` in `toolward.json`; the value stays in the client's config and
//!   moves into the toolward entry's `env` at `client connect`. Pinning now uses the client's
//!   values in memory only.
//! - What it cannot import as it is, it reports and leaves out, never guesses: a client's own
//!   variables (VS Code `${input:…}`, `${workspaceFolder}`), `cwd`, disabled servers, and a
//!   name that two clients define differently.
//! - It never chooses an effect: every tool is written as `{"effect": "unclassified"}` with
//!   its description and the server's hints beside it (`_description`, `_annotations`), and
//!   stays unregistered (and named by `toolward check`) until the operator classifies it.

pub mod import;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::client_config::{self, FoundClient};
use crate::config::Config;
use crate::config::rewrite::{Foreign, HeldFile, RewriteError};
use crate::manifest::Manifest;
use crate::state_dir::StateDir;

pub use import::{Candidate, Renamed, Skipped};

/// The file names `init` writes in its folder.
pub const CONFIG_FILE: &str = "toolward.json";
/// The rules file `init` writes.
pub const RULES_FILE: &str = "rules.json";

/// The manifest `init` pins into.
const MANIFEST_FILE: &str = "manifest.json";

/// Errors of `toolward init`.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A `toolward.json` is already there.
    #[error(
        "`{path}` exists: `toolward init` writes a new config, rules file and manifest and replaces none; move it away or use another `--dir`"
    )]
    ConfigExists {
        /// The file.
        path: PathBuf,
    },
    /// Nothing was chosen to import.
    #[error("no server chosen to import")]
    NothingChosen,
    /// A client's file could not be read.
    #[error(transparent)]
    Client(#[from] client_config::ClientConfigError),
    /// A file of toolward's could not be written.
    #[error("cannot write `{path}`: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A file of toolward's could not be written safely: a link, file or folder of another
    /// user or writable by others in the way, or another file put in its place meanwhile.
    #[error(transparent)]
    Rewrite(#[from] crate::config::rewrite::RewriteError),
    /// The generated config does not load (a server's entry toolward cannot take).
    #[error("the imported config does not load: {0}")]
    Config(#[source] crate::config::ConfigError),
    /// The state folder or the components could not be prepared.
    #[error("cannot prepare the policy components: {0}")]
    Components(#[source] crate::load::StartError),
    /// The state folder could not be opened.
    #[error("cannot open the state folder: {0}")]
    State(#[source] crate::state_dir::StateError),
    /// Pinning failed as a whole.
    #[error("cannot pin: {0}")]
    Pin(#[source] crate::pin::PinError),
    /// The manifest could not be written.
    #[error("cannot write the manifest: {0}")]
    Manifest(#[source] crate::manifest::ManifestError),
}

/// What `init` found on this machine.
#[derive(Debug, Clone)]
pub struct Survey {
    /// The client configs found.
    pub found: Vec<FoundClient>,
    /// The servers that can be imported (filtered by `--client` and `--server`).
    pub candidates: Vec<Candidate>,
    /// The servers that cannot, and why.
    pub skipped: Vec<Skipped>,
}

/// Finds the client configs under `home` (and `project`'s `.mcp.json`) and sorts their
/// servers (see [`import::candidates`]).
///
/// # Errors
///
/// A client file that exists and does not read or parse.
pub fn survey(
    home: &Path,
    project: &Path,
    clients: &[String],
    servers: &[String],
) -> Result<Survey, InitError> {
    let found = client_config::discover(home, project)?;
    let (candidates, skipped) = import::candidates(&found, clients, servers);
    Ok(Survey {
        found,
        candidates,
        skipped,
    })
}

impl Survey {
    /// The clients found, each with its servers, then what will not be imported and why.
    #[must_use]
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        if self.found.is_empty() {
            let _ = writeln!(out, "no MCP client config found; looked for:");
            for spec in client_config::KNOWN_CLIENTS {
                let _ = writeln!(out, "  {:15} ~/{}", spec.id, spec.path());
            }
            return out;
        }
        for client in &self.found {
            let _ = writeln!(
                out,
                "{} ({}): {}",
                client.spec.name,
                client.spec.id,
                client.path.display()
            );
            if client.servers.is_empty() {
                let _ = writeln!(out, "  (no servers)");
            }
            for server in &client.servers {
                let entry = client_config::flatten_entry(&server.entry);
                let _ = writeln!(
                    out,
                    "  {:12} {}",
                    crate::text::escape(&server.name),
                    crate::text::escape(&describe(&entry))
                );
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(out, "not imported:");
            for s in &self.skipped {
                let _ = writeln!(
                    out,
                    "  {}/{}: {}",
                    s.client,
                    crate::text::escape(&s.name),
                    s.reason
                );
            }
        }
        out
    }
}

/// One line for a server: its command line or URL, and the names (never the values) of its
/// `env`.
fn describe(entry: &Map<String, Value>) -> String {
    let mut words = Vec::new();
    if let Some(Value::String(command)) = entry.get("command") {
        words.push(command.clone());
    }
    if let Some(Value::Array(args)) = entry.get("args") {
        words.extend(
            args.iter()
                .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_owned)),
        );
    }
    if let Some(Value::String(url)) = entry.get("url") {
        words.push(url.clone());
    }
    let mut line = words.join(" ");
    if let Some(Value::Object(env)) = entry.get("env")
        && !env.is_empty()
    {
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        line.push_str(&format!("  (env: {})", names.join(", ")));
    }
    line
}

/// What `write` wrote.
#[derive(Debug, Clone)]
pub struct InitReport {
    /// The config written.
    pub config: PathBuf,
    /// The rules file written.
    pub rules: PathBuf,
    /// The manifest written.
    pub manifest: PathBuf,
    /// Servers imported, with the client each came from.
    pub servers: Vec<(String, &'static str)>,
    /// Tools pinned and listed as unclassified.
    pub tools: usize,
    /// Variables `toolward.json` refers to, whose values stay in the client's config.
    pub variables: Vec<String>,
    /// Variables named with a suffix because another secret wanted the same name (see
    /// [`import::toolward_servers`]): each secret has a variable of its own.
    pub renamed: Vec<Renamed>,
    /// Servers that could not be pinned, with why; their tools are missing from the rules.
    /// A server that needs sign-in is in [`InitReport::needs_sign_in`] instead.
    pub failures: Vec<String>,
    /// Imported HTTP servers that answered `401` (OAuth sign-in, issue 31) and have no grant
    /// yet: not pinned until the operator runs `toolward auth login SERVER`, then `toolward
    /// pin`. Sorted.
    pub needs_sign_in: Vec<String>,
    /// Arguments and URLs copied into `toolward.json` that look like they carry a secret
    /// (see [`looks_secret`]), as `server: place`: only `env` values and headers are moved
    /// out, so the operator is told to move these into `env` by hand.
    pub secret_looking: Vec<String>,
}

/// Words that, in an argument (`--token=…`) or a URL's query (`?access_token=…`), mark a
/// value as a likely secret. A heuristic for a warning, never a guarantee.
const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "auth",
    "credential",
    "sig=",
    "key=",
];

/// Whether `text` (a server's argument or URL) looks like it carries a secret: a URL with a
/// password in its authority (`user:PASS@host`), a secret word with a value (`--token=…`,
/// `?access_token=…`), or a known key prefix (`sk-`, `ghp_`, `xox`).
#[must_use]
pub fn looks_secret(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let authority_password = lower
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
        .is_some_and(|authority| {
            authority
                .split_once('@')
                .is_some_and(|(user, _)| user.contains(':'))
        });
    let word_with_value = (lower.contains('=') || lower.contains('?'))
        && SECRET_WORDS.iter().any(|word| lower.contains(word));
    let key_prefix = ["sk-", "ghp_", "github_pat_", "xoxb-", "xoxp-"]
        .iter()
        .any(|prefix| lower.starts_with(prefix) || lower.contains(&format!("={prefix}")));
    authority_password || word_with_value || key_prefix
}

/// The `server: place` of every argument and URL in `servers` (toolward.json's
/// `mcpServers`) that [`looks_secret`].
fn secret_looking(servers: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let Some(servers) = servers.as_object() else {
        return found;
    };
    for (name, server) in servers {
        let name = crate::text::escape(name);
        if let Some(url) = server.get("url").and_then(Value::as_str)
            && looks_secret(url)
        {
            found.push(format!("{name}: its `url`"));
        }
        for (i, arg) in server
            .get("args")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if arg.as_str().is_some_and(looks_secret) {
                found.push(format!("{name}: `args[{i}]`"));
            }
        }
    }
    found
}

/// Writes `toolward.json`, pins the `chosen` servers into `manifest.json` and writes
/// `rules.json` listing every tool unclassified, all in `dir` (see the module
/// documentation).
///
/// # Errors
///
/// [`InitError`]: a config already there, nothing chosen, a file that cannot be written, the
/// components or the pin failing as a whole. A server that fails to start is reported in
/// [`InitReport::failures`], not an error.
pub async fn write(dir: &Path, chosen: &[Candidate]) -> Result<InitReport, InitError> {
    if chosen.is_empty() {
        return Err(InitError::NothingChosen);
    }
    let config_path = dir.join(CONFIG_FILE);
    std::fs::create_dir_all(dir).map_err(|source| InitError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    // Both resolved once, here, and written through their folder's handle: nothing a link
    // put in their place later leads to is written over.
    let mut config_file = HeldFile::open(&config_path, Foreign::Refuse)?;
    if config_file.exists() {
        return Err(InitError::ConfigExists { path: config_path });
    }
    let import::Imported {
        servers,
        secrets,
        renamed,
    } = import::toolward_servers(chosen);
    let value = json!({
        "mcpServers": servers,
        "rules": { "file": RULES_FILE },
        "manifest": MANIFEST_FILE,
        "state_dir": "state",
        "audit": { "file": "state/audit.jsonl", "record_arguments": true },
    });
    let rules_path = dir.join(RULES_FILE);
    let mut rules_file = HeldFile::open(&rules_path, Foreign::Refuse)?;
    // An operator's rules or manifest left in the folder are never written over (found by an
    // attack: `init --dir` replaced an existing `rules.json` without a word).
    let manifest_path = dir.join(MANIFEST_FILE);
    for (exists, path) in [
        (rules_file.exists(), &rules_path),
        (
            std::fs::symlink_metadata(&manifest_path).is_ok(),
            &manifest_path,
        ),
    ] {
        if exists {
            return Err(InitError::ConfigExists { path: path.clone() });
        }
    }
    // The components read the rules file; an empty one until the tools are known. 0644:
    // toolward refuses a rules file group or others can write.
    rules_file.replace(b"{ \"servers\": {} }\n", 0o644)?;
    // Neither the rules file nor the manifest existed before this run: a failed init leaves
    // neither behind, so the next one (which refuses both) can run (found by an attack: a
    // refused server name left a stub `rules.json` that blocked every retry).
    let written: Result<InitReport, InitError> = async {
        let env = |name: &str| match secrets.get(name) {
            // VS Code's `${env:NAME}`: the client fills it from its own environment, as this
            // process has it.
            Some(value) => match value
                .strip_prefix("${env:")
                .and_then(|v| v.strip_suffix('}'))
            {
                Some(inner) => std::env::var(inner),
                None => Ok(value.clone()),
            },
            None => std::env::var(name),
        };
        let config =
            Config::from_value_with_env(value.clone(), dir, &env).map_err(InitError::Config)?;
        let state = StateDir::open(&config.state_dir).map_err(InitError::State)?;
        let components = crate::load::prepare_components(&config, config.guest.clone(), Some(&state))
            .map_err(InitError::Components)?;
        let outcome = crate::pin::pin(&config, None, None, components.digests.clone())
            .await
            .map_err(InitError::Pin)?;
        outcome
            .manifest
            .write(&config.manifest)
            .map_err(InitError::Manifest)?;
        let rules = unclassified_rules(&outcome.manifest);
        let tools = outcome
            .manifest
            .servers
            .values()
            .map(|s| s.tools.len())
            .sum();
        rules_file.replace(pretty(&rules).as_bytes(), 0o644)?;
        // 0600: arguments and URLs are copied as they are, and may carry what `secret_looking`
        // cannot recognise. Created new: a config that appeared meanwhile is not written over.
        config_file
            .create_new(pretty(&value).as_bytes(), 0o600)
            .map_err(|e| match e {
                RewriteError::Exists { path } => InitError::ConfigExists { path },
                e => InitError::Rewrite(e),
            })?;
        Ok(InitReport {
            config: config_path,
            rules: rules_path.clone(),
            manifest: config.manifest.clone(),
            servers: chosen
                .iter()
                .map(|c| (c.name.clone(), c.client.id))
                .collect(),
            tools,
            variables: secrets.keys().cloned().collect(),
            renamed,
            secret_looking: secret_looking(&value["mcpServers"]),
            failures: outcome
                .failures
                .iter()
                .filter(|(_, error)| !needs_sign_in(error))
                .map(|(_, e)| crate::text::error_chain(e))
                .collect(),
            needs_sign_in: outcome
                .failures
                .iter()
                .filter(|(_, error)| needs_sign_in(error))
                .map(|(server, _)| server.clone())
                .collect(),
        })
    }
    .await;
    if written.is_err() {
        let _ = std::fs::remove_file(&rules_path);
        let _ = std::fs::remove_file(&manifest_path);
    }
    written
}

/// Whether a server could not be pinned only because it asks for sign-in.
fn needs_sign_in(error: &crate::pin::PinError) -> bool {
    matches!(
        error,
        crate::pin::PinError::Connect { source, .. }
            if matches!(**source, crate::transport::TransportError::SignIn { .. })
    )
}

/// A rules text listing every pinned tool in the unclassified form, its description and
/// hints beside it.
#[must_use]
pub fn unclassified_rules(manifest: &Manifest) -> Value {
    let mut servers = Map::new();
    for (name, server) in &manifest.servers {
        let mut tools = Map::new();
        for (tool, pinned) in &server.tools {
            let mut rule = Map::new();
            rule.insert(
                "effect".to_owned(),
                Value::String(toolward_policy_table::UNCLASSIFIED.to_owned()),
            );
            rule.insert(
                "_description".to_owned(),
                Value::String(pinned.description.clone()),
            );
            if let Some(annotations) = &pinned.annotations {
                rule.insert("_annotations".to_owned(), annotations.to_serde_json());
            }
            tools.insert(tool.clone(), Value::Object(rule));
        }
        servers.insert(name.clone(), json!({ "tools": tools }));
    }
    json!({
        "_classify": "give each tool an effect: read-only | local-change | remote-change | destructive (docs/rules.schema.json); an unclassified tool is not registered",
        "servers": servers,
    })
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// Asks on the terminal, server by server, which to import (`y` imports).
///
/// # Errors
///
/// Reading the terminal failed.
pub fn ask(candidates: Vec<Candidate>) -> std::io::Result<Vec<Candidate>> {
    use std::io::{BufRead as _, Write as _};
    let mut chosen = Vec::new();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    for candidate in candidates {
        let entry = describe(&candidate.entry);
        // Not `eprint!`, which panics when standard error is gone.
        let mut stderr = std::io::stderr();
        write!(
            stderr,
            "import `{}` from {} ({})? [y/N] ",
            crate::text::escape(&candidate.name),
            candidate.client.id,
            crate::text::escape(&entry)
        )?;
        stderr.flush()?;
        let answer = lines.next().transpose()?.unwrap_or_default();
        if answer.trim().eq_ignore_ascii_case("y") {
            chosen.push(candidate);
        }
    }
    Ok(chosen)
}

/// Counts by client of the chosen servers, for the summary line.
#[must_use]
pub fn by_client(report: &InitReport) -> BTreeMap<&'static str, Vec<String>> {
    let mut out: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (server, client) in &report.servers {
        out.entry(client).or_default().push(server.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{looks_secret, secret_looking};
    use serde_json::json;

    #[test]
    fn arguments_and_urls_that_carry_a_secret_are_named_and_plain_ones_are_not() {
        for secret in [
            "--token=sk-ARGSECRET111",
            "https://user:URLPASS222@example.com/x",
            "http://127.0.0.1:1/mcp?access_token=QUERYSECRET555",
            "--api-key=abc",
            "sk-live-123",
        ] {
            assert!(looks_secret(secret), "{secret}");
        }
        for plain in [
            "server.py",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            "https://user@example.com/x",
            "/home/me/keys",
        ] {
            assert!(!looks_secret(plain), "{plain}");
        }
        let servers = json!({
            "ev": {"command": "python3", "args": ["s.py", "--token=sk-1"]},
            "web": {"url": "http://h/mcp?access_token=q"},
            "fs": {"command": "npx", "args": ["-y", "server"]},
        });
        assert_eq!(
            secret_looking(&servers),
            ["ev: `args[1]`", "web: its `url`"]
        );
    }
}
