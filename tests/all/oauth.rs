//! Signing in to an upstream HTTP server with OAuth 2.1 (issue 31), against the MCP
//! TypeScript SDK's own example server with OAuth (`simpleStreamableHttp --oauth`, pinned by
//! `tests/real-servers/install.sh`): its in-process demo authorization server serves
//! metadata, registers clients dynamically, checks PKCE, and its authorize endpoint
//! redirects back with a code without a login page, so a plain HTTP `GET` of the URL
//! `auth login` prints plays the browser.
//!
//! Skipped, with a message, when the SDK or the `toolward` binary is not there.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::real::real_servers;
use crate::support::toolward_binary;

mod device;
mod principals;

/// The SDK's example server, or `None` (after saying why) when it is not installed.
fn example_server() -> Option<PathBuf> {
    let script = real_servers().join(
        "oauth-sdk/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js",
    );
    if script.is_file() {
        Some(script)
    } else {
        eprintln!(
            "skipped: {} is not installed; run tests/real-servers/install.sh",
            script.display()
        );
        None
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The example server with `--oauth` on two free ports, killed when dropped.
struct Upstream {
    child: Child,
    mcp_port: u16,
    log: PathBuf,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Upstream {
    fn start(script: &Path, dir: &Path) -> Upstream {
        let mcp_port = free_port();
        let auth_port = free_port();
        let log = dir.join("upstream.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("node")
            .arg(script)
            .arg("--oauth")
            .env("MCP_PORT", mcp_port.to_string())
            .env("MCP_AUTH_PORT", auth_port.to_string())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let upstream = Upstream {
            child,
            mcp_port,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for port in [mcp_port, auth_port] {
            while TcpStream::connect(("localhost", port)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "the example server did not listen on {port}: {}",
                    upstream.log_text()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        upstream
    }

    /// The URL its metadata names as the resource: `localhost`, as the example writes it.
    fn url(&self) -> String {
        format!("http://localhost:{}/mcp", self.mcp_port)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A config with the example server as `demo`, its `greet` tool classified read-only.
fn write_config(dir: &Path, url: &str) -> PathBuf {
    std::fs::write(
        dir.join("rules.json"),
        json!({ "servers": { "demo": { "tools": {
            "greet": { "effect": "read-only", "allow_hint_mismatch": true }
        } } } })
        .to_string(),
    )
    .unwrap();
    let config = dir.join("toolward.json");
    std::fs::write(
        &config,
        json!({
            "mcpServers": { "demo": { "type": "http", "url": url } },
            "rules": { "file": "rules.json" },
        })
        .to_string(),
    )
    .unwrap();
    config
}

fn toolward(bin: &Path, dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env_remove("TOOLWARD_LOG")
        .env_remove("BROWSER")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `GET` of `url` (`http://host:port/path?query`) as a browser sends it; the status line
/// and the `Location` header, if any.
fn get(url: &str) -> (String, Option<String>) {
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/html\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer.lines().next().unwrap_or_default().to_owned();
    let location = answer
        .lines()
        .take_while(|line| !line.is_empty())
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("location")
                .then(|| value.trim().to_owned())
        });
    (status, location)
}

/// Every token the example server says it saw (it logs `req.auth`, whose `token` is one).
fn tokens_seen(log: &str) -> Vec<String> {
    log.match_indices("token: '")
        .filter_map(|(at, found)| {
            let rest = &log[at + found.len()..];
            rest.find('\'').map(|end| rest[..end].to_owned())
        })
        .filter(|token| token.len() >= 16)
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// Runs `toolward auth login demo --config CONFIG ARGS...` and plays the browser: a `GET` of
/// the URL it prints, then of the redirect back to toolward's loopback port. What it printed,
/// the authorization URL and the redirect; `log` says what the upstream logged, for failures.
fn sign_in(
    bin: &Path,
    dir: &Path,
    config_arg: &str,
    args: &[&str],
    log: &dyn Fn() -> String,
) -> (String, String, String) {
    let mut login = Command::new(bin)
        .args([
            "auth",
            "login",
            "demo",
            "--config",
            config_arg,
            "--timeout-secs",
            "60",
        ])
        .args(args)
        .current_dir(dir)
        .env_remove("BROWSER")
        .env_remove("TOOLWARD_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(login.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    let authorize = loop {
        let Some(Ok(line)) = lines.next() else {
            let mut err = String::new();
            login
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("`auth login` printed no URL: {printed}{err}{}", log());
        };
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("http://") {
            break line;
        }
    };
    let (status, location) = get(&authorize);
    assert!(status.contains(" 302 "), "{status}");
    let location = location.unwrap();
    let (status, _) = get(&location);
    assert!(status.contains(" 200 "), "{status}");
    for line in lines.map_while(Result::ok) {
        printed.push_str(&line);
        printed.push('\n');
    }
    let mut err = String::new();
    login
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = login.wait().unwrap();
    assert!(status.success(), "{printed}{err}{}", log());
    printed.push_str(&err);
    (printed, authorize, location)
}

#[test]
fn auth_login_then_pin_and_call_through_toolward_with_the_token_encrypted_at_rest() {
    let Some(script) = example_server() else {
        return;
    };
    let Some(bin) = toolward_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(&script, dir.path());
    let config = write_config(dir.path(), &upstream.url());
    let config_arg = config.display().to_string();

    // `auth login` prints the URL and waits; a GET of it follows the redirect to toolward's
    // loopback port, as a browser would.
    let (printed, authorize, location) =
        sign_in(bin, dir.path(), &config_arg, &[], &|| upstream.log_text());
    assert!(
        authorize.contains("code_challenge_method=S256"),
        "{authorize}"
    );
    assert!(authorize.contains("state="), "{authorize}");
    assert!(authorize.contains("resource="), "{authorize}");
    assert!(location.starts_with("http://127.0.0.1:"), "{location}");
    assert!(printed.contains("signed in to server `demo`"), "{printed}");

    // A second visit of the redirect (a replayed code) is not waited for any more: the
    // listener is gone with the sign-in.
    assert!(TcpStream::connect(location.split('/').nth(2).unwrap()).is_err());

    let (code, out, err) = toolward(bin, dir.path(), &["pin", "--config", &config_arg]);
    assert_eq!(code, Some(0), "{out}{err}{}", upstream.log_text());
    let manifest = std::fs::read_to_string(dir.path().join("manifest.json")).unwrap();
    assert!(manifest.contains("\"greet\""), "{manifest}");

    let (code, out, err) = toolward(
        bin,
        dir.path(),
        &[
            "call",
            "--config",
            &config_arg,
            "demo__greet",
            "--args",
            r#"{"name":"toolward"}"#,
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("Hello, toolward!"), "{out}");

    let (code, status, err) = toolward(
        bin,
        dir.path(),
        &["auth", "status", "--config", &config_arg],
    );
    assert_eq!(code, Some(0), "{status}{err}");
    assert!(status.contains("demo: authorization_code"), "{status}");
    assert!(
        status.contains("mcp:tools") || status.contains("expires in"),
        "{status}"
    );

    // The token the server saw is nowhere in clear: not in the grant file, the key file, the
    // audit log, nor anything toolward printed.
    let tokens = tokens_seen(&upstream.log_text());
    assert!(
        !tokens.is_empty(),
        "the server logged no token: {}",
        upstream.log_text()
    );
    let state = dir.path().join("state");
    let grant = std::fs::read(state.join("oauth/demo.grant")).unwrap();
    let mut files = vec![grant, std::fs::read(state.join("oauth.key")).unwrap()];
    if let Ok(audit) = std::fs::read(dir.path().join("audit.jsonl")) {
        files.push(audit);
    }
    files.push(format!("{printed}{out}{err}{status}").into_bytes());
    for token in &tokens {
        for file in &files {
            assert!(!contains(file, token), "a token is in clear");
        }
    }

    let (code, out, err) = toolward(
        bin,
        dir.path(),
        &["auth", "logout", "demo", "--config", &config_arg],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!state.join("oauth/demo.grant").exists());
}

#[test]
fn check_and_pin_on_a_server_that_needs_sign_in_name_the_command_and_register_nothing() {
    let Some(script) = example_server() else {
        return;
    };
    let Some(bin) = toolward_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(&script, dir.path());
    let config = write_config(dir.path(), &upstream.url());
    let config_arg = config.display().to_string();

    let (code, out, err) = toolward(bin, dir.path(), &["pin", "--config", &config_arg]);
    assert_ne!(code, Some(0), "{out}{err}");
    let text = format!("{out}{err}");
    assert!(text.contains("server `demo` needs sign-in"), "{text}");
    assert!(text.contains("run `toolward auth login demo`"), "{text}");

    // `pin` wrote the manifest without the server; `check` loads against it.
    let (code, out, err) = toolward(
        bin,
        dir.path(),
        &["check", "--config", &config_arg, "--json"],
    );
    assert_ne!(code, Some(0), "{out}{err}");
    let text = format!("{out}{err}");
    assert!(text.contains("server `demo` needs sign-in"), "{text}");
    assert!(text.contains("run `toolward auth login demo`"), "{text}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        !out.contains("\"greet\""),
        "a tool of `demo` registered: {report}"
    );
}
