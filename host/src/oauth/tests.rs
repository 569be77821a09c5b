use std::os::unix::fs::PermissionsExt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use reqwest::Url;
use reqwest::dns::{Name, Resolve};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::discovery::{self, ServerMetadata, parse_bearer};
use super::login::{self, Identity, IssuerCheck, Redirect, read_redirect, state_matches};

use super::origin::{GuardedResolver, Origins};
use super::store::{ClientAuth, GRANTS_DIR, KEY_FILE};
use super::*;
use crate::state_dir::StateDir;

mod device;

/// An authorization server whose responses carry no `iss`.
const NO_ISS: IssuerCheck<'static> = IssuerCheck {
    issuer: "https://auth.example.com",
    required: false,
};

fn grant(server: &str) -> Grant {
    Grant {
        server: server.to_owned(),
        principal: None,
        resource: String::from("https://mcp.example.com/mcp"),
        issuer: String::from("https://auth.example.com/"),
        token_endpoint: String::from("https://auth.example.com/token"),
        revocation_endpoint: Some(String::from("https://auth.example.com/revoke")),
        client_id: String::from("client-123"),
        client_secret: Some(String::from("client-secret-SECRETSECRET")),
        client_auth: ClientAuth::SecretPost,
        kind: GrantKind::AuthorizationCode,
        access_token: String::from("access-token-TOPSECRET-0123456789"),
        refresh_token: Some(String::from("refresh-token-TOPSECRET-9876543210")),
        expires_at: Some(now_secs() + 3600),
        scopes: vec![String::from("mcp:tools")],
        obtained_at: now_secs(),
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn a_grant_survives_the_encryption_round_trip_and_its_file_holds_no_secret_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(&dir.path().join("state")).unwrap();
    let store = StateDirGrants::open(state.path()).unwrap();
    assert_eq!(store.read("remote", None).unwrap(), None);
    let written = grant("remote");
    store.write(&written).unwrap();
    assert_eq!(store.read("remote", None).unwrap(), Some(written.clone()));
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].server.as_str(), listed[0].principal.as_deref()),
        ("remote", None)
    );

    let file = dir
        .path()
        .join("state")
        .join(GRANTS_DIR)
        .join("remote.grant");
    let bytes = std::fs::read(&file).unwrap();
    for secret in [
        "access-token-TOPSECRET",
        "refresh-token-TOPSECRET",
        "client-secret-SECRETSECRET",
        "client-123",
    ] {
        assert!(
            !contains(&bytes, secret),
            "`{secret}` is in clear in the grant file"
        );
    }
    let key = dir.path().join("state").join(KEY_FILE);
    for path in [&file, &key] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    // Debug output leaves the secrets out too.
    let debug = format!("{written:?}");
    assert!(
        !debug.contains("TOPSECRET") && !debug.contains("SECRETSECRET"),
        "{debug}"
    );
}

#[test]
fn a_tampered_grant_file_a_file_moved_to_another_server_and_a_replaced_key_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state");
    let state = StateDir::open(&state_path).unwrap();
    let store = StateDirGrants::open(state.path()).unwrap();
    store.write(&grant("remote")).unwrap();
    let file = state_path.join(GRANTS_DIR).join("remote.grant");
    let original = std::fs::read(&file).unwrap();

    // One bit flipped in the sealed part.
    let mut flipped = original.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    std::fs::write(&file, &flipped).unwrap();
    let error = store.read("remote", None).unwrap_err();
    assert!(matches!(error, OAuthError::Tampered { .. }), "{error}");
    assert!(error.to_string().contains("server `remote`"), "{error}");
    assert!(
        error.to_string().contains("toolward auth logout remote"),
        "{error}"
    );

    // The same file under another server's name: the server's name is associated data.
    std::fs::write(&file, &original).unwrap();
    let other = state_path.join(GRANTS_DIR).join("other.grant");
    std::fs::write(&other, &original).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(matches!(
        store.read("other", None),
        Err(OAuthError::Tampered { .. })
    ));
    assert!(store.read("remote", None).unwrap().is_some());

    // A new key file: nothing written under the old one opens.
    std::fs::remove_file(state_path.join(KEY_FILE)).unwrap();
    let store = StateDirGrants::open(state.path()).unwrap();
    assert!(matches!(
        store.read("remote", None),
        Err(OAuthError::Tampered { .. })
    ));

    // A file others may read is refused before it is decrypted.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        store.read("remote", None),
        Err(OAuthError::Store { .. })
    ));
}

#[test]
fn the_confinement_withholds_the_key_file_and_the_grant_files_from_every_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::config::Config::from_value(
        json!({
            "mcpServers": {
                "fs": { "command": "node" },
                "remote": { "url": "https://mcp.example.com/mcp" },
            },
            "rules": { "file": "rules.json" },
        }),
        dir.path(),
    )
    .unwrap();
    let state = StateDir::open(&config.state_dir).unwrap();
    let store = StateDirGrants::open(state.path()).unwrap();
    store.write(&grant("remote")).unwrap();
    let denied = crate::confine::default_denied(&config);
    for secret in [config.state_dir.join(KEY_FILE), store.file("remote", None)] {
        assert!(secret.exists(), "{}", secret.display());
        assert!(
            denied.iter().any(|path| secret.starts_with(path)),
            "`{}` is not under a withheld path of {denied:?}",
            secret.display()
        );
    }
}

#[test]
fn a_redirect_is_accepted_only_with_this_sign_ins_state_on_the_redirect_path() {
    let state = "Zk3s9QbW1xPq";
    assert_eq!(
        read_redirect("/callback?code=abc&state=Zk3s9QbW1xPq", state, &NO_ISS),
        Redirect::Code(String::from("abc"))
    );
    assert!(matches!(
        read_redirect("/callback?code=abc&state=Zk3s9QbW1xPr", state, &NO_ISS),
        Redirect::Ignored(_)
    ));
    assert!(matches!(
        read_redirect("/callback?code=abc", state, &NO_ISS),
        Redirect::Ignored(_)
    ));
    assert!(matches!(
        read_redirect("/callback?code=abc&state=", state, &NO_ISS),
        Redirect::Ignored(_)
    ));
    assert!(matches!(
        read_redirect(
            "/callback?code=abc&code=evil&state=Zk3s9QbW1xPq",
            state,
            &NO_ISS
        ),
        Redirect::Ignored(_)
    ));
    assert!(matches!(
        read_redirect(
            "/callback?code=abc&state=Zk3s9QbW1xPq&state=Zk3s9QbW1xPq",
            state,
            &NO_ISS
        ),
        Redirect::Ignored(_)
    ));
    assert!(matches!(
        read_redirect("/other?code=abc&state=Zk3s9QbW1xPq", state, &NO_ISS),
        Redirect::Ignored(_)
    ));
    assert!(matches!(
        read_redirect("/callback?state=Zk3s9QbW1xPq", state, &NO_ISS),
        Redirect::Ignored(_)
    ));
    let Redirect::Error(error) = read_redirect(
        "/callback?error=access_denied&error_description=no%0Athanks&state=Zk3s9QbW1xPq",
        state,
        &NO_ISS,
    ) else {
        panic!("an error with the right state ends the sign-in");
    };
    assert!(
        error.contains("access_denied") && !error.contains('\n'),
        "{error}"
    );
    assert!(state_matches("abc", "abc"));
    assert!(!state_matches("abc", "abd"));
    assert!(!state_matches("abc", "abcd"));
    assert!(!state_matches("abc", ""));
}

/// A mix-up found by an outside attack: a hostile server named itself the authorization
/// server and passed the browser on to an honest one, whose code came back to toolward's
/// listener with toolward's own `state`. RFC 9207's `iss` tells the two apart.
#[test]
fn a_redirect_naming_another_issuer_or_lacking_a_promised_iss_ends_the_sign_in() {
    let state = "Zk3s9QbW1xPq";
    let hostile = IssuerCheck {
        issuer: "http://127.0.0.1:8601",
        required: false,
    };
    let Redirect::Error(error) = read_redirect(
        "/callback?code=abc&state=Zk3s9QbW1xPq&iss=http%3A%2F%2Flocalhost%3A3001%2F",
        state,
        &hostile,
    ) else {
        panic!("a code from another issuer is not used");
    };
    assert!(
        error.contains("mix-up") && error.contains("localhost:3001"),
        "{error}"
    );
    assert_eq!(
        read_redirect(
            "/callback?code=abc&state=Zk3s9QbW1xPq&iss=http%3A%2F%2F127.0.0.1%3A8601",
            state,
            &hostile
        ),
        Redirect::Code(String::from("abc"))
    );
    let promised = IssuerCheck {
        issuer: "https://auth.example.com",
        required: true,
    };
    let Redirect::Error(error) =
        read_redirect("/callback?code=abc&state=Zk3s9QbW1xPq", state, &promised)
    else {
        panic!("a response without the `iss` its issuer promised is not used");
    };
    assert!(error.contains("without `iss`"), "{error}");
    // The state is checked first: a stranger's request naming any issuer changes nothing.
    assert!(matches!(
        read_redirect("/callback?code=abc&iss=x&state=wrong", state, &promised),
        Redirect::Ignored(_)
    ));
}

#[test]
fn the_authorization_request_carries_pkce_s256_a_fresh_state_and_the_resource() {
    let http = OAuthHttp::new("remote", "https://mcp.example.com/mcp", None).unwrap();
    let identity = Identity {
        id: String::from("client-123"),
        secret: None,
        auth: ClientAuth::None,
    };
    let client = login::client(
        &http,
        &identity,
        "https://auth.example.com/token",
        Some("https://auth.example.com/authorize"),
        None,
    )
    .unwrap()
    .set_redirect_uri(
        oauth2::RedirectUrl::new(String::from("http://127.0.0.1:4444/callback")).unwrap(),
    );
    let scopes = [String::from("mcp:tools")];
    let (url, state, verifier) =
        login::authorization_request("remote", &client, &scopes, "https://mcp.example.com/mcp")
            .unwrap();
    let params: std::collections::BTreeMap<String, String> =
        url.query_pairs().into_owned().collect();
    assert_eq!(params["response_type"], "code");
    assert_eq!(params["client_id"], "client-123");
    assert_eq!(params["redirect_uri"], "http://127.0.0.1:4444/callback");
    assert_eq!(params["scope"], "mcp:tools");
    assert_eq!(params["resource"], "https://mcp.example.com/mcp");
    assert_eq!(params["code_challenge_method"], "S256");
    assert_eq!(&params["state"], state.secret());
    assert!(
        state.secret().len() >= 16,
        "a state of {} characters",
        state.secret().len()
    );
    // RFC 7636, section 4.2: BASE64URL(SHA256(verifier)), no padding.
    let expected = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.secret().as_bytes()));
    assert_eq!(params["code_challenge"], expected);
    assert!((43..=128).contains(&verifier.secret().len()));

    let (again, state_again, verifier_again) =
        login::authorization_request("remote", &client, &scopes, "https://mcp.example.com/mcp")
            .unwrap();
    assert_ne!(state.secret(), state_again.secret());
    assert_ne!(verifier.secret(), verifier_again.secret());
    assert_ne!(url, again);
}

fn refused(origins: &Origins, url: &str) -> String {
    match origins.check("a metadata URL", &Url::parse(url).unwrap()) {
        Err(error @ OAuthError::Refused { .. }) => error.to_string(),
        other => panic!("`{url}` was not refused: {other:?}"),
    }
}

#[test]
fn metadata_pointing_a_remote_server_at_an_internal_address_is_refused() {
    let origins = Origins::for_server("remote", "https://mcp.example.com/mcp").unwrap();
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "https://169.254.169.254/",
        "https://10.0.0.5/token",
        "https://172.16.3.4/token",
        "https://192.168.1.1/token",
        "https://100.64.0.1/token",
        "https://0.0.0.0/token",
        "https://[fd00::1]/token",
        "https://[fe80::1]/token",
        "https://[::ffff:192.168.1.1]/token",
        "https://[::ffff:169.254.169.254]/token",
        "https://[64:ff9b::a9fe:a9fe]/token",
        // Found by an outside attack: the local-use NAT64 prefix, 6to4 and the deprecated
        // IPv4-compatible form, each holding 169.254.169.254.
        "https://[64:ff9b:1::a9fe:a9fe]/token",
        "https://[2002:a9fe:a9fe::1]/token",
        "https://[::a9fe:a9fe]/token",
        "https://[::10.0.0.1]/token",
    ] {
        let error = refused(&origins, url);
        assert!(error.contains("internal address"), "{url}: {error}");
        assert!(error.contains("server `remote`"), "{error}");
    }
    for url in [
        "http://127.0.0.1:8080/token",
        "http://localhost/token",
        "https://[::1]/token",
    ] {
        let error = refused(&origins, url);
        assert!(error.contains("loopback"), "{url}: {error}");
    }
    assert!(refused(&origins, "http://auth.example.com/token").contains("only `https://`"));
    assert!(refused(&origins, "https://user:pw@auth.example.com/token").contains("user name"));
    assert!(refused(&origins, "ftp://auth.example.com/token").contains("scheme"));
    for public in [
        "https://[2002:808:808::1]/token",
        "https://[64:ff9b::808:808]/token",
    ] {
        origins
            .check("the token endpoint", &Url::parse(public).unwrap())
            .unwrap_or_else(|error| panic!("`{public}` holds a public address: {error}"));
    }
    origins
        .check(
            "the token endpoint",
            &Url::parse("https://auth.example.com/token").unwrap(),
        )
        .unwrap();
    origins
        .check(
            "the token endpoint",
            &Url::parse("https://8.8.8.8/token").unwrap(),
        )
        .unwrap();
}

#[test]
fn a_server_on_an_internal_address_may_use_its_own_host_and_no_other() {
    let origins = Origins::for_server("lan", "https://10.1.2.3/mcp").unwrap();
    origins
        .check(
            "the token endpoint",
            &Url::parse("https://10.1.2.3:8443/token").unwrap(),
        )
        .unwrap();
    assert!(refused(&origins, "https://10.9.9.9/token").contains("internal address"));
    assert!(refused(&origins, "https://169.254.169.254/").contains("internal address"));

    let local = Origins::for_server("local", "http://localhost:3000/mcp").unwrap();
    for url in [
        "http://localhost:3001/",
        "http://127.0.0.1:3001/token",
        "http://[::1]:3001/",
    ] {
        local
            .check("the issuer", &Url::parse(url).unwrap())
            .unwrap();
    }
    assert!(refused(&local, "http://192.168.1.5/token").contains("internal address"));
    assert!(refused(&local, "http://169.254.169.254/").contains("internal address"));
    assert!(refused(&local, "http://auth.example.com/").contains("only `https://`"));
}

#[test]
fn authorization_server_metadata_naming_an_internal_endpoint_is_refused() {
    let http = OAuthHttp::new("remote", "https://mcp.example.com/mcp", None).unwrap();
    let metadata: ServerMetadata = serde_json::from_value(json!({
        "issuer": "https://auth.example.com/",
        "authorization_endpoint": "https://auth.example.com/authorize",
        "token_endpoint": "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "code_challenge_methods_supported": ["S256"],
    }))
    .unwrap();
    let error = discovery::check_endpoints(&http, &metadata).unwrap_err();
    assert!(matches!(error, OAuthError::Refused { .. }), "{error}");
    assert!(error.to_string().contains("the token endpoint"), "{error}");

    let metadata: ServerMetadata = serde_json::from_value(json!({
        "issuer": "https://auth.example.com/",
        "token_endpoint": "https://auth.example.com/token",
        "registration_endpoint": "https://192.168.0.10/register",
    }))
    .unwrap();
    let error = discovery::check_endpoints(&http, &metadata).unwrap_err();
    assert!(
        error.to_string().contains("the registration endpoint"),
        "{error}"
    );
}

#[tokio::test]
async fn a_host_name_that_resolves_to_an_internal_address_is_refused_at_connection() {
    let origins = Arc::new(Origins::for_server("remote", "https://mcp.example.com/mcp").unwrap());
    let resolver = GuardedResolver::new(origins);
    let resolved = resolver.resolve(Name::from_str("localhost").unwrap()).await;
    let error = resolved
        .err()
        .expect("`localhost` resolves to loopback")
        .to_string();
    assert!(error.contains("internal address"), "{error}");

    let local = Arc::new(Origins::for_server("local", "http://localhost:3000/mcp").unwrap());
    let resolver = GuardedResolver::new(local);
    assert!(
        resolver
            .resolve(Name::from_str("localhost").unwrap())
            .await
            .is_ok()
    );
}

#[test]
fn a_bearer_challenge_gives_its_resource_metadata_scope_and_error() {
    let challenge = parse_bearer(
        r#"Bearer error="invalid_token", error_description="The access token expired", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="files:read files:write""#,
    )
    .unwrap();
    assert_eq!(
        challenge.resource_metadata.as_deref(),
        Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
    );
    assert_eq!(challenge.scope.as_deref(), Some("files:read files:write"));
    assert_eq!(challenge.error.as_deref(), Some("invalid_token"));
    let unquoted = parse_bearer("bearer resource_metadata=https://x.example/m, scope=a").unwrap();
    assert_eq!(
        unquoted.resource_metadata.as_deref(),
        Some("https://x.example/m")
    );
    assert_eq!(unquoted.scope.as_deref(), Some("a"));
    assert_eq!(parse_bearer(r#"Basic realm="x""#), None);
    assert_eq!(
        parse_bearer("Bearer"),
        Some(discovery::Challenge::default())
    );
}

#[test]
fn metadata_is_looked_for_at_the_well_known_uris_in_the_specifications_order() {
    let resource = Url::parse("https://mcp.example.com/public/mcp").unwrap();
    let urls: Vec<String> = discovery::resource_metadata_urls(&resource, None)
        .iter()
        .map(Url::to_string)
        .collect();
    assert_eq!(
        urls,
        [
            "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
            "https://mcp.example.com/.well-known/oauth-protected-resource",
        ]
    );
    let challenge = parse_bearer(r#"Bearer resource_metadata="https://mcp.example.com/prm""#);
    let urls = discovery::resource_metadata_urls(&resource, challenge.as_ref());
    assert_eq!(urls, [Url::parse("https://mcp.example.com/prm").unwrap()]);

    let issuer = Url::parse("https://auth.example.com/tenant1").unwrap();
    let urls: Vec<String> = discovery::server_metadata_urls(&issuer)
        .iter()
        .map(Url::to_string)
        .collect();
    assert_eq!(
        urls,
        [
            "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
            "https://auth.example.com/.well-known/openid-configuration/tenant1",
            "https://auth.example.com/tenant1/.well-known/openid-configuration",
        ]
    );
    let issuer = Url::parse("https://auth.example.com/").unwrap();
    let urls: Vec<String> = discovery::server_metadata_urls(&issuer)
        .iter()
        .map(Url::to_string)
        .collect();
    assert_eq!(
        urls,
        [
            "https://auth.example.com/.well-known/oauth-authorization-server",
            "https://auth.example.com/.well-known/openid-configuration",
        ]
    );
}

#[test]
fn a_grant_close_to_its_expiry_is_due_for_renewal() {
    let mut grant = grant("remote");
    assert!(!grant.expires_within(REFRESH_BEFORE_EXPIRY));
    grant.expires_at = Some(now_secs() + 30);
    assert!(grant.expires_within(REFRESH_BEFORE_EXPIRY));
    grant.expires_at = None;
    assert!(!grant.expires_within(REFRESH_BEFORE_EXPIRY));
    let value = grant.authorization("remote").unwrap();
    assert!(value.is_sensitive());
}

/// Found by an outside attack: the listener read one connection at a time, so one that
/// sent nothing held up the browser's redirect for 10 s (and longer with more of them). The
/// sign-in waits 3 s here, less than a connection is given to send its request head: the
/// redirect must get through beside two silent connections.
#[tokio::test]
async fn a_silent_connection_does_not_hold_up_the_browsers_redirect() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = login::RedirectListener::bind("remote", 0).await.unwrap();
    let address = listener
        .uri()
        .trim_start_matches("http://")
        .trim_end_matches(login::REDIRECT_PATH)
        .to_owned();
    let _silent_1 = tokio::net::TcpStream::connect(&address).await.unwrap();
    let _silent_2 = tokio::net::TcpStream::connect(&address).await.unwrap();
    let browser = tokio::spawn({
        let address = address.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            stream
                .write_all(b"GET /callback?code=abc&state=Zk3s9QbW1xPq HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut page = String::new();
            stream.read_to_string(&mut page).await.unwrap();
            page
        }
    });
    let (code, mut stream) = listener
        .wait("remote", "Zk3s9QbW1xPq", &NO_ISS, Duration::from_secs(3))
        .await
        .expect("the redirect gets through beside silent connections");
    assert_eq!(code, "abc");
    // The browser hears how sign-in ended only after the exchange.
    login::answer_browser(&mut stream, "remote", Ok(())).await;
    let page = browser.await.unwrap();
    assert!(page.contains("signed in to server `remote`"), "{page}");
}

fn principal_grant(server: &str, principal: &str) -> Grant {
    Grant {
        principal: Some(principal.to_owned()),
        access_token: format!("access-token-of-{principal}-TOPSECRET"),
        ..grant(server)
    }
}

#[test]
fn each_principal_has_a_grant_of_its_own_beside_the_operators_and_listing_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state");
    let store = StateDirGrants::open(&state_path).unwrap();
    // A name no file system takes as it is: the file is named by its SHA-256.
    let odd = "bob/../ 'the builder'";
    store.write(&grant("remote")).unwrap();
    store.write(&principal_grant("remote", "alice")).unwrap();
    store.write(&principal_grant("remote", odd)).unwrap();

    assert_eq!(
        store
            .read("remote", Some("alice"))
            .unwrap()
            .unwrap()
            .access_token,
        "access-token-of-alice-TOPSECRET"
    );
    assert_eq!(
        store.read("remote", None).unwrap().unwrap().access_token,
        grant("remote").access_token
    );
    assert_eq!(store.read("remote", Some("carol")).unwrap(), None);
    let file = store.file("remote", Some(odd));
    assert!(file.starts_with(state_path.join(GRANTS_DIR).join("remote.principals")));
    assert_eq!(
        file.file_name().unwrap().to_str().unwrap(),
        format!("{}.grant", store::principal_file_stem(odd))
    );
    assert!(!contains(&std::fs::read(&file).unwrap(), "TOPSECRET"));

    let listed: Vec<(String, Option<String>)> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|entry| {
            assert!(entry.grant.is_ok(), "{:?}", entry.grant);
            (entry.server, entry.principal)
        })
        .collect();
    assert_eq!(
        listed,
        [
            (String::from("remote"), None),
            (String::from("remote"), Some(odd.to_owned())),
            (String::from("remote"), Some(String::from("alice"))),
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );

    assert!(store.remove("remote", Some("alice")).unwrap());
    assert!(!store.remove("remote", Some("alice")).unwrap());
    assert_eq!(store.read("remote", Some("alice")).unwrap(), None);
    assert!(store.read("remote", None).unwrap().is_some());
}

#[test]
fn a_principals_grant_moved_to_another_principal_or_to_the_operators_place_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state");
    let store = StateDirGrants::open(&state_path).unwrap();
    store.write(&principal_grant("remote", "alice")).unwrap();
    store.write(&principal_grant("remote", "bob")).unwrap();
    let alice = store.file("remote", Some("alice"));
    let bob = store.file("remote", Some("bob"));

    // Alice's file in Bob's place: Bob would call as Alice.
    std::fs::copy(&alice, &bob).unwrap();
    let error = store.read("remote", Some("bob")).unwrap_err();
    assert!(matches!(error, OAuthError::Tampered { .. }), "{error}");
    let text = error.to_string();
    assert!(text.contains("for principal `bob`"), "{text}");
    assert!(
        text.contains("toolward auth logout remote --principal bob"),
        "{text}"
    );
    // Listed as unusable, under no principal's name.
    let listed = store.list().unwrap();
    assert_eq!(
        listed.iter().filter(|entry| entry.grant.is_err()).count(),
        1
    );

    // Alice's file as the operator's: every call of the load would go out as Alice.
    let operator = store.file("remote", None);
    std::fs::copy(&alice, &operator).unwrap();
    assert!(matches!(
        store.read("remote", None),
        Err(OAuthError::Tampered { .. })
    ));
    // And the operator's as a principal's.
    store.write(&grant("remote")).unwrap();
    std::fs::copy(&operator, &alice).unwrap();
    assert!(matches!(
        store.read("remote", Some("alice")),
        Err(OAuthError::Tampered { .. })
    ));
}

#[test]
fn a_sealed_grant_opens_only_under_its_key_as_its_server_and_principal() {
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let cipher = store::GrantCipher::from_hex(key).unwrap();
    let sealed = cipher.seal(&principal_grant("remote", "alice")).unwrap();
    assert!(!contains(&sealed, "TOPSECRET"));
    assert_eq!(
        cipher
            .open("remote", Some("alice"), &sealed, "row")
            .unwrap()
            .access_token,
        "access-token-of-alice-TOPSECRET"
    );
    for (server, principal) in [
        ("remote", Some("bob")),
        ("remote", None),
        ("other", Some("alice")),
    ] {
        assert!(
            matches!(
                cipher.open(server, principal, &sealed, "row"),
                Err(OAuthError::Tampered { .. })
            ),
            "{server} {principal:?}"
        );
    }
    let other = store::GrantCipher::from_hex(&key.replace('0', "1")).unwrap();
    assert!(other.open("remote", Some("alice"), &sealed, "row").is_err());
    // A key that is not 32 bytes in hex is refused without being quoted.
    let error = store::GrantCipher::from_hex("c0ffee")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("32 bytes in hex") && !error.contains("c0ffee"),
        "{error}"
    );
}

#[test]
fn the_commands_messages_name_quote_a_principal_for_the_shell() {
    use crate::text::{login_command, logout_command, shell_word};
    assert_eq!(
        login_command("remote", None, &[]),
        "toolward auth login remote"
    );
    assert_eq!(
        login_command("remote", Some("alice@example.com"), &[]),
        "toolward auth login remote --principal alice@example.com"
    );
    assert_eq!(
        login_command(
            "remote",
            Some("O'Brien; rm -rf ~"),
            &[String::from("files:write"), String::from("mcp:tools")]
        ),
        "toolward auth login remote --principal 'O'\\''Brien; rm -rf ~' --scope 'files:write mcp:tools'"
    );
    assert_eq!(
        logout_command("remote", Some("bob")),
        "toolward auth logout remote --principal bob"
    );
    // A control character or a backtick never reaches a message as it is, and the shell
    // still reads the name exactly.
    assert_eq!(shell_word("a\u{1b}[2Kb"), "$'a\\x1b[2Kb'");
    assert_eq!(shell_word("a`b"), "$'a\\x60b'");
    assert!(!shell_word("a`b").contains('`'));
    assert_eq!(shell_word(""), "''");
}

/// The fixture's answer to any request: an empty JSON object.
fn json_ok(_method: &str, _target: &str, _body: &[u8]) -> crate::tls_fixture::Answer {
    (200, "application/json", String::from("{}"))
}

#[tokio::test]
async fn an_authorization_server_behind_a_private_ca_is_reached_only_with_its_ca_file() {
    let fixture = crate::tls_fixture::TlsFixture::start(json_ok);
    let resource = format!("https://localhost:{}/mcp", fixture.port);
    let metadata = Url::parse(&format!(
        "https://localhost:{}/.well-known/oauth-authorization-server",
        fixture.port
    ))
    .unwrap();
    let fetch = |http: OAuthHttp| {
        let metadata = metadata.clone();
        async move {
            let request = http.get("the metadata", &metadata)?.build().unwrap();
            http.send("the metadata", request).await
        }
    };

    let without = OAuthHttp::new("remote", &resource, None).unwrap();
    let error = fetch(without).await.unwrap_err().to_string();
    assert!(error.contains("certificate"), "{error}");
    assert_eq!(
        fixture.answered.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    let with = OAuthHttp::new("remote", &resource, Some(&fixture.bundle())).unwrap();
    let (status, _, body) = fetch(with).await.unwrap();
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(body, b"{}");
    assert_eq!(
        fixture.answered.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[test]
fn the_client_identity_is_the_configured_id_else_the_metadata_document_where_supported_else_registration()
 {
    use login::{ClientIdentity, client_identity};
    let document = "https://toolward.example.com/oauth/client.json";
    let metadata = |supported: Value| -> ServerMetadata {
        serde_json::from_value(json!({
            "issuer": "https://auth.example.com",
            "token_endpoint": "https://auth.example.com/token",
            "client_id_metadata_document_supported": supported,
        }))
        .unwrap()
    };
    let with_document = OAuthConfig {
        client_id_metadata_url: Some(document.to_owned()),
        ..OAuthConfig::default()
    };
    // Supported: the URL is the client id, a public client; nothing is registered.
    assert_eq!(
        client_identity(&with_document, &metadata(json!(true))),
        ClientIdentity::Known(Identity {
            id: document.to_owned(),
            secret: None,
            auth: ClientAuth::None,
        })
    );
    // Not said, said false, or said as something other than `true`: registration, as
    // without the setting.
    for supported in [Value::Null, json!(false), json!("true"), json!(1)] {
        assert_eq!(
            client_identity(&with_document, &metadata(supported.clone())),
            ClientIdentity::Register,
            "{supported}"
        );
    }
    assert_eq!(
        client_identity(&OAuthConfig::default(), &metadata(json!(true))),
        ClientIdentity::Register
    );
    // A configured client id comes first (the specification's order).
    let both = OAuthConfig {
        client_id: Some(String::from("issued-1")),
        ..with_document
    };
    let ClientIdentity::Known(identity) = client_identity(&both, &metadata(json!(true))) else {
        panic!("the configured client is used");
    };
    assert_eq!(identity.id, "issued-1");
}
