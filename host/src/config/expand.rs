//! `${NAME}` in a server's `env` or `headers` (and the other expanded values): replaced by toolward's environment, or a stand-in for it.

use std::env::VarError;

use super::ConfigError;
use super::reader::{EnvLookup, JsonPath};

/// A variable name usable in `${NAME}`, `env`, and `pass_env`.
pub(super) fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Replaces `${NAME}` in `raw`; `$${` is a literal `${`, any other `$` is literal.
pub(super) fn expand(
    raw: &str,
    path: &JsonPath,
    server: &str,
    key: &str,
    env: EnvLookup<'_>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('$') {
        out.push_str(rest.get(..at).unwrap_or_default());
        let tail = rest.get(at..).unwrap_or_default();
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let Some(close) = after.find('}') else {
                return Err(path.invalid(format!(
                    "`{tail}` has no closing `}}` (write `$${{` for a literal `${{`)"
                )));
            };
            let name = after.get(..close).unwrap_or_default();
            if !is_var_name(name) {
                return Err(path.invalid(format!(
                    "`${{{name}}}` is not a variable reference: only `${{NAME}}` with `NAME` in `[A-Za-z_][A-Za-z0-9_]*` is supported (write `$${{` for a literal `${{`)"
                )));
            }
            match env(name) {
                Ok(value) => out.push_str(&value),
                Err(VarError::NotPresent) => {
                    return Err(ConfigError::MissingEnvVar {
                        path: path.to_string(),
                        server: server.to_owned(),
                        key: key.to_owned(),
                        variable: name.to_owned(),
                    });
                }
                Err(VarError::NotUnicode(_)) => {
                    return Err(ConfigError::EnvVarNotUnicode {
                        path: path.to_string(),
                        server: server.to_owned(),
                        key: key.to_owned(),
                        variable: name.to_owned(),
                    });
                }
            }
            rest = after.get(close + 1..).unwrap_or_default();
        } else {
            out.push('$');
            rest = tail.get(1..).unwrap_or_default();
        }
    }
    out.push_str(rest);
    Ok(out)
}
