//! Notifications of held calls: the console watches the queue and, for each call newly held,
//! posts to every configured target a JSON webhook (signed with HMAC-SHA256 in
//! [`SIGNATURE_HEADER`], with the time it was sent, [`TIMESTAMP_HEADER`]) or a Slack-compatible incoming-webhook message, each with the tool,
//! the principal and a link to the console. Arguments only when the operator turns them on.
//!
//! Targets are `https`, or `http` to a loopback address written as an IP (a receiver on the
//! same machine, the tests'). A target whose name resolves to a private, link-local,
//! shared or unspecified address is refused unless `allow_private`; the address checked is
//! the one connected to (the client is pinned to it), so a name cannot resolve elsewhere
//! between the check and the post.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::approval::PendingEntry;
use crate::text;

/// The header carrying a webhook body's signature: `X-Toolward-Signature: sha256=<hex>`,
/// the HMAC-SHA256 under the configured secret of the timestamp (as sent in
/// [`TIMESTAMP_HEADER`]), a `.`, and the exact body bytes.
pub const SIGNATURE_HEADER: &str = "x-toolward-signature";

/// The header carrying when a webhook was sent, in seconds since the Unix epoch. It is signed
/// with the body, so a receiver refuses a post older than a few minutes (and one whose
/// `call_id` it already took): a captured post cannot be replayed later.
pub const TIMESTAMP_HEADER: &str = "x-toolward-timestamp";

/// How often the queue is looked at for newly held calls: 200 ms, so a notification leaves
/// well within a second of the hold.
pub const NOTIFY_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How long one post may take: 5 seconds; a slow receiver does not hold up the others.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// What a target receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyFormat {
    /// A JSON object (`event`, `call_id`, `tool`, `server`, `effect`, `reason`,
    /// `principal`, `session`, `held_at_ms`, `link`, and `arguments` when turned on).
    Webhook,
    /// A Slack incoming-webhook message (`{"text": ...}`), its markup escaped.
    Slack,
}

/// One target.
#[derive(Clone)]
pub struct NotifyTarget {
    /// Where to post.
    pub url: String,
    /// What to post.
    pub format: NotifyFormat,
}

impl std::fmt::Debug for NotifyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A Slack webhook's URL is its secret.
        f.debug_struct("NotifyTarget")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// Who is told of held calls, and how.
#[derive(Clone, Default)]
pub struct NotifySettings {
    /// The targets; none turns notifications off.
    pub targets: Vec<NotifyTarget>,
    /// The HMAC-SHA256 key of [`SIGNATURE_HEADER`]; without one, bodies are not signed.
    pub secret: Option<Vec<u8>>,
    /// Include the call's arguments (as `toolward approvals list` shows them).
    pub include_arguments: bool,
    /// Post to targets that resolve to private addresses.
    pub allow_private: bool,
    /// Post each new signed checkpoint of the audit log ([`Event::Checkpoint`]).
    pub checkpoints: bool,
    /// The console's URL the links are built from (`https://console.example`); empty, the
    /// console's own bound address.
    pub link_base: String,
}

impl std::fmt::Debug for NotifySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifySettings")
            .field("targets", &self.targets)
            .field("signed", &self.secret.is_some())
            .field("include_arguments", &self.include_arguments)
            .field("allow_private", &self.allow_private)
            .field("checkpoints", &self.checkpoints)
            .field("link_base", &self.link_base)
            .finish()
    }
}

/// A target refused, naming it (its host only: a Slack URL's path is its secret) and why.
#[derive(Debug, thiserror::Error)]
#[error("notification target `{host}` is refused: {reason}")]
pub struct TargetRefused {
    /// The target's host.
    pub host: String,
    /// Why.
    pub reason: String,
}

/// Whether `ip` is an address a notification must not reach without `allow_private`: every
/// special-purpose range of the IANA registries that is not the global internet (private,
/// shared, loopback, link-local, documentation, benchmarking, multicast, reserved), and the
/// IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4) by the address
/// they carry; Teredo and local-use NAT64, whose target cannot be told, are refused.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || (a == 192 && b == 0 && c == 2)
                || (a == 198 && b == 51 && c == 100)
                || (a == 203 && b == 0 && c == 113)
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 192 && b == 88 && c == 99)
                || (a == 198 && (18..20).contains(&b))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded = |hi: u16, lo: u16| {
                let [a, b] = hi.to_be_bytes();
                let [c, d] = lo.to_be_bytes();
                is_private(IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)))
            };
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0
                // Documentation, discard, Teredo and the other IETF assignments of 2001::/23.
                || (s[0] == 0x2001 && (s[1] == 0x0db8 || s[1] < 0x0200))
                || (s[0] == 0x0100 && s[1..4] == [0, 0, 0])
                || (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 1)
                || (s[0] == 0x0064 && s[1] == 0xff9b && s[2..6] == [0; 4] && embedded(s[6], s[7]))
                || (s[0] == 0x2002 && embedded(s[1], s[2]))
                || (s[0..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) && embedded(s[6], s[7]))
                // IPv4-translated (::ffff:0:a.b.c.d, RFC 2765), by the address it carries.
                || (s[0..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 && embedded(s[6], s[7]))
                // Documentation (3fff::/20, RFC 9637) and SRv6 SIDs (5f00::/16, RFC 9602).
                || (s[0] == 0x3fff && s[1] & 0xf000 == 0)
                || s[0] == 0x5f00
        }
    }
}

/// The address to post `url` to, checked: https (or http to a loopback IP), and not private
/// unless `allow_private` (a loopback IP written in the URL is allowed: a local receiver).
///
/// # Errors
/// [`TargetRefused`] naming the host and why.
pub async fn check_target(url: &str, allow_private: bool) -> Result<(String, SocketAddr), TargetRefused> {
    let parsed = reqwest::Url::parse(url).map_err(|e| TargetRefused {
        host: String::from("?"),
        reason: format!("not a URL: {e}"),
    })?;
    let host = parsed.host_str().unwrap_or_default().to_owned();
    let refuse = |reason: String| TargetRefused {
        host: text::escape(&host),
        reason,
    };
    let literal: Option<IpAddr> = host.trim_matches(|c| c == '[' || c == ']').parse().ok();
    let local_literal = literal.is_some_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => {}
        "http" if local_literal => {}
        other => {
            return Err(refuse(format!(
                "scheme `{}`: targets are https (http only to a loopback address written as an IP)",
                text::escape(other)
            )));
        }
    }
    let port = parsed.port_or_known_default().unwrap_or(443);
    let addrs: Vec<SocketAddr> = match literal {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| refuse(format!("its name does not resolve: {e}")))?
            .collect(),
    };
    let Some(addr) = addrs.first().copied() else {
        return Err(refuse(String::from("its name resolves to no address")));
    };
    if !allow_private && !local_literal && addrs.iter().any(|a| is_private(a.ip())) {
        return Err(refuse(format!(
            "it resolves to `{}`, a private address (give --notify-allow-private, or `notify.allow_private` in the config, to post inside)",
            addr.ip()
        )));
    }
    Ok((host, addr))
}

/// The signature header's value for `body` sent at `timestamp` (seconds since the epoch, as
/// in [`TIMESTAMP_HEADER`]) under `secret`: `sha256=<hex>` of HMAC-SHA256 over
/// `<timestamp>.<body>`.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length: this never fails.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Slack's markup escaped: `&`, `<`, `>` (its control sequences `<...>` and entities), and
/// each backtick made a look-alike (U+02CB), so a caller's text cannot close the code block it
/// is shown in and write markup after it.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "\u{2cb}")
}

/// What is notified.
#[derive(Debug, Clone)]
pub(super) enum Event {
    /// A call newly held.
    CallHeld(Box<PendingEntry>),
    /// The audit chain no longer matches its head, or breaks (found by the console's check).
    ChainBroken {
        /// Where it breaks or how it differs from its head, escaped.
        problem: String,
    },
    /// A gateway refused a tool at load (a pin that changed, a hint, a hidden character).
    ToolRefused {
        /// The gateway's config file, as the gateway published it.
        gateway: String,
        /// The tool's server.
        server: String,
        /// The tool, as the server named it.
        tool: String,
        /// Why.
        reason: String,
    },
    /// A new signed checkpoint of the audit log, to be kept off this machine: the note as it
    /// was written, byte for byte (anchoring needs the exact text; see [`anchorable`]).
    Checkpoint {
        /// Who keeps it: `this machine` (the state folder), or the gateway's database login.
        from: String,
        /// The signed note.
        note: String,
    },
}

impl Event {
    /// What the log calls it: `call `ID``, `the audit chain`, `tool `T` on server `S``.
    fn what(&self) -> String {
        match self {
            Event::CallHeld(entry) => format!("call `{}`", text::escape(&entry.request.call_id)),
            Event::ChainBroken { .. } => String::from("the audit chain's break"),
            Event::Checkpoint { from, .. } => {
                format!("the audit checkpoint of `{}`", text::escape(from))
            }
            Event::ToolRefused { server, tool, .. } => format!(
                "refused tool `{}` of server `{}`",
                text::escape(tool),
                text::escape(server)
            ),
        }
    }
}

/// The body posted for `event` in `format`.
fn body(event: &Event, format: NotifyFormat, settings: &NotifySettings) -> String {
    let base = settings.link_base.trim_end_matches('/');
    let shown = |s: &str| slack_escape(&text::escape(s));
    match event {
        Event::CallHeld(entry) => held_body(entry, format, settings),
        Event::ChainBroken { problem } => {
            let link = format!("{base}/audit");
            match format {
                NotifyFormat::Webhook => json!({
                    "event": "chain-broken",
                    "event_id": crate::ids::new_ulid(),
                    "problem": text::escape(problem),
                    "found_at_ms": crate::ids::now_ms(),
                    "link": link,
                })
                .to_string(),
                NotifyFormat::Slack => json!({ "text": format!(
                    "toolward's audit chain is broken: {}\n<{}|See the audit in the console>",
                    shown(problem),
                    slack_escape(&link),
                ) })
                .to_string(),
            }
        }
        Event::Checkpoint { from, note } => {
            let link = format!("{base}/audit");
            match format {
                NotifyFormat::Webhook => json!({
                    "event": "audit-checkpoint",
                    "event_id": crate::ids::new_ulid(),
                    "from": text::escape(from),
                    // Nothing escapable but line feeds (`anchorable`): the exact note.
                    "note": note,
                    "link": link,
                })
                .to_string(),
                NotifyFormat::Slack => json!({ "text": cut_slack_text(format!(
                    "toolward's audit checkpoint from `{}`, to keep elsewhere (`toolward audit verify --checkpoint`):\n```\n{}```",
                    shown(from),
                    slack_escape(note),
                )) })
                .to_string(),
            }
        }
        Event::ToolRefused {
            gateway,
            server,
            tool,
            reason,
        } => {
            let link = format!("{base}/tools");
            match format {
                NotifyFormat::Webhook => json!({
                    "event": "tool-refused",
                    "event_id": crate::ids::new_ulid(),
                    "gateway": text::escape(gateway),
                    "server": text::escape(server),
                    "tool": text::escape(tool),
                    "reason": text::escape(reason),
                    "link": link,
                })
                .to_string(),
                NotifyFormat::Slack => json!({ "text": format!(
                    "toolward refused tool `{}` of server `{}` at load: {}\n<{}|See it in the console>",
                    shown(tool),
                    shown(server),
                    shown(reason),
                    slack_escape(&link),
                ) })
                .to_string(),
            }
        }
    }
}

/// The body posted for a held call in `format`.
fn held_body(entry: &PendingEntry, format: NotifyFormat, settings: &NotifySettings) -> String {
    let r = &entry.request;
    let link = format!(
        "{}/approvals#call-{}",
        settings.link_base.trim_end_matches('/'),
        text::escape(&r.call_id)
    );
    let arguments = settings
        .include_arguments
        .then(|| crate::approval::display_arguments(&r.arguments));
    match format {
        NotifyFormat::Webhook => {
            let mut value = json!({
                "event": "call-held",
                "call_id": text::escape(&r.call_id),
                "tool": text::escape(&r.exposed_tool),
                "server": text::escape(&r.server),
                "effect": text::escape(&r.effect),
                "reason": text::escape(&r.reason),
                "principal": text::escape(&r.principal),
                "session": text::escape(&r.session),
                "held_at_ms": r.time_ms,
                "link": link,
            });
            if let (Some(arguments), Some(map)) = (arguments, value.as_object_mut()) {
                map.insert(String::from("arguments"), json!(arguments));
            }
            value.to_string()
        }
        NotifyFormat::Slack => {
            let shown = |s: &str| slack_escape(&text::escape(s));
            let mut message = format!(
                "toolward holds a call of `{}` (effect {}) by principal `{}`: {}\n<{}|Answer it in the console>",
                shown(&r.exposed_tool),
                shown(&r.effect),
                shown(&r.principal),
                shown(&r.reason),
                slack_escape(&link),
            );
            if let Some(arguments) = arguments {
                message.push_str(&format!("\n```{}```", slack_escape(&arguments)));
            }
            json!({ "text": cut_slack_text(message) }).to_string()
        }
    }
}

/// Most refused tools notified in a minute: 20. A gateway's published state is the gateway's
/// word (in a fleet, any gateway login's), and thousands of refusals would otherwise be
/// thousands of posts; past it they are counted in the log once a minute and left to the
/// tools page.
pub const MAX_REFUSAL_NOTICES_PER_MINUTE: usize = 20;

/// Most refusals remembered as told (by gateway, server, tool and reason): 4,096; past it
/// the memory starts again.
const MAX_REFUSALS_KEPT: usize = 4096;

/// Most characters of a Slack message's text: 3,500, under the 4,000 Slack advises (it cuts
/// longer texts itself, and a caller's arguments or a policy's reason can be long); past it
/// the text is cut on a character boundary saying how much more the console shows.
pub const MAX_SLACK_TEXT_CHARS: usize = 3_500;

/// `text` cut to [`MAX_SLACK_TEXT_CHARS`], saying how many characters were left out.
fn cut_slack_text(text: String) -> String {
    let total = text.chars().count();
    if total <= MAX_SLACK_TEXT_CHARS {
        return text;
    }
    let kept: String = text.chars().take(MAX_SLACK_TEXT_CHARS - 80).collect();
    format!(
        "{kept}\n… {} more characters: see the call in the console",
        total - (MAX_SLACK_TEXT_CHARS - 80)
    )
}

/// Posts `event` to `target`; logs the outcome.
async fn post(event: &Event, target: &NotifyTarget, settings: &NotifySettings) {
    let what = event.what();
    let (host, addr) = match check_target(&target.url, settings.allow_private).await {
        Ok(checked) => checked,
        Err(refused) => {
            tracing::warn!("not notifying of {what}: {refused}");
            return;
        }
    };
    let client = reqwest::Client::builder()
        .timeout(NOTIFY_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .resolve(&host, addr)
        .build();
    let Ok(client) = client else {
        tracing::warn!("not notifying of {what}: no HTTP client");
        return;
    };
    let body = body(event, target.format, settings);
    let mut request = client
        .post(&target.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    if let Some(secret) = &settings.secret {
        let timestamp = crate::ids::now_ms() / 1000;
        request = request
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature(secret, timestamp, body.as_bytes()));
    }
    match request.body(body).send().await {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => tracing::warn!(
            "notification of {what} to `{}`: answered {}",
            text::escape(&host),
            response.status()
        ),
        Err(error) => tracing::warn!(
            "notification of {what} to `{}` failed: {}",
            text::escape(&host),
            text::escape(&error.without_url().to_string())
        ),
    }
}

/// Posts `event` to every target, each on a task of its own (a slow receiver holds up no
/// other).
pub(super) fn tell(event: &Event, settings: &NotifySettings) {
    for target in &settings.targets {
        let (event, target, settings) = (event.clone(), target.clone(), settings.clone());
        tokio::spawn(async move { post(&event, &target, &settings).await });
    }
}

/// Whether `note` is sent as a checkpoint: at most [`crate::checkpoint::MAX_NOTE_BYTES`] of
/// text and line feeds with nothing [`text::escape`] would escape (a signed note's lines are
/// printable; its signature lines open with an em dash). A note is sent byte for byte
/// (escaping would change what it signs), so anything else, which a database login other than
/// the gateway's could have written, is not sent.
fn anchorable(note: &str) -> bool {
    note.len() <= crate::checkpoint::MAX_NOTE_BYTES
        && note.chars().all(|c| c == '\n' || !text::is_escaped(c))
}

/// How often the console looks for new checkpoints (every 25 ticks: 5 s): a gateway signs
/// at its interval, which is minutes, not seconds.
const CHECKPOINT_POLL_TICKS: u32 = 25;

/// At most this many checkpoints are told at each look; the rest wait for the next (a
/// database login rewriting its row at every look cannot flood the targets).
const MAX_CHECKPOINT_NOTICES_PER_POLL: usize = 16;

/// Watches the held calls of `store` and notifies every target of each call newly held,
/// once, and the gateways' published states for each tool a live gateway refused at load,
/// once per run of the console, and (with [`NotifySettings::checkpoints`]) each new
/// checkpoint of the audit log, until `stop`.
pub(super) async fn watch(
    store: std::sync::Arc<super::store::Store>,
    settings: NotifySettings,
    stop: CancellationToken,
) {
    if settings.targets.is_empty() {
        return;
    }
    let mut told: HashSet<String> = HashSet::new();
    // The latest checkpoint told of each signer, by who keeps it.
    let mut checkpoints: std::collections::HashMap<String, String> =
        std::collections::HashMap::new();
    let mut refusals: HashSet<(String, String, String, String)> = HashSet::new();
    // Refused tools told this minute, and those left untold past the cap.
    let mut minute = (tokio::time::Instant::now(), 0usize, 0usize);
    let mut interval = tokio::time::interval(NOTIFY_POLL_INTERVAL);
    let mut ticks: u32 = 0;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = stop.cancelled() => return,
        }
        // The gateways' published states, every fifth tick (once a second): each tool a
        // live gateway refused, once per console run.
        ticks = ticks.wrapping_add(1);
        if ticks % 5 == 1
            && let Ok((gateways, _)) = store.gateways().await
        {
                for published in gateways.into_iter().filter(|p| p.live) {
                    let gateway = published.state.config_file.as_ref().map_or_else(
                        || published.state.id.clone(),
                        |file| file.display().to_string(),
                    );
                    for server in published.state.servers {
                        for refused in server.refused {
                            let key = (
                                published.state.id.clone(),
                                server.server.clone(),
                                refused.tool.clone(),
                                refused.reason.clone(),
                            );
                            if refusals.len() >= MAX_REFUSALS_KEPT {
                                refusals.clear();
                            }
                            if !refusals.insert(key) {
                                continue;
                            }
                            if minute.0.elapsed() >= Duration::from_secs(60) {
                                if minute.2 > 0 {
                                    tracing::warn!(
                                        "console: {} refused tools were not notified: more than {MAX_REFUSAL_NOTICES_PER_MINUTE} in a minute (see the tools page)",
                                        minute.2
                                    );
                                }
                                minute = (tokio::time::Instant::now(), 0, 0);
                            }
                            if minute.1 >= MAX_REFUSAL_NOTICES_PER_MINUTE {
                                minute.2 += 1;
                                continue;
                            }
                            minute.1 += 1;
                            let event = Event::ToolRefused {
                                gateway: gateway.clone(),
                                server: server.server.clone(),
                                tool: refused.tool,
                                reason: refused.reason,
                            };
                            tell(&event, &settings);
                        }
                    }
                }
        }
        if settings.checkpoints
            && ticks % CHECKPOINT_POLL_TICKS == 1
            && let Ok(latest) = store.checkpoints().await
        {
            let mut told_now = 0;
            for (from, note) in latest {
                if checkpoints.get(&from) == Some(&note) {
                    continue;
                }
                if told_now >= MAX_CHECKPOINT_NOTICES_PER_POLL {
                    break;
                }
                told_now += 1;
                if !anchorable(&note) {
                    tracing::warn!(
                        "console: the audit checkpoint of `{}` is not sent: it is not a note of printable text within {} bytes",
                        text::escape(&from),
                        crate::checkpoint::MAX_NOTE_BYTES
                    );
                } else {
                    tell(
                        &Event::Checkpoint {
                            from: from.clone(),
                            note: note.clone(),
                        },
                        &settings,
                    );
                }
                checkpoints.insert(from, note);
            }
        }
        let Ok(entries) = store.held().await else {
            continue;
        };
        told.retain(|id| entries.iter().any(|e| &e.request.call_id == id));
        for entry in entries {
            if !entry.waiting || entry.problem.is_some() || !told.insert(entry.request.call_id.clone()) {
                continue;
            }
            tell(&Event::CallHeld(Box::new(entry)), &settings);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn targets_are_https_or_a_loopback_ip_and_never_private_unless_allowed() {
        assert!(check_target("http://127.0.0.1:9/hook", false).await.is_ok());
        assert!(check_target("http://[::1]:9/hook", false).await.is_ok());
        let plain = check_target("http://example.com/hook", false).await.unwrap_err();
        assert!(plain.to_string().contains("scheme `http`"), "{plain}");
        let inside = check_target("https://10.1.2.3/hook", false).await.unwrap_err();
        assert!(inside.to_string().contains("private address"), "{inside}");
        assert!(check_target("https://169.254.169.254/latest", false).await.is_err());
        assert!(check_target("https://[fd00::1]/x", false).await.is_err());
        assert!(check_target("https://10.1.2.3/hook", true).await.is_ok());
    }

    #[test]
    fn special_purpose_ranges_and_ipv6_forms_of_private_ipv4_are_private() {
        let private = |ip: &str| is_private(ip.parse().unwrap());
        for ip in [
            "10.0.0.1", "100.64.0.1", "127.0.0.1", "169.254.169.254", "172.16.0.1",
            "192.168.1.1", "0.1.2.3", "192.0.0.8", "192.0.2.1", "192.88.99.1", "198.18.0.1",
            "198.51.100.1", "203.0.113.1", "224.0.0.1", "240.0.0.1", "255.255.255.255",
            "::1", "::", "fd00::1", "fe80::1", "fec0::1", "ff02::1", "2001:db8::1",
            "2001::1", "100::1", "64:ff9b:1::1",
            // Mapped, compatible, NAT64 and 6to4 forms of 169.254.169.254 and 10.0.0.1.
            "::ffff:169.254.169.254", "::169.254.169.254", "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1", "2002:0a00:0001::",
            // An outside attack's (7 December 2026): IPv4-translated 10.0.0.1, the new
            // documentation prefix, an SRv6 SID.
            "::ffff:0:a00:1", "3fff::1", "5f00::1",
        ] {
            assert!(private(ip), "{ip} passed as public");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::5db8:d822", "2002:5db8:d822::1"] {
            assert!(!private(ip), "{ip} refused as private");
        }
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_and_the_body() {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"1767225600.{}");
        assert_eq!(
            signature(b"Jefe", 1_767_225_600, b"{}"),
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        );
        assert_ne!(
            signature(b"Jefe", 1_767_225_600, b"{}"),
            signature(b"Jefe", 1_767_225_601, b"{}"),
            "a replay with a new timestamp needs a new signature"
        );
    }

    #[test]
    fn a_webhook_body_carries_a_servers_control_characters_escaped() {
        let event = Event::ToolRefused {
            gateway: String::from("g"),
            server: String::from("s\u{7}"),
            tool: String::from("\u{1b}[31mwrite"),
            reason: String::from("changed\u{202e}"),
        };
        let body = body(&event, NotifyFormat::Webhook, &NotifySettings::default());
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        for field in ["server", "tool", "reason"] {
            let text = value[field].as_str().unwrap();
            assert!(
                !text.chars().any(|c| c.is_control() || c == '\u{202e}'),
                "{field}: {text:?}"
            );
        }
        assert_eq!(value["tool"], "\\u{001B}[31mwrite");
    }

    #[test]
    fn a_long_slack_text_is_cut_on_a_character_boundary_saying_how_much_more() {
        let short = String::from("held");
        assert_eq!(cut_slack_text(short.clone()), short);
        let long = "é".repeat(MAX_SLACK_TEXT_CHARS + 500);
        let cut = cut_slack_text(long);
        assert!(cut.chars().count() <= MAX_SLACK_TEXT_CHARS, "{}", cut.chars().count());
        assert!(cut.ends_with("… 580 more characters: see the call in the console"), "{cut}");
    }

    #[test]
    fn a_signed_note_is_sent_as_written_and_one_with_controls_or_too_long_is_not() {
        let note = "example.com/audit\n2\nNYsrs5stFNO1qU+RxQ9oWhKRmIruY2KVunOeaWk/IyU=\n\n\u{2014} example.com/audit 7fNdoP1MVigw\n";
        assert!(anchorable(note));
        assert!(!anchorable(&note.replace("audit\n2", "audit\u{1b}]8;;x\n2")));
        assert!(!anchorable(&note.replace('\n', "\r\n")));
        assert!(!anchorable(&note.replace("7fN", "\u{202e}7fN")));
        let long = format!("{note}{}", "a".repeat(crate::checkpoint::MAX_NOTE_BYTES));
        assert!(!anchorable(&long));
    }

    #[test]
    fn slack_markup_in_a_callers_text_is_escaped() {
        assert_eq!(slack_escape("<!channel> & <http://x|y>"), "&lt;!channel&gt; &amp; &lt;http://x|y&gt;");
    }
}
