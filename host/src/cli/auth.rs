//! `toolward auth`: signing in to HTTP servers that ask for it, the grants kept, signing out.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use clap::Subcommand;

use super::{EXIT_FAILURE, Failure, failure, read_config, usage};
use crate::config::{Config, OAuthGrant, ServerConfig, ServerTransport};
use crate::oauth::login::{self, LoginOutcome, LoginRequest, Prompt};
use crate::oauth::{GrantKind, GrantStore, now_secs};
use crate::text::{escape, escape_json};

#[derive(Debug, Subcommand)]
pub(super) enum AuthCommand {
    /// Sign in to SERVER: prints the URL to open in a browser (opened with `$BROWSER` when
    /// it is set), then waits for the browser to come back to toolward's loopback port.
    /// With `--device` (or `oauth.grant: device`), prints a URL and a code to enter on any
    /// device, and waits (RFC 8628). With `oauth.grant: client_credentials`, signs in as
    /// toolward without a browser.
    Login {
        /// The server's name in `mcpServers`.
        server: String,
        /// Sign in as this principal (a name `serve --listen` gives a caller): for a server
        /// with `oauth.per_principal`, that principal's calls use this grant. Without it, the
        /// operator's grant, which pinning and loading use.
        #[arg(long)]
        principal: Option<String>,
        /// Also ask for these scopes (space-separated; repeatable), beside the configured
        /// ones and those of the grant replaced: what a call refused for `insufficient_scope`
        /// names.
        #[arg(long, value_name = "SCOPES")]
        scope: Vec<String>,
        /// Sign in with the device authorization grant (RFC 8628), for a gateway without a
        /// browser: enter the code it prints on any device. Needs the authorization server's
        /// `device_authorization_endpoint`.
        #[arg(long)]
        device: bool,
        /// How long to wait for the browser (or the code to be entered), in seconds.
        #[arg(long, default_value_t = login::DEFAULT_LOGIN_TIMEOUT.as_secs())]
        timeout_secs: u64,
    },
    /// The grants kept: server, principal, how it was obtained, scopes, expiry. Never a token.
    Status {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete SERVER's grant (the operator's, or a principal's), revoking its tokens first
    /// where the authorization server offers revocation (RFC 7009).
    Logout {
        /// The server's name in `mcpServers`.
        server: String,
        /// The principal whose grant to delete; without it, the operator's.
        #[arg(long)]
        principal: Option<String>,
    },
}

pub(super) async fn run(config_path: &Path, command: AuthCommand) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let store = GrantStore::open(&config).await.map_err(failure)?;
    match command {
        AuthCommand::Login {
            server,
            principal,
            scope,
            device,
            timeout_secs,
        } => {
            let request = LoginRequest {
                principal: checked_principal(principal)?,
                scopes: checked_scopes(&scope)?,
                grant: device.then_some(OAuthGrant::Device),
            };
            login(
                &config,
                &store,
                &server,
                &request,
                Duration::from_secs(timeout_secs),
            )
            .await
        }
        AuthCommand::Status { json } => status(&config, &store, json).await,
        AuthCommand::Logout { server, principal } => {
            let principal = checked_principal(principal)?;
            logout(&config, &store, &server, principal.as_deref()).await
        }
    }
}

/// `--principal`, refused when empty or holding a control character (no principal is named
/// so: `listen.tokens` refuses such names).
fn checked_principal(principal: Option<String>) -> Result<Option<String>, Failure> {
    match principal {
        Some(name) if name.is_empty() || name.chars().any(char::is_control) => Err(usage(anyhow!(
            "`--principal` must be a principal's name: not empty, no control characters"
        ))),
        other => Ok(other),
    }
}

/// The scopes of every `--scope`, each split at spaces and checked against RFC 6749's
/// grammar.
fn checked_scopes(given: &[String]) -> Result<Vec<String>, Failure> {
    let mut scopes: Vec<String> = Vec::new();
    for scope in given.iter().flat_map(|text| text.split(' ')) {
        if scope.is_empty() {
            continue;
        }
        if !crate::oauth::is_scope_token(scope) {
            return Err(usage(anyhow!(
                "`{}` is not a scope (RFC 6749, section 3.3: printable ASCII without space, `\"` or `\\`)",
                crate::text::escape(scope)
            )));
        }
        if !scopes.iter().any(|known| known == scope) {
            scopes.push(scope.to_owned());
        }
    }
    Ok(scopes)
}

/// ` as principal `P`` for a principal's grant, else nothing.
fn as_principal(principal: Option<&str>) -> String {
    principal.map_or_else(String::new, |principal| {
        format!(
            " as principal `{}`",
            crate::text::quote(principal, crate::text::MAX_QUOTED_BYTES)
        )
    })
}

fn server<'c>(config: &'c Config, name: &str) -> Result<&'c ServerConfig, Failure> {
    config
        .servers
        .get(name)
        .ok_or_else(|| usage(anyhow!("server `{name}` is not in the config")))
}

async fn login(
    config: &Config,
    store: &GrantStore,
    name: &str,
    request: &LoginRequest,
    timeout: Duration,
) -> Result<ExitCode, Failure> {
    let server = server(config, name)?;
    let principal = request.principal.as_deref();
    crate::oauth::server_url(server).map_err(usage)?;
    if crate::oauth::has_own_authorization(server) {
        return Err(usage(anyhow!(
            "server `{name}` has an `Authorization` header in the config: toolward sends that one, and would never send a grant's token; remove the header to sign in"
        )));
    }
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty());
    let mut show = |prompt: Prompt<'_>| {
        let (url, redirect) = match prompt {
            Prompt::Browser { url, redirect } => (url, redirect),
            Prompt::Device {
                verification_uri,
                verification_uri_complete,
                user_code,
                wait,
            } => {
                // Escaped by `login`: the authorization server wrote them.
                let complete = verification_uri_complete
                    .map(|complete| format!("(or open {complete}, which carries the code)\n"))
                    .unwrap_or_default();
                // The sign-in goes on when nobody reads this (`login` has no way to stop).
                let _ = out!(
                    "To sign in to server `{name}`{}, open this URL on any device:\n{verification_uri}\nand enter the code `{user_code}`\n{complete}waiting for the sign-in (at most {} s)\n",
                    as_principal(principal),
                    wait.as_secs()
                );
                return;
            }
        };
        let _ = out!(
            "To sign in to server `{name}`{}, open this URL in a browser:\n{url}\nwaiting for the browser to come back to {redirect} (at most {} s)\n",
            as_principal(principal),
            timeout.as_secs()
        );
        if let Some(browser) = &browser {
            // `$BROWSER` is one program; the URL is its only argument, never through a shell.
            match std::process::Command::new(browser)
                .arg(url.as_str())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                // Reaped in the background: a browser may outlive the sign-in.
                Ok(mut child) => {
                    std::thread::spawn(move || child.wait());
                }
                Err(error) => {
                    errln!("toolward: could not start `$BROWSER` (`{browser}`): {error}")
                }
            }
        }
    };
    if principal.is_some()
        && let ServerTransport::Http { oauth, .. } = &server.transport
        && !oauth.per_principal
    {
        errln!(
            "toolward: note: server `{name}` has no `oauth.per_principal`: every call uses the operator's grant (`toolward auth login {name}`), and this one is kept for when it has"
        );
    }
    match login::login(server, store, request, timeout, &mut show)
        .await
        .map_err(failure)?
    {
        LoginOutcome::NotNeeded(status) => {
            outln!(
                "server `{name}` answered without asking for sign-in (HTTP status {status}): nothing to do"
            )?;
            Ok(ExitCode::SUCCESS)
        }
        LoginOutcome::SignedIn(grant) => {
            outln!(
                "signed in to server `{name}`{} at `{}`{}; the grant is kept, encrypted, in {}",
                as_principal(principal),
                escape(&grant.issuer),
                scopes_text(&grant.scopes),
                store.place(name, principal)
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn scopes_text(scopes: &[String]) -> String {
    if scopes.is_empty() {
        String::new()
    } else {
        // The authorization server's words (its token answer or its metadata).
        format!(" with scopes `{}`", escape(&scopes.join(" ")))
    }
}

fn expiry_text(expires_at: Option<u64>) -> String {
    match expires_at {
        None => String::from("no expiry given"),
        Some(at) => {
            let now = now_secs();
            if at <= now {
                format!("expired {} s ago", now - at)
            } else {
                format!("expires in {} s", at - now)
            }
        }
    }
}

async fn status(config: &Config, store: &GrantStore, json: bool) -> Result<ExitCode, Failure> {
    let listed = store.list().await.map_err(failure)?;
    let mut rows = Vec::new();
    for entry in &listed {
        let row = match &entry.grant {
            Ok(grant) => serde_json::json!({
                "server": entry.server,
                "principal": entry.principal,
                "in_config": config.servers.contains_key(&entry.server),
                "issuer": grant.issuer,
                "resource": grant.resource,
                "grant": match grant.kind {
                    GrantKind::AuthorizationCode => "authorization_code",
                    GrantKind::ClientCredentials => "client_credentials",
                    GrantKind::Device => "device",
                },
                "scopes": grant.scopes,
                "expires_at": grant.expires_at,
                "renewable": grant.refresh_token.is_some() || grant.kind == GrantKind::ClientCredentials,
                "revocable": grant.revocation_endpoint.is_some(),
            }),
            Err(error) => serde_json::json!({
                "server": entry.server,
                "principal": entry.principal,
                "error": error.to_string(),
            }),
        };
        rows.push(row);
    }
    if json {
        let text = serde_json::to_string_pretty(&rows).map_err(failure)?;
        // The issuer and the scopes are the authorization server's words.
        outln!("{}", escape_json(&text))?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        outln!("no grants: `toolward auth login SERVER` signs in to a server that asks for it")?;
    }
    for row in &rows {
        let name = row["server"].as_str().unwrap_or_default();
        let whose = match row["principal"].as_str() {
            Some(principal) => format!(
                " (principal `{}`)",
                crate::text::quote(principal, crate::text::MAX_QUOTED_BYTES)
            ),
            None => String::new(),
        };
        if let Some(error) = row["error"].as_str() {
            outln!("{name}{whose}: unusable: {error}")?;
            continue;
        }
        let scopes: Vec<String> = row["scopes"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        outln!(
            "{name}{whose}: {} at `{}`{}, {}{}{}",
            row["grant"].as_str().unwrap_or_default(),
            escape(row["issuer"].as_str().unwrap_or_default()),
            scopes_text(&scopes),
            expiry_text(row["expires_at"].as_u64()),
            if row["renewable"].as_bool() == Some(true) {
                ", renewable"
            } else {
                ", not renewable (sign in again when it expires)"
            },
            if row["in_config"].as_bool() == Some(true) {
                ""
            } else {
                " (not in the config)"
            },
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn logout(
    config: &Config,
    store: &GrantStore,
    name: &str,
    principal: Option<&str>,
) -> Result<ExitCode, Failure> {
    let server = server(config, name)?;
    let whose = principal.map_or_else(String::new, |principal| {
        format!(
            " for principal `{}`",
            crate::text::quote(principal, crate::text::MAX_QUOTED_BYTES)
        )
    });
    let outcome = login::logout(server, store, principal)
        .await
        .map_err(failure)?;
    if !outcome.removed {
        outln!("server `{name}` has no grant{whose}: nothing to do")?;
        return Ok(ExitCode::SUCCESS);
    }
    match outcome.revoked {
        None => {
            outln!(
                "deleted server `{name}`'s grant{whose} (its authorization server offers no revocation: the tokens stay valid there until they expire)"
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Ok(())) => {
            outln!("revoked the tokens of server `{name}`'s grant{whose} and deleted it")?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Err(error)) => {
            errln!(
                "toolward: deleted server `{name}`'s grant{whose}, but revoking its tokens failed: {}",
                crate::text::error_chain(&error)
            );
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}
