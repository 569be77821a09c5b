//! The component's settings: a JSON object, parsed once in `policy.configure`.
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `rules` | object | `{}` (the default table) | a rules file (`docs/rules.schema.json`) whose decision table decides what the checks leave |
//! | `write_root` | absolute path | **required** | `local-change` and `destructive` calls must keep their path arguments in it |
//! | `path_arguments` | array of names | `["path"]` | the top-level arguments that are paths |
//! | `allowed_hosts` | array of host names | `[]` | hosts a `remote-change` call may reach without approval |
//! | `url_arguments` | array of names | `["url"]` | the top-level arguments that are URLs |
//! | `$schema` | string | none | ignored; for editors |
//!
//! Any other key is refused, with its name: a misspelt key must not leave a check off.

use serde_json::{Map, Value};
use toolward_policy_table::Rules;

/// Parsed settings.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The table for what the checks leave.
    pub(crate) rules: Rules,
    /// Normalised, absolute.
    pub(crate) write_root: String,
    /// Names of the path arguments.
    pub(crate) path_arguments: Vec<String>,
    /// Lowercase, without a trailing `.`.
    allowed_hosts: Vec<String>,
    /// Names of the URL arguments.
    pub(crate) url_arguments: Vec<String>,
}

const KEYS: &[&str] = &[
    "$schema",
    "rules",
    "write_root",
    "path_arguments",
    "allowed_hosts",
    "url_arguments",
];

impl Settings {
    /// Parses the settings text.
    ///
    /// # Errors
    /// A message that starts with the path of the fault (`write_root: ...`,
    /// `rules.servers.fs.decisions: ...`).
    pub(crate) fn parse(text: &str) -> Result<Settings, String> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| format!("(root): not valid JSON: {e}"))?;
        let Value::Object(map) = &root else {
            return Err("(root): expected an object of settings".to_owned());
        };
        if let Some(key) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "`{key}`: unknown key (expected one of {})",
                KEYS.join(", ")
            ));
        }
        let rules = match map.get("rules") {
            None => Rules::default(),
            Some(value @ Value::Object(_)) => Rules::parse(&value.to_string()).map_err(|e| {
                if e.path.is_empty() {
                    format!("rules: {}", e.message)
                } else {
                    format!("rules.{}: {}", e.path, e.message)
                }
            })?,
            Some(_) => return Err("rules: expected a rules object".to_owned()),
        };
        let write_root = match map.get("write_root") {
            Some(Value::String(root)) if root.starts_with('/') && !root.contains('\\') => {
                crate::path::normalise("/", root)
            }
            Some(Value::String(root)) => {
                return Err(format!(
                    "write_root: expected an absolute path, found `{root}`"
                ));
            }
            Some(_) => return Err("write_root: expected an absolute path".to_owned()),
            None => {
                return Err("write_root: missing (the directory writes must stay in)".to_owned());
            }
        };
        let allowed_hosts = names(map, "allowed_hosts", &[])?
            .into_iter()
            .map(|host| {
                let host = host.to_ascii_lowercase();
                match host.strip_suffix('.') {
                    Some(bare) => bare.to_owned(),
                    None => host,
                }
            })
            .collect();
        Ok(Settings {
            rules,
            write_root,
            path_arguments: names(map, "path_arguments", &["path"])?,
            allowed_hosts,
            url_arguments: names(map, "url_arguments", &["url"])?,
        })
    }

    /// Whether `host` (as [`crate::url::host`] returns it) is on the allowlist.
    pub(crate) fn host_allowed(&self, host: &str) -> bool {
        self.allowed_hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(host))
    }
}

/// The array of non-empty strings at `key`, or `default` when absent.
fn names(map: &Map<String, Value>, key: &str, default: &[&str]) -> Result<Vec<String>, String> {
    let Some(value) = map.get(key) else {
        return Ok(default.iter().map(|s| (*s).to_owned()).collect());
    };
    let Value::Array(items) = value else {
        return Err(format!("{key}: expected an array of strings"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            _ => Err(format!("{key}[{i}]: expected a non-empty string")),
        })
        .collect()
}
