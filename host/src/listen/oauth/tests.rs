//! The resource server against a JWKS served here, with ES256 keys made and tokens signed by
//! `ring`: rotated keys are found, made-up key ids cost the issuer one fetch per interval,
//! and the claims are checked as the module says.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::config::ListenOAuthConfig;

/// A P-256 key with its id.
pub(crate) struct Key {
    kid: String,
    pair: EcdsaKeyPair,
}

impl Key {
    pub(crate) fn new(kid: &str) -> Key {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Key {
            kid: kid.to_owned(),
            pair,
        }
    }

    pub(crate) fn jwk(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({
            "kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }

    /// A token of `claims`, naming `kid` (this key's unless given).
    pub(crate) fn sign(&self, claims: &Value, kid: Option<&str>) -> String {
        self.sign_text(&claims.to_string(), kid)
    }

    /// Signs `payload` as written: JSON text that a `Value` cannot hold, such as a name
    /// given twice.
    pub(crate) fn sign_text(&self, payload: &str, kid: Option<&str>) -> String {
        let header = json!({"alg": "ES256", "typ": "at+jwt", "kid": kid.unwrap_or(&self.kid)});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload)
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

/// A JWKS served on a loopback port, counting its fetches.
pub(crate) struct Issuer {
    pub(crate) url: String,
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

impl Issuer {
    pub(crate) async fn start(keys: &[&Key]) -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let jwks = Arc::new(Mutex::new(Value::Null));
        let fetches = Arc::new(AtomicUsize::new(0));
        let issuer = Issuer {
            url,
            jwks: Arc::clone(&jwks),
            fetches: Arc::clone(&fetches),
        };
        issuer.publish(keys);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let jwks = Arc::clone(&jwks);
                let fetches = Arc::clone(&fetches);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    fetches.fetch_add(1, Ordering::SeqCst);
                    let body = jwks.lock().unwrap().to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        issuer
    }

    fn publish(&self, keys: &[&Key]) {
        *self.jwks.lock().unwrap() =
            json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()});
    }

    fn config(&self) -> ListenOAuthConfig {
        ListenOAuthConfig {
            issuer: self.url.clone(),
            resource: String::from("http://127.0.0.1:1/mcp"),
            jwks_uri: Some(format!("{}/jwks", self.url)),
            algorithms: vec![String::from("ES256")],
            principal_claim: String::from("sub"),
            attribute_claims: vec![String::from("groups")],
            scopes_supported: Vec::new(),
            required_scopes: Vec::new(),
            leeway_ms: 0,
            ca_file: None,
            introspection: None,
        }
    }

    fn claims(&self, sub: &str) -> Value {
        let now = crate::oauth::now_secs();
        json!({
            "iss": self.url, "aud": "http://127.0.0.1:1/mcp", "sub": sub,
            "exp": now + 600, "iat": now, "groups": ["platform"], "scope": "mcp:tools",
        })
    }
}

#[tokio::test]
async fn a_rotated_key_is_fetched_and_made_up_key_ids_cost_one_fetch_per_interval() {
    let old = Key::new("old");
    let issuer = Issuer::start(&[&old]).await;
    let server = ResourceServer::start_with(&issuer.config(), Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 1, "fetched at start");
    let alice = server
        .authenticate(&old.sign(&issuer.claims("alice"), None))
        .await
        .unwrap();
    assert_eq!(alice.principal, "alice");
    assert_eq!(
        alice.attributes,
        vec![(String::from("groups"), String::from(r#"["platform"]"#))]
    );
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        1,
        "a known key is cached"
    );

    // A stream of made-up key ids: one fetch once the interval since the last has passed,
    // then none until it passes again.
    tokio::time::sleep(Duration::from_millis(350)).await;
    for n in 0..50 {
        let forged = old.sign(&issuer.claims("mallory"), Some(&format!("made-up-{n}")));
        let refused = server.authenticate(&forged).await.unwrap_err();
        assert!(
            matches!(&refused, Refusal::InvalidToken(reason) if reason.contains("the issuer does not publish")),
            "{refused:?}"
        );
    }
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        2,
        "one fetch for fifty made-up ids"
    );

    // The issuer rotates: the new key is published, and found once the interval has passed.
    let new = Key::new("new");
    issuer.publish(&[&old, &new]);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let bob = server
        .authenticate(&new.sign(&issuer.claims("bob"), None))
        .await
        .unwrap();
    assert_eq!(bob.principal, "bob");
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 3);

    // A key signing under another key's id does not verify.
    let refused = server
        .authenticate(&new.sign(&issuer.claims("mallory"), Some("old")))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Refusal::InvalidToken(reason) if reason.contains("does not verify with the issuer's key `old`")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn claims_of_the_wrong_type_a_missing_principal_and_missing_scopes_are_refused() {
    let key = Key::new("k");
    let issuer = Issuer::start(&[&key]).await;
    let mut config = issuer.config();
    config.required_scopes = vec![String::from("mcp:tools"), String::from("mcp:admin")];
    let server = ResourceServer::start(&config).await.unwrap();
    let mut claims = issuer.claims("alice");
    let scoped = server
        .authenticate(&key.sign(&claims, None))
        .await
        .unwrap_err();
    assert_eq!(
        scoped,
        Refusal::InsufficientScope {
            principal: String::from("alice"),
            missing: vec![String::from("mcp:admin")]
        }
    );
    let challenge = server.challenge(Some(&scoped));
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"mcp:tools mcp:admin\""),
        "{challenge}"
    );

    config.required_scopes.clear();
    let server = ResourceServer::start(&config).await.unwrap();
    for (claim, value, reason) in [
        (
            "exp",
            json!("99999999999"),
            "`exp` claim is missing or of the wrong type",
        ),
        ("nbf", json!("99999999999"), "`nbf` claim"),
        ("iss", json!(["x"]), "iss"),
        ("sub", json!(7), "its `sub` claim (the principal) is not"),
        (
            "aud",
            json!(["http://127.0.0.1:2/mcp"]),
            "it is not for this resource",
        ),
        (
            "nbf",
            json!(crate::oauth::now_secs() + 600),
            "not valid yet",
        ),
    ] {
        let mut wrong = issuer.claims("alice");
        wrong[claim] = value;
        let refused = server
            .authenticate(&key.sign(&wrong, None))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, Refusal::InvalidToken(r) if r.contains(reason)),
            "{claim}: {refused:?}"
        );
    }
    claims.as_object_mut().unwrap().remove("sub");
    let refused = server
        .authenticate(&key.sign(&claims, None))
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        Refusal::InvalidToken(String::from("it has no `sub` claim (the principal)"))
    );
    let long = "x".repeat(MAX_ACCESS_TOKEN_BYTES + 1);
    assert!(matches!(
        server.authenticate(&long).await.unwrap_err(),
        Refusal::InvalidToken(r) if r.contains("longer than the limit")
    ));
}

#[tokio::test]
async fn a_jwks_on_an_internal_address_of_another_host_is_refused_at_start() {
    let issuer = Issuer::start(&[&Key::new("k")]).await;
    let mut config = issuer.config();
    config.jwks_uri = Some(String::from("http://169.254.169.254/jwks"));
    let error = ResourceServer::start(&config).await.unwrap_err();
    assert!(error.to_string().contains("169.254.169.254"), "{error}");
    assert!(error.to_string().contains(&issuer.url), "{error}");
}

/// An issuer behind the TLS fixture: its JWKS (one P-256 key, RFC 7517's example) at `/jwks`.
fn issuer_over_tls(_method: &str, target: &str, _body: &[u8]) -> crate::tls_fixture::Answer {
    if target != "/jwks" {
        return (404, "text/plain", String::new());
    }
    let jwks = json!({"keys": [{
        "kty": "EC", "crv": "P-256", "use": "sig", "kid": "1",
        "x": "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4",
        "y": "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM",
    }]});
    (200, "application/json", jwks.to_string())
}

#[tokio::test]
async fn an_issuer_behind_a_private_ca_is_reached_only_with_the_listeners_ca_file() {
    let fixture = crate::tls_fixture::TlsFixture::start(issuer_over_tls);
    let issuer = format!("https://localhost:{}", fixture.port);
    let config = ListenOAuthConfig {
        issuer: issuer.clone(),
        resource: String::from("https://gateway.example.com/mcp"),
        jwks_uri: Some(format!("{issuer}/jwks")),
        algorithms: vec![String::from("ES256")],
        principal_claim: String::from("sub"),
        attribute_claims: Vec::new(),
        scopes_supported: Vec::new(),
        required_scopes: Vec::new(),
        leeway_ms: 0,
        ca_file: None,
        introspection: None,
    };
    let error = ResourceServer::start(&config)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("certificate"), "{error}");
    assert_eq!(
        fixture.answered.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    let config = ListenOAuthConfig {
        ca_file: Some(fixture.bundle()),
        ..config
    };
    let server = ResourceServer::start(&config).await.unwrap();
    assert_eq!(server.issuer(), issuer);
    assert_eq!(
        fixture.answered.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

/// An introspection endpoint on a loopback port: answers each token as `answers` says (an
/// unknown one `{"active": false}`, `"fail"` with HTTP 500), and records the `Authorization`
/// and body of every request.
struct Introspector {
    url: String,
    answers: Arc<Mutex<std::collections::HashMap<String, Value>>>,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Introspector {
    async fn start() -> Introspector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/introspect", listener.local_addr().unwrap());
        let answers: Arc<Mutex<std::collections::HashMap<String, Value>>> = Arc::default();
        let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let (known, record) = (Arc::clone(&answers), Arc::clone(&seen));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                let (head, body) = loop {
                    let n = stream.read(&mut buffer).await.unwrap_or(0);
                    request.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|line| {
                                line.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|value| value.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if text.len() >= end + 4 + length || n == 0 {
                            break (text[..end].to_owned(), text[end + 4..].to_owned());
                        }
                    } else if n == 0 {
                        break (text, String::new());
                    }
                };
                let authorization = head
                    .lines()
                    .find_map(|line| line.strip_prefix("authorization: "))
                    .unwrap_or_default()
                    .to_owned();
                let token = body
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("token="))
                    .unwrap_or_default()
                    .to_owned();
                record.lock().unwrap().push((authorization, body));
                let answer = known
                    .lock()
                    .unwrap()
                    .get(&token)
                    .cloned()
                    .unwrap_or(json!({"active": false}));
                let (status, text) = if answer == json!("fail") {
                    (500, String::from("{}"))
                } else {
                    (200, answer.to_string())
                };
                let _ = stream
                    .write_all(
                        format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                            text.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        Introspector { url, answers, seen }
    }

    fn answer(&self, token: &str, answer: Value) {
        self.answers
            .lock()
            .unwrap()
            .insert(token.to_owned(), answer);
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

#[tokio::test]
async fn an_opaque_token_is_introspected_checked_like_a_jwt_and_its_answer_cached_until_it_expires()
{
    let key = Key::new("k1");
    let issuer = Issuer::start(&[&key]).await;
    let introspector = Introspector::start().await;
    let config = ListenOAuthConfig {
        introspection: Some(crate::config::IntrospectionConfig {
            endpoint: Some(introspector.url.clone()),
            client_id: String::from("listener"),
            client_secret: String::from("s:cret"),
        }),
        ..issuer.config()
    };
    let server = ResourceServer::start(&config).await.unwrap();
    let resource = "http://127.0.0.1:1/mcp";
    let now = crate::oauth::now_secs();
    let good = json!({
        "active": true, "token_type": "Bearer", "iss": issuer.url, "aud": [resource, "other"],
        "sub": "alice", "groups": ["platform"], "scope": "mcp:tools", "exp": now + 600,
    });
    introspector.answer("opaque-alice", good.clone());
    let authenticated = server.authenticate("opaque-alice").await.unwrap();
    assert_eq!(authenticated.principal, "alice");
    assert_eq!(
        authenticated.attributes,
        [(String::from("groups"), String::from("[\"platform\"]"))]
    );
    // The client authenticates (RFC 6749, section 2.3.1: form-encoded, then Basic) and hints
    // an access token.
    let (authorization, body) = introspector.seen.lock().unwrap()[0].clone();
    assert_eq!(
        authorization,
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("listener:s%3Acret")
        )
    );
    assert_eq!(body, "token=opaque-alice&token_type_hint=access_token");
    // Cached: no second request.
    server.authenticate("opaque-alice").await.unwrap();
    assert_eq!(introspector.requests(), 1);

    // Cached no longer than the token lives: asked again once it expired, and refused.
    let mut expiring = good.clone();
    expiring["exp"] = json!(now + 1);
    introspector.answer("opaque-short", expiring);
    server.authenticate("opaque-short").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let refused = server.authenticate("opaque-short").await.unwrap_err();
    assert_eq!(
        refused,
        Refusal::InvalidToken(String::from("the token expired"))
    );
    assert_eq!(introspector.requests(), 3);

    for (token, change, why) in [
        ("inactive", json!({"active": false}), "not active"),
        (
            "refresh",
            json!({"token_type": "refresh_token"}),
            "not a bearer access token",
        ),
        (
            "elsewhere",
            json!({"aud": "https://other.example/mcp"}),
            "not for this resource",
        ),
        ("no-aud", json!({"aud": null}), "not for this resource"),
        (
            "other-issuer",
            json!({"iss": "https://evil.example"}),
            "its issuer is not",
        ),
        (
            "no-exp",
            json!({"exp": "never"}),
            "`exp` claim is missing or of the wrong type",
        ),
        ("future", json!({"nbf": now + 3600}), "not valid yet"),
        ("no-sub", json!({"sub": null}), "the principal"),
        ("broken", json!("fail"), "could not be asked"),
    ] {
        let answer = if change == json!("fail") {
            change
        } else {
            let mut answer = good.clone();
            for (name, value) in change.as_object().unwrap() {
                if value.is_null() {
                    answer.as_object_mut().unwrap().remove(name);
                } else {
                    answer[name] = value.clone();
                }
            }
            answer
        };
        introspector.answer(token, answer);
        let Err(Refusal::InvalidToken(reason)) = server.authenticate(token).await else {
            panic!("`{token}` was not refused");
        };
        assert!(reason.contains(why), "{token}: {reason}");
        assert!(!reason.contains(token), "{token}: {reason}");
    }
    // A refusal is not cached: the issuer is asked each time.
    let before = introspector.requests();
    let _ = server.authenticate("inactive").await;
    assert_eq!(introspector.requests(), before + 1);
    // A JWT never goes to introspection.
    let jwt = key.sign(&issuer.claims("bob"), None);
    assert_eq!(server.authenticate(&jwt).await.unwrap().principal, "bob");
    assert_eq!(introspector.requests(), before + 1);
}

/// Found by an outside attack: serde_json keeps the last of a name given twice, so
/// `"groups":["dev"],"groups":["platform"]` let a developer through a platform-only policy,
/// and an `iss` array passed the issuer check; a `sub` holding bidi or zero-width characters
/// made a lookalike principal; a token naming the gateway's own principal used the
/// operator's grants. Each is refused now, its reason naming no token.
#[tokio::test]
async fn duplicate_names_an_iss_array_hidden_characters_and_the_gateways_own_principal_are_refused()
{
    let key = Key::new("k");
    let issuer = Issuer::start(&[&key]).await;
    let mut server = ResourceServer::start(&issuer.config()).await.unwrap();
    server.reserve_principal("operator");
    let claims = issuer.claims("bob");
    let refused = |token: String| {
        let server = &server;
        async move {
            match server.authenticate(&token).await {
                Err(Refusal::InvalidToken(reason)) => reason,
                other => panic!("accepted or not invalid: {other:?}"),
            }
        }
    };
    // The same claims, accepted as written once.
    assert_eq!(
        server
            .authenticate(&key.sign(&claims, None))
            .await
            .unwrap()
            .principal,
        "bob"
    );
    let text = claims.to_string();
    let body = text.trim_end_matches('}');
    for duplicated in [
        format!(r#"{body},"groups":["dev"]}}"#),
        format!(r#"{body},"gr\u006fups":["dev"]}}"#),
        format!(r#"{body},"nested":{{"a":1,"a":2}}}}"#),
    ] {
        let reason = refused(key.sign_text(&duplicated, None)).await;
        assert!(reason.contains("each name once"), "{duplicated}: {reason}");
    }
    // A registered claim given twice was refused before (the validation reads it into a
    // struct); it stays refused.
    refused(key.sign_text(&format!(r#"{body},"sub":"alice"}}"#), None)).await;
    let mut iss_array = claims.clone();
    iss_array["iss"] = json!([issuer.url]);
    assert_eq!(
        refused(key.sign(&iss_array, None)).await,
        "its `iss` claim is not a string"
    );
    for hidden in ["alice\u{200b}", "admin\u{202e}txt", "evil\u{2028}ls"] {
        let reason = refused(key.sign(&issuer.claims(hidden), None)).await;
        assert!(reason.contains("hidden character"), "{reason}");
    }
    let reason = refused(key.sign(&issuer.claims("operator"), None)).await;
    assert!(reason.contains("the gateway's own principal"), "{reason}");
}
