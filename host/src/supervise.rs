//! Supervise: after the load, each connected server is watched until toolward closes it.
//!
//! - A server that sends `notifications/tools/list_changed` is reported to the client, once
//!   per connection (the registry's client messages, which the gateway sends as MCP log
//!   notifications; the transport logs it for the operator). The tool
//!   set stays as loaded: a change is reviewed with `toolward pin`, then a restart.
//! - A server that fails (its process exits, it breaks the framing, it closes its output) is
//!   restarted with backoff: [`Limits::restart_backoff_ms`] before the first attempt, twice
//!   as long before each further attempt in a row, at most [`MAX_RESTART_BACKOFF_MS`], and
//!   at most [`Limits::restart_attempts`] attempts in a row. A server that then stays up for
//!   [`STABLE_AFTER`] starts a new count. While it is down, calls of its tools fail with a
//!   tool error naming the server and the reason; calls in flight when it died have already
//!   failed the same way (the transport fails every waiting request).
//! - A restarted server's listing is checked against the pins of the tools the load
//!   registered: a tool whose description or input schema hash differs, or which the server
//!   no longer lists, is withdrawn (its calls are refused with the reason) before the
//!   connection is put back. Nothing is added: the tool set is fixed at load.
//! - A restart runs the launcher the first start ran ([`crate::confine::launcher`] is fixed
//!   at first use) and is refused when it would come out less confined than the server's
//!   first start ([`crate::confine::weaker_start`]): the server is then down, its clients are
//!   told why, and a `refusal` record says so. Every start that happens is recorded
//!   (`server-start`, with the attempt and the confinement applied; [`start_record`]).
//! - A handed-in server (an rmcp transport the embedder gave) is never restarted: its
//!   transport is connected once. When it fails it is down for good, its clients are told
//!   why, and a `refusal` record says so.
//!
//! [`Limits::restart_backoff_ms`]: crate::config::Limits::restart_backoff_ms
//! [`Limits::restart_attempts`]: crate::config::Limits::restart_attempts

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::audit::AuditStore;
use crate::audit::{AuditEvent, AuditKind};
use crate::config::{Config, MAX_RESTART_BACKOFF_MS, ServerConfig, ServerTransport};
use crate::confine::Confinement;
use crate::listing::{self, ListingBounds};
use crate::registry::{
    Connection, PRINCIPAL_SESSION_IDLE, PRINCIPAL_SESSION_SWEEP, RegisteredTool, Registry,
};
use crate::text::error_chain;
use crate::transport::{FailureReason, Upstream};

/// How long a restarted server must stay up before its count of attempts in a row starts
/// again: 60 s.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The supervisors of a registry's servers; dropping this stops them (the servers stay as
/// they are: closing them is [`Registry::close`]'s).
#[derive(Debug, Default)]
pub struct Supervisors {
    tasks: Vec<JoinHandle<()>>,
}

impl Supervisors {
    /// Starts one supervisor per server `registry` connected, with the limits of `config`;
    /// restarts and refused restarts are recorded in `audit` when there is one.
    pub fn start(
        config: &Config,
        registry: &Arc<Registry>,
        audit: Option<Arc<dyn AuditStore>>,
    ) -> Supervisors {
        let mut tasks: Vec<JoinHandle<()>> = registry
            .servers()
            .filter_map(|server| {
                let server_config = config.servers.get(server)?.clone();
                Some(tokio::spawn(supervise(
                    config.clone(),
                    server_config,
                    Arc::clone(registry),
                    audit.clone(),
                )))
            })
            .collect();
        if registry.has_per_principal() {
            tasks.push(tokio::spawn(sweep_principal_sessions(Arc::clone(registry))));
        }
        Supervisors { tasks }
    }

    /// Stops every supervisor now.
    pub fn stop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Supervisors {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Closes principals' sessions left idle for [`PRINCIPAL_SESSION_IDLE`], every
/// [`PRINCIPAL_SESSION_SWEEP`], until stopped.
async fn sweep_principal_sessions(registry: Arc<Registry>) {
    let mut ticks = tokio::time::interval(PRINCIPAL_SESSION_SWEEP);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let closed = registry
            .close_idle_principal_sessions(PRINCIPAL_SESSION_IDLE)
            .await;
        if closed > 0 {
            tracing::debug!(
                "closed {closed} principals' sessions idle for {} s",
                PRINCIPAL_SESSION_IDLE.as_secs()
            );
        }
    }
}

/// The wait before attempt `attempt` (1-based) of a run of attempts in a row.
pub fn backoff(first: Duration, attempt: u64) -> Duration {
    let doublings = u32::try_from(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
    let factor = 2u32.checked_pow(doublings.min(31)).unwrap_or(u32::MAX);
    first
        .saturating_mul(factor)
        .min(Duration::from_millis(MAX_RESTART_BACKOFF_MS))
}

/// The `server-start` record of server `server`'s start number `attempt` (0: at the load)
/// as `upstream` was started: the confinement applied, or that it runs unconfined.
pub fn start_record(server: &str, attempt: u64, upstream: &Upstream) -> AuditEvent {
    AuditEvent {
        server: Some(server.to_owned()),
        detail: Some(serde_json::json!({
            "attempt": attempt,
            "pid": upstream.process_id(),
            "confinement": upstream.confinement().map(confinement_detail),
        })),
        ..AuditEvent::new(AuditKind::ServerStart)
    }
}

pub(crate) fn confinement_detail(c: &Confinement) -> serde_json::Value {
    serde_json::json!({
        "landlock_abi": c.abi,
        "namespaces": c.namespaces.is_ok(),
        "namespaces_unavailable": c.namespaces.as_ref().err(),
        "withheld": c.deny,
        "tcp_denied": c.tcp_denied(),
        "network_denied": c.network_denied(),
        "launcher": c.launcher_shown,
    })
}

/// Marks `server` down for good with `down` as the reason its tools answer with, and tells
/// the clients.
fn mark_down(registry: &Registry, server: &str, down: String) {
    let told = format!("{down}: its tools answer with an error");
    registry.set_connection(server, Connection::Down { reason: down });
    registry.tell_clients(told);
}

/// Marks `server` down for good, `down` saying why, on the record (a `refusal`) and to the
/// clients: a server toolward will not start again while it runs.
fn refuse_for_good(
    audit: Option<&Arc<dyn AuditStore>>,
    registry: &Registry,
    server: &str,
    down: String,
) {
    record(
        audit,
        AuditEvent {
            server: Some(server.to_owned()),
            reason: Some(down.clone()),
            ..AuditEvent::new(AuditKind::Refusal)
        },
    );
    mark_down(registry, server, down);
}

/// Queues `event` in `audit`, if any (never blocks: a restart waits for no sync).
fn record(audit: Option<&Arc<dyn AuditStore>>, event: AuditEvent) {
    if let Some(audit) = audit
        && let Err(e) = audit.write(vec![event])
    {
        tracing::error!(error = %e, "cannot record a server's start in the audit log");
    }
}

/// Watches one server until it is closed or given up on.
async fn supervise(
    config: Config,
    server_config: ServerConfig,
    registry: Arc<Registry>,
    audit: Option<Arc<dyn AuditStore>>,
) {
    let server = server_config.name.clone();
    let limits = &server_config.limits;
    let registered: Vec<RegisteredTool> = registry
        .tools()
        .filter(|tool| tool.server == server)
        .cloned()
        .collect();
    let mut in_a_row: u64 = 0;
    let mut attempts: u64 = 0;
    // How the first start was confined: no restart may come out less confined.
    let mut first: Option<Option<Confinement>> = None;
    loop {
        let Some(Connection::Up(upstream)) = registry.connection(&server) else {
            return;
        };
        let first = &*first.get_or_insert_with(|| upstream.confinement().cloned());
        let up_since = Instant::now();
        let reason = watch(&registry, &server, &upstream).await;
        if reason == FailureReason::Closed {
            return;
        }
        // Wait for the failed server's processes to end before starting another.
        upstream.close().await;
        if up_since.elapsed() >= STABLE_AFTER {
            in_a_row = 0;
        }
        let mut why = format!("server `{server}` failed: {reason}");
        // Its transport was connected once; toolward cannot make another.
        if matches!(server_config.transport, ServerTransport::Handed(_)) {
            let down = format!(
                "{why}; it was handed in as a transport, so it cannot be restarted: hand in a new transport and start toolward again"
            );
            refuse_for_good(audit.as_ref(), &registry, &server, down);
            return;
        }
        loop {
            if in_a_row >= limits.restart_attempts {
                let down = match limits.restart_attempts {
                    0 => format!("{why}; it is not restarted (`restart_attempts` is 0)"),
                    n => format!("{why}; it was not restarted after {n} attempts in a row"),
                };
                mark_down(&registry, &server, down);
                return;
            }
            in_a_row += 1;
            let delay = backoff(limits.restart_backoff(), in_a_row);
            let restarting = format!(
                "{why}; restart attempt {in_a_row} of {} in {} ms",
                limits.restart_attempts,
                delay.as_millis()
            );
            if !registry.restarting(&server, restarting.clone()) {
                return;
            }
            registry.tell_clients(restarting);
            tokio::time::sleep(delay).await;
            let spec = crate::pin::stdio_spec(&config, &server_config).ok();
            let now = spec.as_ref().and_then(|spec| spec.confine.as_ref());
            if spec.is_some()
                && let Some(weaker) = crate::confine::weaker_start(first.as_ref(), now)
            {
                // Unconfined now: the plan says why (a launcher that changed, say).
                let weaker = match crate::confine::plan(&config, &server_config) {
                    Some(crate::confine::Plan::Unconfined { reason, .. }) if now.is_none() => {
                        reason
                    }
                    _ => weaker,
                };
                let down = format!(
                    "{why}; it was not restarted: it would have run less confined than its first start ({weaker}), so it is marked failed: restart toolward to start it again"
                );
                refuse_for_good(audit.as_ref(), &registry, &server, down);
                return;
            }
            attempts += 1;
            match restart(&config, &server_config, &registered).await {
                Ok((upstream, withdrawn)) => {
                    record(audit.as_ref(), start_record(&server, attempts, &upstream));
                    for (tool, reason) in &withdrawn {
                        registry.withdraw(&tool.exposed_name, reason.clone());
                        registry.tell_clients(format!(
                            "tool `{}` on server `{server}` is withdrawn: {reason}",
                            tool.exposed_name
                        ));
                    }
                    if let Err(upstream) = registry.restarted(&server, upstream) {
                        // Closed meanwhile.
                        upstream.close().await;
                        return;
                    }
                    registry.tell_clients(format!(
                        "server `{server}` was restarted (attempt {in_a_row}); {} of its {} tools are back",
                        registered.len() - withdrawn.len(),
                        registered.len()
                    ));
                    break;
                }
                Err(reason) => why = format!("server `{server}` failed to restart: {reason}"),
            }
        }
    }
}

/// Waits until `upstream` ends, telling the clients of the first tool-list change meanwhile
/// (once per connection: a server that repeats it floods nothing).
async fn watch(registry: &Registry, server: &str, upstream: &Upstream) -> FailureReason {
    let mut list_changed = upstream.watch_tools_list_changed();
    // The transport logged it for the operator.
    let tell = || {
        registry.tell_clients_only(format!(
            "server `{server}` says its tool list changed; toolward keeps the tools it loaded and checked (review the change with `toolward pin`, then restart toolward)"
        ));
    };
    // A change during the load counts too.
    let mut told = *list_changed.borrow_and_update() > 0;
    if told {
        tell();
    }
    loop {
        tokio::select! {
            reason = upstream.ended() => return reason,
            changed = list_changed.changed(), if !told => {
                if changed.is_err() {
                    return upstream.ended().await;
                }
                told = true;
                tell();
            }
        }
    }
}

/// Starts `server` again and checks its listing against the tools the load registered:
/// the connection, and the tools to withdraw with the reason.
async fn restart<'a>(
    config: &Config,
    server: &ServerConfig,
    registered: &'a [RegisteredTool],
) -> Result<(Upstream, Vec<(&'a RegisteredTool, String)>), String> {
    let upstream = crate::pin::connect(config, server)
        .await
        .map_err(|e| error_chain(&e))?;
    let listing = match listing::list_tools(&upstream, &ListingBounds::from(&server.limits)).await {
        Ok(listing) => listing,
        Err(error) => {
            upstream.close().await;
            return Err(format!("its listing was refused: {}", error_chain(&error)));
        }
    };
    let withdrawn = registered
        .iter()
        .filter_map(|tool| {
            let listed = listing
                .tools
                .iter()
                .find(|listed| listed.name == tool.upstream_name);
            let reason = match listed {
                None if listing.duplicates.contains(&tool.upstream_name) => {
                    "the restarted server lists it more than once"
                }
                None => "the restarted server no longer offers it",
                Some(listed) if listed.description_sha256 != tool.description_sha256 => {
                    "the restarted server changed its description since the pin"
                }
                Some(listed) if listed.input_schema_sha256 != tool.input_schema_sha256 => {
                    "the restarted server changed its input schema since the pin"
                }
                Some(_) => return None,
            };
            Some((tool, reason.to_owned()))
        })
        .collect();
    Ok((upstream, withdrawn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_wait_up_to_the_cap() {
        let first = Duration::from_millis(500);
        assert_eq!(backoff(first, 1), Duration::from_millis(500));
        assert_eq!(backoff(first, 2), Duration::from_millis(1000));
        assert_eq!(backoff(first, 4), Duration::from_millis(4000));
        assert_eq!(
            backoff(first, 7),
            Duration::from_millis(MAX_RESTART_BACKOFF_MS)
        );
        assert_eq!(
            backoff(first, u64::MAX),
            Duration::from_millis(MAX_RESTART_BACKOFF_MS)
        );
    }
}
