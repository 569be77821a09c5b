//! Notifications of held calls: the console watches the queue and, for each call newly held,
//! posts to every configured target a JSON webhook (signed with HMAC-SHA256 in
//! [`SIGNATURE_HEADER`]) or a Slack-compatible incoming-webhook message, each with the tool,
//! the principal and a link to the console. Arguments only when the operator turns them on.
//!
//! Targets are `https`, or `http` to a loopback address written as an IP (a receiver on the
//! same machine, the tests'). A target whose name resolves to a private, link-local,
//! shared or unspecified address is refused unless `allow_private`; the address checked is
//! the one connected to (the client is pinned to it), so a name cannot resolve elsewhere
//! between the check and the post.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::approval::{PendingEntry, list_queue};
use crate::text;

/// The header carrying a webhook body's signature: `X-Toolward-Signature: sha256=<hex>`,
/// the HMAC-SHA256 of the exact body bytes under the configured secret.
pub const SIGNATURE_HEADER: &str = "x-toolward-signature";

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

/// Whether `ip` is an address a notification must not reach without `allow_private`.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || v6.to_ipv4_mapped().is_some_and(|v4| is_private(IpAddr::V4(v4)))
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
            "it resolves to `{}`, a private address (give --notify-allow-private to post inside)",
            addr.ip()
        )));
    }
    Ok((host, addr))
}

/// The signature header's value for `body` under `secret`: `sha256=<hex>`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length: this never fails.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret) else {
        return String::new();
    };
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

/// The body posted for `entry` in `format`.
fn body(entry: &PendingEntry, format: NotifyFormat, settings: &NotifySettings) -> String {
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
                "call_id": r.call_id,
                "tool": r.exposed_tool,
                "server": r.server,
                "effect": r.effect,
                "reason": r.reason,
                "principal": r.principal,
                "session": r.session,
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
            json!({ "text": message }).to_string()
        }
    }
}

/// Posts `entry` to `target`; logs the outcome.
async fn post(entry: &PendingEntry, target: &NotifyTarget, settings: &NotifySettings) {
    let (host, addr) = match check_target(&target.url, settings.allow_private).await {
        Ok(checked) => checked,
        Err(refused) => {
            tracing::warn!("not notifying of call `{}`: {refused}", text::escape(&entry.request.call_id));
            return;
        }
    };
    let client = reqwest::Client::builder()
        .timeout(NOTIFY_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .resolve(&host, addr)
        .build();
    let Ok(client) = client else {
        tracing::warn!("not notifying: no HTTP client");
        return;
    };
    let body = body(entry, target.format, settings);
    let mut request = client
        .post(&target.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    if let Some(secret) = &settings.secret {
        request = request.header(SIGNATURE_HEADER, signature(secret, body.as_bytes()));
    }
    match request.body(body).send().await {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => tracing::warn!(
            "notification of call `{}` to `{}`: answered {}",
            text::escape(&entry.request.call_id),
            text::escape(&host),
            response.status()
        ),
        Err(error) => tracing::warn!(
            "notification of call `{}` to `{}` failed: {}",
            text::escape(&entry.request.call_id),
            text::escape(&host),
            text::escape(&error.without_url().to_string())
        ),
    }
}

/// Watches the queue under `state_dir` and notifies every target of each call newly held,
/// once, until `stop`.
pub(super) async fn watch(state_dir: PathBuf, settings: NotifySettings, stop: CancellationToken) {
    if settings.targets.is_empty() {
        return;
    }
    let mut told: HashSet<String> = HashSet::new();
    let mut interval = tokio::time::interval(NOTIFY_POLL_INTERVAL);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = stop.cancelled() => return,
        }
        let dir = state_dir.clone();
        let Ok(Ok(entries)) = tokio::task::spawn_blocking(move || list_queue(&dir)).await else {
            continue;
        };
        told.retain(|id| entries.iter().any(|e| &e.request.call_id == id));
        for entry in entries {
            if !entry.waiting || entry.problem.is_some() || !told.insert(entry.request.call_id.clone()) {
                continue;
            }
            for target in &settings.targets {
                let (entry, target, settings) = (entry.clone(), target.clone(), settings.clone());
                tokio::spawn(async move { post(&entry, &target, &settings).await });
            }
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
    fn the_signature_is_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn slack_markup_in_a_callers_text_is_escaped() {
        assert_eq!(slack_escape("<!channel> & <http://x|y>"), "&lt;!channel&gt; &amp; &lt;http://x|y&gt;");
    }
}
