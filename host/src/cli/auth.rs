//! `toolward auth`: signing in to HTTP servers that ask for it, the grants kept, signing out.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use clap::Subcommand;

use super::{EXIT_FAILURE, Failure, failure, open_state, read_config, usage};
use crate::config::{Config, ServerConfig};
use crate::oauth::login::{self, LoginOutcome};
use crate::oauth::{GrantKind, GrantStore, now_secs};
use crate::text::{escape, escape_json};

#[derive(Debug, Subcommand)]
pub(super) enum AuthCommand {
    /// Sign in to SERVER: prints the URL to open in a browser (opened with `$BROWSER` when
    /// it is set), then waits for the browser to come back to toolward's loopback port.
    /// With `oauth.grant: client_credentials`, signs in as toolward without a browser.
    Login {
        /// The server's name in `mcpServers`.
        server: String,
        /// How long to wait for the browser, in seconds.
        #[arg(long, default_value_t = login::DEFAULT_LOGIN_TIMEOUT.as_secs())]
        timeout_secs: u64,
    },
    /// The grants kept: server, how it was obtained, scopes, expiry. Never a token.
    Status {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete SERVER's grant, revoking its tokens first where the authorization server
    /// offers revocation (RFC 7009).
    Logout {
        /// The server's name in `mcpServers`.
        server: String,
    },
}

pub(super) async fn run(config_path: &Path, command: AuthCommand) -> Result<ExitCode, Failure> {
    let config = read_config(config_path)?;
    let state = open_state(&config)?;
    let store = GrantStore::open(&state).map_err(failure)?;
    match command {
        AuthCommand::Login {
            server,
            timeout_secs,
        } => login(&config, &store, &server, Duration::from_secs(timeout_secs)).await,
        AuthCommand::Status { json } => status(&config, &store, json),
        AuthCommand::Logout { server } => logout(&config, &store, &server).await,
    }
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
    timeout: Duration,
) -> Result<ExitCode, Failure> {
    let server = server(config, name)?;
    crate::oauth::server_url(server).map_err(usage)?;
    if crate::oauth::has_own_authorization(server) {
        return Err(usage(anyhow!(
            "server `{name}` has an `Authorization` header in the config: toolward sends that one, and would never send a grant's token; remove the header to sign in"
        )));
    }
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty());
    let mut show = |url: &reqwest::Url, redirect: &str| {
        println!("To sign in to server `{name}`, open this URL in a browser:");
        println!("{url}");
        println!(
            "waiting for the browser to come back to {redirect} (at most {} s)",
            timeout.as_secs()
        );
        let _ = std::io::Write::flush(&mut std::io::stdout());
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
                    eprintln!("toolward: could not start `$BROWSER` (`{browser}`): {error}")
                }
            }
        }
    };
    match login::login(server, store, timeout, &mut show)
        .await
        .map_err(failure)?
    {
        LoginOutcome::NotNeeded(status) => {
            println!(
                "server `{name}` answered without asking for sign-in (HTTP status {status}): nothing to do"
            );
            Ok(ExitCode::SUCCESS)
        }
        LoginOutcome::SignedIn(grant) => {
            println!(
                "signed in to server `{name}` at `{}`{}; the grant is kept, encrypted, in `{}`",
                escape(&grant.issuer),
                scopes_text(&grant.scopes),
                store.file(name).display()
            );
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

fn status(config: &Config, store: &GrantStore, json: bool) -> Result<ExitCode, Failure> {
    let servers = store.servers().map_err(failure)?;
    let mut rows = Vec::new();
    for name in &servers {
        let row = match store.read(name) {
            Ok(Some(grant)) => serde_json::json!({
                "server": name,
                "in_config": config.servers.contains_key(name),
                "issuer": grant.issuer,
                "resource": grant.resource,
                "grant": match grant.kind {
                    GrantKind::AuthorizationCode => "authorization_code",
                    GrantKind::ClientCredentials => "client_credentials",
                },
                "scopes": grant.scopes,
                "expires_at": grant.expires_at,
                "renewable": grant.refresh_token.is_some() || grant.kind == GrantKind::ClientCredentials,
                "revocable": grant.revocation_endpoint.is_some(),
            }),
            Ok(None) => continue,
            Err(error) => serde_json::json!({ "server": name, "error": error.to_string() }),
        };
        rows.push(row);
    }
    if json {
        let text = serde_json::to_string_pretty(&rows).map_err(failure)?;
        // The issuer and the scopes are the authorization server's words.
        println!("{}", escape_json(&text));
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!("no grants: `toolward auth login SERVER` signs in to a server that asks for it");
    }
    for row in &rows {
        let name = row["server"].as_str().unwrap_or_default();
        if let Some(error) = row["error"].as_str() {
            println!("{name}: unusable: {error}");
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
        println!(
            "{name}: {} at `{}`{}, {}{}{}",
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
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn logout(config: &Config, store: &GrantStore, name: &str) -> Result<ExitCode, Failure> {
    let server = server(config, name)?;
    let outcome = login::logout(server, store).await.map_err(failure)?;
    if !outcome.removed {
        println!("server `{name}` has no grant: nothing to do");
        return Ok(ExitCode::SUCCESS);
    }
    match outcome.revoked {
        None => {
            println!(
                "deleted the grant of server `{name}` (its authorization server offers no revocation: the tokens stay valid there until they expire)"
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(Ok(())) => {
            println!("revoked the tokens of server `{name}` and deleted its grant");
            Ok(ExitCode::SUCCESS)
        }
        Some(Err(error)) => {
            eprintln!(
                "toolward: deleted the grant of server `{name}`, but revoking its tokens failed: {}",
                crate::text::error_chain(&error)
            );
            Ok(ExitCode::from(EXIT_FAILURE))
        }
    }
}
