//! The web console's OpenID Connect sign-in (`console.oidc`, issue 32) against a real
//! provider: `oidc-provider` from npm configured by `tests/real-servers/oidc/provider.mjs`
//! (its client `toolward-console`), started on a free loopback port. The test is the
//! browser: it presses the provider's button, keeps the flow the page hands its script,
//! follows the provider's redirects with the provider's cookies (signing in as an account of
//! the provider by its `login_hint`, as its test interaction takes it), and posts the
//! provider's answer from the callback page as the console's script does. Asserted: the user
//! is the ID token's `email` with its `groups`, shown escaped; a tampered `state`, an answer
//! brought with another sign-in's flow or none, a replayed code, the provider's `error` and
//! a user named like a token of `listen.tokens` are refused, each naming what failed. The
//! ID token's own checks (audience, `azp`, nonce, times, signature) are unit tests of
//! `console::oidc` with tokens signed there.
//!
//! Skipped with a message when `oidc-provider` is not installed, except in CI.

use std::net::SocketAddr;

use toolward::config::{ConsoleOidcConfig, SecretSource};

use crate::console::{Bench, Got, form, handed_key, own_origin, send};
use crate::listen::oauth::{Provider, provider_modules};

/// The value of attribute `name` in `html`, its character references undone.
fn attribute(html: &str, name: &str) -> String {
    let marker = format!("{name}=\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no `{name}` in {html}"))
        + marker.len();
    let raw = html[at..].split('"').next().unwrap();
    raw.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// `(authority, path and query)` of an absolute `http://` URL.
fn split(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not http: {url}"));
    match rest.find('/') {
        Some(at) => (rest[..at].to_owned(), rest[at..].to_owned()),
        None => (rest.to_owned(), String::from("/")),
    }
}

/// The provider's side of the browser: `GET url` with the provider's cookies, keeping those
/// it sets; its status and `Location` made absolute.
async fn provider_get(url: &str, cookies: &mut Vec<(String, String)>) -> (u16, Option<String>) {
    let (authority, target) = split(url);
    let addr: SocketAddr = authority.parse().unwrap();
    let jar = cookies
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ");
    let mut headers = vec![("host", authority.clone())];
    if !jar.is_empty() {
        headers.push(("cookie", jar));
    }
    let got = send(addr, "GET", &target, &headers, None).await;
    for value in got.headers.get_all("set-cookie") {
        let value = value.to_str().unwrap();
        let pair = value.split(';').next().unwrap();
        let (key, value) = pair.split_once('=').unwrap();
        cookies.retain(|(k, _)| k != key.trim());
        cookies.push((key.trim().to_owned(), value.trim().to_owned()));
    }
    let location = got.headers.get("location").map(|location| {
        let location = location.to_str().unwrap();
        if location.starts_with("http://") {
            location.to_owned()
        } else {
            format!("http://{authority}{location}")
        }
    });
    assert!(
        location.is_some() || got.status == 200,
        "the provider stopped at {url}: {} {}",
        got.status,
        got.body
    );
    (got.status, location)
}

/// One sign-in as far as the provider's answer: the flow the start page handed the script,
/// the authorization request, and the callback target (`/oidc/callback?...`) the provider
/// sent the browser to, having signed in as `login`.
struct Answer {
    flow: String,
    authorization: String,
    callback: String,
}

async fn to_the_provider_and_back(console: SocketAddr, login: &str) -> Answer {
    let start = send(
        console,
        "POST",
        "/oidc/start",
        &[("origin", own_origin(console))],
        Some(String::new()),
    )
    .await;
    assert_eq!(start.status, 200, "{}", start.body);
    let flow = attribute(&start.body, "data-flow");
    let authorization = attribute(&start.body, "data-next");
    for part in [
        "code_challenge_method=S256",
        "nonce=",
        "state=",
        "scope=openid+email+groups",
    ] {
        assert!(authorization.contains(part), "{authorization}");
    }
    // The person chooses their account at the provider: its test interaction takes it as the
    // request's `login_hint`.
    let mut url = format!("{authorization}&login_hint={login}");
    let mut cookies = Vec::new();
    let callback_prefix = format!("http://127.0.0.1:{}/oidc/callback?", console.port());
    for _ in 0..20 {
        let (_, location) = provider_get(&url, &mut cookies).await;
        let next = location.expect("the provider answered without sending the browser on");
        if next.starts_with(&callback_prefix) {
            let callback = split(&next).1;
            return Answer {
                flow,
                authorization,
                callback,
            };
        }
        url = next;
    }
    panic!("the provider never sent the browser back");
}

/// The callback page, then its script's post of the answer with `flow`.
async fn finish(console: SocketAddr, callback: &str, flow: &str) -> Got {
    let page = send(console, "GET", callback, &[], None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"oidc-callback\""), "{}", page.body);
    assert!(
        !page.body.contains("code="),
        "the page repeats the code: {}",
        page.body
    );
    let query = callback.split_once('?').unwrap().1;
    send(
        console,
        "POST",
        "/oidc/finish",
        &[("origin", own_origin(console))],
        Some(form(&[("query", query), ("flow", flow)])),
    )
    .await
}

/// The console's `console.oidc` for `provider`, its secret in a file of `bench`.
fn oidc(bench: &Bench, provider: &Provider, user_claim: &str) -> ConsoleOidcConfig {
    let secret = bench.path().join("console-oidc-secret");
    std::fs::write(&secret, "secret-toolward-console\n").unwrap();
    ConsoleOidcConfig {
        issuer: provider.issuer.clone(),
        client_id: String::from("toolward-console"),
        client_secret: Some(SecretSource::File(secret)),
        user_claim: user_claim.to_owned(),
        groups_claim: String::from("groups"),
        scopes: vec![
            String::from("openid"),
            String::from("email"),
            String::from("groups"),
        ],
        algorithms: vec![String::from("RS256"), String::from("ES256")],
        ca_file: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_signs_in_with_the_provider_as_its_claim_with_its_groups_and_tampered_answers_are_refused()
 {
    let Some(modules) = provider_modules() else {
        return;
    };
    let bench = Bench::new().await;
    let dir = bench.path().join("provider");
    let provider = Provider::start(&modules, &dir, &dir.join("keys.json"), None).await;
    let console = bench.console_oidc(oidc(&bench, &provider, "email")).await;
    let addr = console.addr;

    let login = send(addr, "GET", "/login", &[], None).await;
    assert!(login.body.contains("id=\"sign-in-oidc\""), "{}", login.body);
    assert!(
        login.body.contains("id=\"token\""),
        "the token form is still there"
    );

    // Alice signs in: her email is the user, her groups are kept.
    let alice = to_the_provider_and_back(addr, "alice").await;
    let signed = finish(addr, &alice.callback, &alice.flow).await;
    assert_eq!(
        signed.status,
        200,
        "{}\n{}",
        signed.body,
        provider.log_text()
    );
    assert!(
        signed.body.contains("<b>alice@example.test</b>"),
        "{}",
        signed.body
    );
    assert!(signed.body.contains("platform"), "{}", signed.body);
    let session = signed.cookie("toolward_console").unwrap();
    assert!(
        signed.header("set-cookie").contains("SameSite=Strict"),
        "{}",
        signed.header("set-cookie")
    );
    let key = handed_key(&signed.body);
    let page = send(
        addr,
        "GET",
        "/approvals",
        &[
            ("cookie", format!("toolward_console={session}")),
            ("x-toolward-key", key.clone()),
        ],
        None,
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("<b id=\"user\">alice@example.test</b>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<span class=\"group\">platform</span>"),
        "{}",
        page.body
    );

    // The same answer again: the provider takes a code once.
    let replayed = finish(addr, &alice.callback, &alice.flow).await;
    assert_eq!(replayed.status, 502, "{}", replayed.body);
    assert!(
        replayed
            .body
            .contains("token endpoint did not take the code"),
        "{}",
        replayed.body
    );
    assert!(replayed.cookie("toolward_console").is_none());

    // An answer whose `state` was changed on the way.
    let bob = to_the_provider_and_back(addr, "bob").await;
    let state = bob
        .callback
        .split(['?', '&'])
        .find_map(|pair| pair.strip_prefix("state="))
        .unwrap()
        .to_owned();
    let first = if state.starts_with('A') { "B" } else { "A" };
    let tampered = bob.callback.replace(
        &format!("state={state}"),
        &format!("state={first}{}", &state[1..]),
    );
    assert_ne!(tampered, bob.callback);
    let refused = finish(addr, &tampered, &bob.flow).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("state mismatch"), "{}", refused.body);
    assert!(refused.cookie("toolward_console").is_none());
    // Bob's true answer brought by a browser that began another sign-in (its flow), or none:
    // an answer planted in a browser that did not ask for it.
    let other = to_the_provider_and_back(addr, "carol").await;
    let planted = finish(addr, &bob.callback, &other.flow).await;
    assert_eq!(planted.status, 403, "{}", planted.body);
    assert!(planted.body.contains("state mismatch"), "{}", planted.body);
    let no_flow = finish(addr, &bob.callback, "").await;
    assert_eq!(no_flow.status, 403, "{}", no_flow.body);
    assert!(
        no_flow.body.contains("no sign-in in progress"),
        "{}",
        no_flow.body
    );
    // A flow made up, or of another purpose (a sign-in form's nonce), is not a flow.
    let form_nonce = login.cookie("toolward_console_login").unwrap();
    let forged = finish(addr, &bob.callback, &form_nonce).await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    // The answer posted from another site.
    let query = bob.callback.split_once('?').unwrap().1;
    let cross_site = send(
        addr,
        "POST",
        "/oidc/finish",
        &[("origin", String::from("http://127.0.0.1:1"))],
        Some(form(&[("query", query), ("flow", &bob.flow)])),
    )
    .await;
    assert_eq!(cross_site.status, 403, "{}", cross_site.body);
    // Bob's own answer with his own flow still signs him in: nothing above used it up.
    let bob_in = finish(addr, &bob.callback, &bob.flow).await;
    assert_eq!(bob_in.status, 200, "{}", bob_in.body);
    assert!(
        bob_in.body.contains("<b>bob@example.test</b>"),
        "{}",
        bob_in.body
    );

    // The provider's error, for this browser's sign-in: shown escaped, naming the error.
    let issuer_param = form(&[("iss", &provider.issuer)]);
    let carol_state = other
        .authorization
        .split(['?', '&'])
        .find_map(|pair| pair.strip_prefix("state="))
        .unwrap()
        .to_owned();
    let error = format!(
        "/oidc/callback?error=access_denied&error_description=%3Cscript%3Ealert(1)%3C%2Fscript%3E&state={carol_state}&{issuer_param}"
    );
    let denied = finish(addr, &error, &other.flow).await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert!(denied.body.contains("access_denied"), "{}", denied.body);
    assert!(!denied.body.contains("<script>"), "{}", denied.body);

    // A user whose claims carry markup: escaped on every page; a hidden character in a group
    // leaves that group out.
    let mallory = to_the_provider_and_back(addr, "mallory").await;
    let signed = finish(addr, &mallory.callback, &mallory.flow).await;
    assert_eq!(signed.status, 200, "{}", signed.body);
    assert!(!signed.body.contains("<img"), "{}", signed.body);
    assert!(!signed.body.contains("<script>alert"), "{}", signed.body);
    assert!(
        signed
            .body
            .contains("&lt;img src=x onerror=alert(1)&gt;@example.test"),
        "{}",
        signed.body
    );
    assert!(
        !signed.body.contains("202E") && !signed.body.contains("ops\u{202e}"),
        "{}",
        signed.body
    );
    console.stop().await;

    // With `sub` as the user claim, the provider's `alice` would be the token user `alice`.
    let console = bench.console_oidc(oidc(&bench, &provider, "sub")).await;
    let alice = to_the_provider_and_back(console.addr, "alice").await;
    let refused = finish(console.addr, &alice.callback, &alice.flow).await;
    assert_eq!(refused.status, 502, "{}", refused.body);
    assert!(refused.body.contains("name of a token"), "{}", refused.body);
    console.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_does_not_start_with_a_provider_whose_discovery_names_another_issuer() {
    let Some(modules) = provider_modules() else {
        return;
    };
    let bench = Bench::new().await;
    let dir = bench.path().join("provider");
    let provider = Provider::start(&modules, &dir, &dir.join("keys.json"), None).await;
    let mut config = oidc(&bench, &provider, "email");
    // The same provider by another name: its discovery document names its own.
    config.issuer = config.issuer.replace("127.0.0.1", "localhost");
    let error = bench
        .console_oidc_result(config)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("names the issuer"), "{error}");
    assert!(
        error.starts_with("`console.oidc`: issuer `http://localhost:"),
        "{error}"
    );
}
