//! The device authorization grant (RFC 8628) against a real authorization server,
//! `oidc-provider` with the provider script of `tests/real-servers/oidc/`: `toolward auth login
//! SERVER --device` prints where to enter a code and the code, polls the token endpoint, and
//! keeps the grant the person approved on "another device" (`device-approve.mjs` plays that
//! browser). Skipped, saying why, while `oidc-provider` or the `toolward` binary is missing.

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolward::oauth::{GrantKind, GrantStore};

use super::principals::{Protected, config, jwt_claims, oidc_provider};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_login_device_prints_the_code_polls_and_keeps_the_grant_the_person_approved() {
    let Some((modules, script)) = oidc_provider() else {
        return;
    };
    let Some(bin) = crate::support::toolward_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let provider_dir = dir.path().join("provider");
    std::fs::create_dir_all(&provider_dir).unwrap();
    std::fs::copy(&script, provider_dir.join("provider.mjs")).unwrap();
    let approve = script.with_file_name("device-approve.mjs");
    std::os::unix::fs::symlink(&modules, provider_dir.join("node_modules")).unwrap();
    let port = super::free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let log = provider_dir.join("provider.log");
    let out = std::fs::File::create(&log).unwrap();
    let _provider = tokio::process::Command::new("node")
        .arg(provider_dir.join("provider.mjs"))
        .env("PORT", port.to_string())
        .env("KEYS", provider_dir.join("keys.json"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("listening ")
    {
        assert!(
            Instant::now() < deadline,
            "the provider did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let protected = Protected::start_at("127.0.0.1", Some(issuer.clone())).await;
    // No `grant` in the config: `--device` chooses it.
    let config = config(
        dir.path(),
        &protected.url,
        json!({ "client_id": "toolward-device", "scopes": ["openid", "offline_access", "mcp:tools"] }),
    );
    let config_arg = dir.path().join("toolward.json").display().to_string();
    let cwd = dir.path().to_owned();
    let provider_log = log.clone();
    let started = Instant::now();
    let stdout = tokio::task::spawn_blocking(move || {
        let mut login = Command::new(bin)
            .args(["auth", "login", "demo", "--device", "--config", &config_arg])
            .args(["--timeout-secs", "60"])
            .current_dir(&cwd)
            .env_remove("BROWSER")
            .env_remove("TOOLWARD_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(login.stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        let (uri, code) = loop {
            let line = lines.next().unwrap().unwrap();
            printed.push(line.clone());
            if let Some(code) = line
                .strip_prefix("and enter the code `")
                .and_then(|rest| rest.strip_suffix('`'))
            {
                break (printed[printed.len() - 2].clone(), code.to_owned());
            }
        };
        assert!(
            printed
                .iter()
                .any(|line| line.contains("open this URL on any device")),
            "{printed:?}"
        );
        assert!(uri.starts_with(&format!("{issuer}/")), "{printed:?}");
        // The person, on another device, enters the code and signs in as alice.
        let approved = Command::new("node")
            .arg(&approve)
            .args([&uri, &code, "alice"])
            .output()
            .unwrap();
        assert!(
            approved.status.success(),
            "{}{}",
            String::from_utf8_lossy(&approved.stderr),
            std::fs::read_to_string(&provider_log).unwrap_or_default()
        );
        printed.extend(lines.map_while(Result::ok));
        let status = login.wait_with_output().unwrap();
        assert!(
            status.status.success(),
            "{printed:?}{}",
            String::from_utf8_lossy(&status.stderr)
        );
        printed
    })
    .await
    .unwrap();
    assert!(
        stdout
            .iter()
            .any(|line| line.starts_with("signed in to server `demo`")),
        "{stdout:?}"
    );
    // oidc-provider's `interval` is 5 s: the first poll waits for it.
    assert!(started.elapsed() >= Duration::from_secs(5));

    let store = GrantStore::open(&config).await.unwrap();
    let grant = store.read("demo", None).await.unwrap().unwrap();
    assert_eq!(grant.kind, GrantKind::Device);
    assert_eq!(grant.client_id, "toolward-device");
    assert!(grant.refresh_token.is_some());
    let claims = jwt_claims(&grant.access_token);
    assert_eq!(claims["sub"], json!("alice"), "{claims}");
    assert_eq!(claims["aud"], json!(protected.url), "{claims}");
}
