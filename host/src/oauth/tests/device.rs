//! The device authorization grant (RFC 8628) against a hostile fake authorization server on
//! 127.0.0.1: what the real one (`oidc-provider`, `tests/all/oauth/device.rs`) cannot be made
//! to send: control characters in the user code, a verification URI with a user name or
//! another scheme, `interval: 0`, `slow_down`, an `interval` past the code's life.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::discovery::{Discovered, ResourceMetadata, ServerMetadata};
use super::super::login::{self, Prompt};
use super::super::{OAuthError, OAuthHttp};
use crate::config::OAuthConfig;

/// The fake authorization server: its device authorization answer (`BASE` in it replaced by
/// its own `http://127.0.0.1:PORT`), and the token endpoint's answers in turn (the last one
/// repeated); the time of every token request.
struct Fake {
    base: String,
    polls: Arc<Mutex<Vec<Instant>>>,
}

impl Fake {
    async fn start(device: Value, tokens: Vec<(u16, Value)>) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let polls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&polls);
        let device: Value =
            serde_json::from_str(&device.to_string().replace("BASE", &base)).unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                // Read the head, then as much body as its `content-length` says.
                loop {
                    let n = stream.read(&mut buffer).await.unwrap_or(0);
                    request.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                    let Some(end) = text.find("\r\n\r\n") else {
                        if n == 0 {
                            break;
                        }
                        continue;
                    };
                    let length = text
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .and_then(|value| value.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if n == 0 || request.len() >= end + 4 + length {
                        break;
                    }
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                let (status, body) = if text.starts_with("POST /device") {
                    (200, device.clone())
                } else {
                    let mut polls = seen.lock().unwrap();
                    polls.push(Instant::now());
                    let index = (polls.len() - 1).min(tokens.len() - 1);
                    tokens[index].clone()
                };
                let body = body.to_string();
                let _ = stream
                    .write_all(
                        format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        Fake { base, polls }
    }

    fn discovered(&self) -> Discovered {
        let resource = format!("{}/mcp", self.base);
        Discovered {
            resource: resource.clone(),
            resource_metadata: ResourceMetadata {
                resource,
                authorization_servers: vec![self.base.clone()],
                scopes_supported: Vec::new(),
            },
            server_metadata: serde_json::from_value::<ServerMetadata>(json!({
                "issuer": self.base,
                "token_endpoint": format!("{}/token", self.base),
                "device_authorization_endpoint": format!("{}/device", self.base),
            }))
            .unwrap(),
            challenge_scope: None,
        }
    }

    /// Runs the device grant against it; what `show` got, and the outcome.
    async fn sign_in(&self, timeout: Duration) -> (Vec<String>, Result<String, OAuthError>) {
        let http = OAuthHttp::new("remote", &format!("{}/mcp", self.base), None).unwrap();
        let config = OAuthConfig {
            client_id: Some(String::from("toolward-device")),
            ..OAuthConfig::default()
        };
        let mut shown = Vec::new();
        let mut show = |prompt: Prompt<'_>| {
            if let Prompt::Device {
                verification_uri,
                user_code,
                ..
            } = prompt
            {
                shown.extend([verification_uri, user_code]);
            }
        };
        let outcome = login::device(
            &http,
            &config,
            &self.discovered(),
            &[String::from("mcp:tools")],
            timeout,
            &mut show,
        )
        .await
        .map(|grant| grant.access_token);
        (shown, outcome)
    }
}

fn device_answer(interval: u64, expires_in: u64) -> Value {
    json!({
        "device_code": "device-code-1",
        "user_code": "WDJB-MJHT\u{1b}[2J\u{7}",
        "verification_uri": "BASE/activate",
        "expires_in": expires_in,
        "interval": interval,
    })
}

fn pending(error: &str) -> (u16, Value) {
    (400, json!({ "error": error }))
}

#[tokio::test]
async fn the_device_grant_shows_the_code_escaped_and_polls_at_the_interval_slowing_down_when_told()
{
    // `interval: 0`: polled no faster than once a second all the same; `slow_down` adds 5 s.
    let fake = Fake::start(
        device_answer(0, 60),
        vec![
            pending("authorization_pending"),
            pending("slow_down"),
            (200, json!({ "access_token": "device-token", "token_type": "Bearer", "expires_in": 600 })),
        ],
    )
    .await;
    let (shown, outcome) = fake.sign_in(Duration::from_secs(60)).await;
    assert_eq!(outcome.unwrap(), "device-token");
    assert_eq!(shown[0], format!("{}/activate", fake.base));
    // The terminal control sequences of the user code are shown, not sent to the terminal.
    assert!(
        !shown[1].contains('\u{1b}') && !shown[1].contains('\u{7}'),
        "{shown:?}"
    );
    assert!(shown[1].starts_with("WDJB-MJHT"), "{shown:?}");
    let polls = fake.polls.lock().unwrap().clone();
    assert_eq!(polls.len(), 3);
    let first_gap = polls[1] - polls[0];
    let second_gap = polls[2] - polls[1];
    assert!(
        first_gap >= login::MIN_DEVICE_POLL_INTERVAL,
        "{first_gap:?}"
    );
    assert!(second_gap >= Duration::from_secs(5), "{second_gap:?}");
}

#[tokio::test]
async fn the_device_grant_stops_at_the_codes_life_even_when_the_interval_is_longer() {
    let fake = Fake::start(
        device_answer(3600, 2),
        vec![pending("authorization_pending")],
    )
    .await;
    let started = Instant::now();
    let (_, outcome) = fake.sign_in(Duration::from_secs(60)).await;
    let error = outcome.unwrap_err().to_string();
    assert!(error.contains("within 2 s"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // And at the login's timeout when the code lives longer.
    let fake = Fake::start(
        device_answer(1, 3600),
        vec![pending("authorization_pending")],
    )
    .await;
    let started = Instant::now();
    let (_, outcome) = fake.sign_in(Duration::from_secs(2)).await;
    assert!(outcome.is_err());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_verification_uri_with_a_user_name_or_another_scheme_is_refused_before_it_is_shown() {
    for uri in [
        "http://127.0.0.1@evil.example/activate",
        "javascript:alert(1)",
        "https://169.254.169.254/activate",
    ] {
        let mut answer = device_answer(1, 60);
        answer["verification_uri"] = json!(uri);
        let fake = Fake::start(answer, vec![pending("authorization_pending")]).await;
        let (shown, outcome) = fake.sign_in(Duration::from_secs(5)).await;
        let error = outcome.unwrap_err();
        assert!(shown.is_empty(), "{uri}: {shown:?}");
        assert!(
            matches!(
                error,
                OAuthError::Refused { .. } | OAuthError::Metadata { .. }
            ),
            "{uri}: {error}"
        );
        assert!(fake.polls.lock().unwrap().is_empty(), "{uri}");
    }
}
