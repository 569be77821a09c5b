//! The ID token's checks and the claims taken from it, with tokens signed here by a P-256 key
//! the listener's tests make, its JWKS served on a loopback port (the listener's test issuer).

use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::listen::oauth::tests::{Issuer, Key};

const CLIENT: &str = "toolward-console";
const NONCE: &str = "the-flows-nonce";

async fn keys(issuer: &Issuer) -> IssuerKeys {
    crate::listen::oauth::install_verifier();
    let http = OAuthHttp::new("console.oidc", &issuer.url, None).unwrap();
    IssuerKeys::fetch(
        "console.oidc",
        &issuer.url,
        http,
        Url::parse(&format!("{}/jwks", issuer.url)).unwrap(),
        vec![jsonwebtoken::Algorithm::ES256],
        Duration::from_secs(30),
    )
    .await
    .unwrap()
}

fn claims(issuer: &Issuer) -> Value {
    let now = crate::oauth::now_secs();
    json!({
        "iss": issuer.url, "aud": CLIENT, "sub": "248289761001", "exp": now + 600, "iat": now,
        "nonce": NONCE, "email": "alice@example.test", "email_verified": true,
        "groups": ["platform", "ops"],
    })
}

/// `claims` with `changes` laid over it (a `null` removes the claim).
fn with(mut claims: Value, changes: Value) -> Value {
    for (name, value) in changes.as_object().unwrap() {
        if value.is_null() {
            claims.as_object_mut().unwrap().remove(name);
        } else {
            claims[name] = value.clone();
        }
    }
    claims
}

#[tokio::test]
async fn an_id_token_passes_only_for_this_client_this_flows_nonce_and_a_sane_time() {
    let key = Key::new("k1");
    let issuer = Issuer::start(&[&key]).await;
    let keys = keys(&issuer).await;
    let good = claims(&issuer);
    let check = |claims: Value| {
        let token = key.sign(&claims, None);
        let keys = &keys;
        async move { check_id_token(keys, &token, CLIENT, NONCE).await }
    };
    let passed = check(good.clone()).await.unwrap();
    assert_eq!(passed["sub"], "248289761001");

    let now = crate::oauth::now_secs();
    let refused = [
        (json!({"aud": "another-client"}), "not for this console's client id"),
        (json!({"nonce": "another-flows-nonce"}), "`nonce` is not the one"),
        (json!({"nonce": null}), "has no `nonce`"),
        (json!({"iss": "http://127.0.0.1:1"}), "issuer"),
        (json!({"exp": now - 120}), "expired"),
        (json!({"iat": null}), "`iat`"),
        (json!({"iat": "now"}), "`iat`"),
        (json!({"iat": now + 600}), "in the future"),
        (json!({"iat": now - 3600}), "a replayed token"),
        (json!({"aud": [CLIENT, "another-client"]}), "several audiences and no `azp`"),
        (json!({"azp": "another-client"}), "issued to another client"),
        (json!({"sub": null}), "`sub`"),
    ];
    for (changes, reason) in refused {
        let error = check(with(good.clone(), changes.clone())).await.unwrap_err();
        assert!(error.contains(reason), "{changes}: {error}");
    }
    // Several audiences pass when `azp` says it was issued to this client.
    let shared = with(good.clone(), json!({"aud": [CLIENT, "another-client"], "azp": CLIENT}));
    assert!(check(shared).await.is_ok());
    // Signed by a key the provider does not publish.
    let stranger = Key::new("k1");
    let forged = stranger.sign(&good, None);
    let error = check_id_token(&keys, &forged, CLIENT, NONCE).await.unwrap_err();
    assert!(error.contains("signature"), "{error}");
}

#[test]
fn the_user_is_the_user_claim_and_the_groups_are_strings_within_the_limits() {
    let base = json!({
        "sub": "248289761001", "email": "alice@example.test", "email_verified": true,
        "preferred_username": "alice", "groups": ["platform", 7, "", "ops", "platform", "x".repeat(MAX_GROUP_CHARS + 1), "bidi\u{202e}"],
    });
    let claims = |value: &Value| value.as_object().unwrap().clone();
    let signed = user_of(&claims(&base), "email", "groups", &[]).unwrap();
    assert_eq!(signed.user, "alice@example.test");
    assert_eq!(signed.groups, ["platform", "ops"]);
    assert_eq!(signed.left_out.len(), 4, "{:?}", signed.left_out);
    assert_eq!(user_of(&claims(&base), "sub", "groups", &[]).unwrap().user, "248289761001");
    // One string is one group; another type, none.
    let one = with(base.clone(), json!({"groups": "platform"}));
    assert_eq!(user_of(&claims(&one), "sub", "groups", &[]).unwrap().groups, ["platform"]);
    let odd = with(base.clone(), json!({"groups": {"a": 1}}));
    let signed = user_of(&claims(&odd), "sub", "groups", &[]).unwrap();
    assert!(signed.groups.is_empty());
    assert_eq!(signed.left_out.len(), 1);
    // At most MAX_GROUPS.
    let many: Vec<String> = (0..MAX_GROUPS + 5).map(|i| format!("g{i}")).collect();
    let lots = with(base.clone(), json!({"groups": many}));
    let signed = user_of(&claims(&lots), "sub", "groups", &[]).unwrap();
    assert_eq!(signed.groups.len(), MAX_GROUPS);
    assert_eq!(signed.left_out.len(), 5);

    let refused = [
        (with(base.clone(), json!({"email_verified": false})), "email", "not verified"),
        (with(base.clone(), json!({"preferred_username": "ops\u{200b}"})), "preferred_username", "printable"),
        (with(base.clone(), json!({"preferred_username": ""})), "preferred_username", "printable"),
        // Names that show as another's in the audit (an outside attack's, 7 December 2026).
        (with(base.clone(), json!({"preferred_username": "eve\u{00a0}"})), "preferred_username", "printable"),
        (with(base.clone(), json!({"preferred_username": "eve "})), "preferred_username", "printable"),
        (with(base.clone(), json!({"preferred_username": " eve"})), "preferred_username", "printable"),
        (with(base.clone(), json!({"preferred_username": "eve\u{3000}"})), "preferred_username", "printable"),
        (with(base.clone(), json!({"preferred_username": "eve\u{0332}"})), "preferred_username", "printable"),
        (with(base.clone(), json!({"preferred_username": ["alice"]})), "preferred_username", "printable"),
        (base.clone(), "nickname", "has no `nickname` claim"),
        (base.clone(), "preferred_username", "name of a token"),
    ];
    for (value, user_claim, reason) in refused {
        let error = user_of(&claims(&value), user_claim, "groups", &[String::from("alice")])
            .unwrap_err();
        assert!(error.contains(reason), "{user_claim}: {error}");
    }
}
