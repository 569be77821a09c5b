use super::*;
use crate::tests::{fill, reviewer_of, secret};
use crate::{Finding, Review};

const ALNUM: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const WORD_DASH: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-";
const UPPER_DIGITS: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const LOWER_ALNUM: &str = "0123456789abcdefghijklmnopqrstuvwxyz";
const HEX: &str = "0123456789abcdef";
const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const BASE64: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz+/";
const BECH32: &str = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L";
const DIGITS: &str = "0123456789";

/// One rule's cases: a realistic token, and a near miss with what it is found as (nothing, or
/// another rule's finding as `(start, end, kind)` within the near miss).
pub(crate) struct Case {
    rule: &'static str,
    pub(crate) token: String,
    near_miss: String,
    near_miss_found: Vec<(usize, usize, &'static str)>,
}

fn case(rule: &'static str, token: String, near_miss: String) -> Case {
    Case {
        rule,
        token,
        near_miss,
        near_miss_found: Vec::new(),
    }
}

pub(crate) fn cases() -> Vec<Case> {
    let routable_body = fill(WORD_DASH, 40, 7);
    vec![
        case(
            "github-pat",
            format!("ghp_{}", fill(ALNUM, 36, 1)),
            format!("ghp_{}", fill(ALNUM, 35, 1)),
        ),
        case(
            "github-oauth",
            format!("gho_{}", fill(ALNUM, 36, 2)),
            format!("gho-{}", fill(ALNUM, 36, 2)),
        ),
        case(
            "github-app-token",
            format!("ghs_{}", fill(ALNUM, 36, 3)),
            format!("ght_{}", fill(ALNUM, 36, 3)),
        ),
        case(
            "github-refresh-token",
            format!("ghr_{}", fill(ALNUM, 36, 4)),
            format!("ghr_{}-{}", fill(ALNUM, 20, 4), fill(ALNUM, 16, 4)),
        ),
        case(
            "github-fine-grained-pat",
            format!(
                "github_pat_11{}_{}",
                fill(UPPER_DIGITS, 20, 5),
                fill(ALNUM, 59, 5)
            ),
            format!(
                "github_pat_11{}_{}",
                fill(UPPER_DIGITS, 20, 5),
                fill(ALNUM, 58, 5)
            ),
        ),
        Case {
            rule: "gitlab-pat-routable",
            token: format!("glpat-{routable_body}.01{}", fill(LOWER_ALNUM, 7, 6)),
            // An eight-character tail is not routable; the plain rule finds the start.
            near_miss: format!("glpat-{routable_body}.01{}", fill(LOWER_ALNUM, 6, 6)),
            near_miss_found: vec![(0, 46, "secret:gitlab-pat")],
        },
        case(
            "gitlab-pat",
            format!("glpat-{}", fill(WORD_DASH, 20, 8)),
            format!("glpat-{}", fill(ALNUM, 19, 8)),
        ),
        case(
            "gitlab-ptt",
            format!("glptt-{}", fill(HEX, 40, 9)),
            format!("glptt-{}", fill(HEX, 40, 9).to_uppercase()),
        ),
        case(
            "gitlab-rrt",
            format!("GR1348941{}", fill(WORD_DASH, 20, 10)),
            format!("GR1348942{}", fill(WORD_DASH, 20, 10)),
        ),
        case(
            "gitlab-runner-authentication-token",
            format!("glrt-{}", fill(WORD_DASH, 20, 11)),
            format!("glrt_{}", fill(WORD_DASH, 20, 11)),
        ),
        case(
            "slack-bot-token",
            format!(
                "xoxb-{}-{}-{}",
                fill(DIGITS, 12, 12),
                fill(DIGITS, 13, 12),
                fill(ALNUM, 24, 12)
            ),
            format!(
                "xoxb-{}-{}-{}",
                fill(DIGITS, 9, 12),
                fill(DIGITS, 13, 12),
                fill(ALNUM, 24, 12)
            ),
        ),
        case(
            "slack-user-token",
            format!(
                "xoxp-{}-{}-{}-{}",
                fill(DIGITS, 12, 13),
                fill(DIGITS, 12, 14),
                fill(DIGITS, 13, 15),
                fill(HEX, 32, 13)
            ),
            format!(
                "xoxp-{}-{}-{}",
                fill(DIGITS, 12, 13),
                fill(DIGITS, 12, 14),
                fill(HEX, 32, 13)
            ),
        ),
        case(
            "slack-app-token",
            format!(
                "xapp-1-A{}-{}-{}",
                fill(UPPER_DIGITS, 10, 16),
                fill(DIGITS, 13, 16),
                fill(HEX, 64, 16)
            ),
            format!(
                "xapp-12-A{}-{}-{}",
                fill(UPPER_DIGITS, 10, 16),
                fill(DIGITS, 13, 16),
                fill(HEX, 64, 16)
            ),
        ),
        case(
            "slack-webhook-url",
            format!(
                "https://hooks.slack.com/services/T{}/B{}/{}",
                fill(UPPER_DIGITS, 10, 17),
                fill(UPPER_DIGITS, 10, 18),
                fill(ALNUM, 24, 17)
            ),
            "https://hooks.slack.com/services/T0123/B0456/abcdefgh".to_owned(),
        ),
        case(
            "aws-access-key-id",
            format!("AKIA{}", fill(UPPER_DIGITS, 16, 19)),
            // AWS's documentation example, on gitleaks' allowlist.
            "AKIAIOSFODNN7EXAMPLE".to_owned(),
        ),
        case(
            "gcp-api-key",
            format!("AIza{}", fill(WORD_DASH, 35, 20)),
            format!("AIza{}", fill(WORD_DASH, 34, 20)),
        ),
        case(
            "openai-api-key",
            format!(
                "sk-proj-{}T3BlbkFJ{}",
                fill(WORD_DASH, 74, 21),
                fill(WORD_DASH, 74, 22)
            ),
            format!("sk-proj-{}", fill(WORD_DASH, 156, 21)),
        ),
        case(
            "anthropic-api-key",
            format!("sk-ant-api03-{}AA", fill(WORD_DASH, 93, 23)),
            format!("sk-ant-api03-{}AB", fill(WORD_DASH, 93, 23)),
        ),
        case(
            "stripe-access-token",
            format!("sk_live_{}", fill(ALNUM, 24, 24)),
            format!("sk_live_{}", fill(ALNUM, 9, 24)),
        ),
        case(
            "npm-access-token",
            format!("npm_{}", fill(ALNUM, 36, 25)),
            format!("NPM_{}", fill(ALNUM, 36, 25)),
        ),
        case(
            "pypi-upload-token",
            format!("pypi-AgEIcHlwaS5vcmc{}", fill(WORD_DASH, 160, 26)),
            format!("pypi-AgEIcHlwaS5vcmc{}", fill(WORD_DASH, 49, 26)),
        ),
        case(
            "rubygems-api-token",
            format!("rubygems_{}", fill(HEX, 48, 27)),
            format!("rubygems_{}", fill(HEX, 47, 27)),
        ),
        case(
            "sendgrid-api-token",
            format!("SG.{}.{}", fill(WORD_DASH, 22, 28), fill(WORD_DASH, 43, 29)),
            format!("SG.{}.{}", fill(WORD_DASH, 22, 28), fill(WORD_DASH, 42, 29)),
        ),
        case(
            "huggingface-access-token",
            format!("hf_{}", fill(LETTERS, 34, 30)),
            format!("hf_{}0{}", fill(LETTERS, 20, 30), fill(LETTERS, 13, 30)),
        ),
        case(
            "digitalocean-pat",
            format!("dop_v1_{}", fill(HEX, 64, 31)),
            format!("dop_v2_{}", fill(HEX, 64, 31)),
        ),
        case(
            "digitalocean-access-token",
            format!("doo_v1_{}", fill(HEX, 64, 32)),
            format!("doo_v1_{}", fill(HEX, 63, 32)),
        ),
        case(
            "digitalocean-refresh-token",
            format!("dor_v1_{}", fill(HEX, 64, 33)),
            format!("dor_v1_g{}", fill(HEX, 63, 33)),
        ),
        case(
            "shopify-access-token",
            format!("shpat_{}", fill(HEX, 32, 34)),
            format!("shpat_{}", fill(HEX, 31, 34)),
        ),
        case(
            "shopify-custom-access-token",
            format!("shpca_{}", fill(HEX, 32, 35)),
            format!("shpcb_{}", fill(HEX, 32, 35)),
        ),
        case(
            "shopify-private-app-access-token",
            format!("shppa_{}", fill(HEX, 32, 36)),
            format!("shppa_{}", fill(LETTERS, 32, 36)),
        ),
        case(
            "shopify-shared-secret",
            format!("shpss_{}", fill(HEX, 32, 37)),
            format!("shpss-{}", fill(HEX, 32, 37)),
        ),
        case(
            "age-secret-key",
            format!("AGE-SECRET-KEY-1{}", fill(BECH32, 58, 39)),
            format!("AGE-SECRET-KEY-1{}B", fill(BECH32, 57, 39)),
        ),
        case(
            "databricks-api-token",
            format!("dapi{}", fill(HEX, 32, 40)),
            format!("dapi{}", fill(HEX, 31, 40)),
        ),
        case(
            "vault-service-token",
            format!("hvs.{}", fill(WORD_DASH, 95, 41)),
            format!("hvs.{}", fill(WORD_DASH, 89, 41)),
        ),
        case(
            "grafana-service-account-token",
            format!("glsa_{}_{}", fill(ALNUM, 32, 42), fill(HEX, 8, 42)),
            format!("glsa_{}_{}", fill(ALNUM, 32, 42), fill(HEX, 7, 42)),
        ),
        case(
            "grafana-cloud-api-token",
            format!("glc_{}=", fill(BASE64, 120, 44)),
            format!("glc_{}", fill(BASE64, 31, 44)),
        ),
        case(
            "1password-service-account-token",
            format!("ops_eyJ{}==", fill(BASE64, 300, 43)),
            format!("ops_eyJ{}", fill(BASE64, 249, 43)),
        ),
        case(
            "atlassian-api-token",
            format!(
                "ATATT3{}={}",
                fill(WORD_DASH, 177, 44),
                fill(UPPER_DIGITS, 8, 44)
            ),
            format!("ATATT3{}", fill(WORD_DASH, 185, 44)),
        ),
    ]
}

#[test]
fn every_rule_has_a_case() {
    let cases = cases();
    let covered: Vec<&str> = cases.iter().map(|case| case.rule).collect();
    let rules: Vec<&str> = RULES.iter().map(|rule| rule.id).collect();
    assert_eq!(covered, rules);
}

#[test]
fn every_rule_is_found_in_context_and_its_near_miss_is_not() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    for case in cases() {
        // Realistic surroundings: an environment file, JSON, prose with punctuation after.
        for (before, after) in [
            ("export TOKEN=", "\n"),
            ("{\"token\":\"", "\"}"),
            ("the key (", "), then"),
        ] {
            let text = format!("{before}{}{after}", case.token);
            assert_eq!(
                reviewer.review(&text),
                [secret(
                    before.len(),
                    before.len() + case.token.len(),
                    case.rule
                )],
                "{}: {text}",
                case.rule
            );
        }
        let text = format!("export TOKEN={}\n", case.near_miss);
        let expected: Vec<Finding> = case
            .near_miss_found
            .iter()
            .map(|&(start, end, kind)| Finding {
                start: start + 13,
                end: end + 13,
                kind: kind.to_owned(),
            })
            .collect();
        assert_eq!(
            reviewer.review(&text),
            expected,
            "{} near miss: {text}",
            case.rule
        );
    }
}

#[test]
fn a_longer_token_is_covered_whole() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let token = format!("ghp_{}", fill(ALNUM, 40, 1));
    let text = format!("x {token} y");
    assert_eq!(
        reviewer.review(&text),
        [secret(2, 2 + token.len(), "github-pat")]
    );
}

#[test]
fn a_boundary_rule_needs_a_boundary_or_a_json_escape() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let key = format!("AKIA{}", fill(UPPER_DIGITS, 16, 19));
    assert_eq!(reviewer.review(&format!("xx{key}")), []);
    assert_eq!(reviewer.review(&format!("_{key}")), []);
    assert_eq!(
        reviewer.review(&format!("é{key}")),
        [secret(2, 22, "aws-access-key-id")]
    );
    // JSON text: `"ID=x\nAKIA…"`.
    let json = format!("\"a\\n{key}\\nb\"");
    assert_eq!(reviewer.review(&json), [secret(4, 24, "aws-access-key-id")]);
}

#[test]
fn a_slack_webhook_takes_its_scheme() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let path = format!(
        "hooks.slack.com/workflows/T{}/A{}/{}",
        fill(UPPER_DIGITS, 10, 17),
        fill(UPPER_DIGITS, 10, 18),
        fill(ALNUM, 24, 17)
    );
    for scheme in ["https://", "http://", ""] {
        let text = format!("POST {scheme}{path} now");
        assert_eq!(
            reviewer.review(&text),
            [secret(
                5,
                5 + scheme.len() + path.len(),
                "slack-webhook-url"
            )],
            "{scheme}"
        );
    }
    // Another scheme stays out.
    let text = format!("ftp://{path}");
    assert_eq!(
        reviewer.review(&text),
        [secret(6, text.len(), "slack-webhook-url")]
    );
}

#[test]
fn a_rejected_start_does_not_hide_a_later_match() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    // `xAKIA…` is no key; the real one right after it is.
    let key = format!("AKIA{}", fill(UPPER_DIGITS, 16, 19));
    let text = format!("x{key} {key}");
    assert_eq!(
        reviewer.review(&text),
        [secret(22, 42, "aws-access-key-id")]
    );
    // `AKIA…EXAMPLE` glued to a GitHub token's prefix.
    let text = format!("AKIAIOSFODNN7EXAMPLEghp_{}", fill(ALNUM, 36, 1));
    assert_eq!(reviewer.review(&text), [secret(20, 60, "github-pat")]);
}

#[test]
fn the_openai_legacy_shape_is_found() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let key = format!("sk-{}T3BlbkFJ{}", fill(ALNUM, 20, 50), fill(ALNUM, 20, 51));
    assert_eq!(reviewer.review(&key), [secret(0, 51, "openai-api-key")]);
}

#[test]
fn the_other_github_app_prefix_and_the_stripe_variants_are_found() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let token = format!("ghu_{}", fill(ALNUM, 36, 3));
    assert_eq!(reviewer.review(&token), [secret(0, 40, "github-app-token")]);
    for prefix in ["sk_test_", "rk_live_", "sk_prod_"] {
        let token = format!("{prefix}{}", fill(ALNUM, 99, 52));
        assert_eq!(
            reviewer.review(&token),
            [secret(0, 107, "stripe-access-token")],
            "{prefix}"
        );
    }
    // `sk_live_` inside a word is not a Stripe key.
    assert_eq!(
        reviewer.review(&format!("mask_live_{}", fill(ALNUM, 24, 24))),
        []
    );
}

const RSA_BODY: &str = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n\
VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n\
LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo\n";

#[test]
fn private_key_blocks_run_through_their_end_line() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    for label in ["RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", ""] {
        let block = format!(
            "-----BEGIN {label}PRIVATE KEY-----\n{RSA_BODY}-----END {label}PRIVATE KEY-----"
        );
        let text = format!("key:\n{block}\nafter the key");
        assert_eq!(
            reviewer.review(&text),
            [secret(5, 5 + block.len(), PRIVATE_KEY)],
            "{label}"
        );
    }
    let pgp = format!(
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{RSA_BODY}=twTO\n-----END PGP PRIVATE KEY BLOCK-----"
    );
    assert_eq!(
        reviewer.review(&format!("{pgp}\n")),
        [secret(0, pgp.len(), PRIVATE_KEY)]
    );
    // In JSON text, with escaped line breaks.
    let json = "{\"key\":\"-----BEGIN RSA PRIVATE KEY-----\\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lg\\n-----END RSA PRIVATE KEY-----\\n\"}";
    let end = json.find("KEY-----\\n\"}").unwrap() + 8;
    assert_eq!(reviewer.review(json), [secret(8, end, PRIVATE_KEY)]);
}

#[test]
fn an_unterminated_or_mismatched_private_key_runs_to_the_end() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let text = format!("a\n-----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}(cut)");
    assert_eq!(reviewer.review(&text), [secret(2, text.len(), PRIVATE_KEY)]);
    let text =
        format!("-----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}-----END EC PRIVATE KEY-----\nmore");
    assert_eq!(reviewer.review(&text), [secret(0, text.len(), PRIVATE_KEY)]);
}

#[test]
fn a_private_key_block_in_lower_case_or_with_form_encoded_spaces_is_found() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    for (begin, end) in [
        (
            "-----begin rsa private key-----",
            "-----end rsa private key-----",
        ),
        ("-----Begin Private Key-----", "-----END PRIVATE KEY-----"),
        (
            "-----BEGIN+RSA+PRIVATE+KEY-----",
            "-----END+RSA+PRIVATE+KEY-----",
        ),
        (
            "-----BEGIN+RSA+PRIVATE+KEY-----",
            "-----END RSA PRIVATE KEY-----",
        ),
    ] {
        let block = format!("{begin}\n{RSA_BODY}{end}");
        let text = format!("{block}\nafter");
        assert_eq!(
            reviewer.review(&text),
            [secret(0, block.len(), PRIVATE_KEY)],
            "{begin}"
        );
    }
}

#[test]
fn public_keys_and_certificates_are_not_private_keys() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    for label in ["PUBLIC KEY", "CERTIFICATE", "RSA PUBLIC KEY", "public key"] {
        let text = format!("-----BEGIN {label}-----\n{RSA_BODY}-----END {label}-----\n");
        assert_eq!(reviewer.review(&text), [], "{label}");
    }
}

/// `{"alg":"HS256","typ":"JWT"}` . `{"sub":"1234567890","name":"John Doe","iat":1516239022}` .
/// signature.
const JWT_EXAMPLE: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

#[test]
fn jwts_are_found_whole() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let text = format!("Authorization: Bearer {JWT_EXAMPLE}.");
    assert_eq!(
        reviewer.review(&text),
        [secret(22, 22 + JWT_EXAMPLE.len(), JWT)]
    );
    // Unsecured (`{"alg":"none"}`, empty signature) and a JWE's five segments.
    let unsecured = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.";
    assert_eq!(
        reviewer.review(unsecured),
        [secret(0, unsecured.len(), JWT)]
    );
    // `{"alg":"RSA-OAEP","enc":"A256GCM"}`
    let jwe = "eyJhbGciOiJSU0EtT0FFUCIsImVuYyI6IkEyNTZHQ00ifQ.OKOawDo13gRp2ojaHV7LFpZcgV7T6DVZKTyKOMTYUmKoTCVJRgckCL9kiMT03JGeipsEdY3mx_etLbbWSrFr05kLzcSr4qKAq7YN7e9jwQRb23nfa6c9d-StnImGyFDbSv04uVuxIp5Zms1gNxKKK2Da14B8S4rzVRltdYwam_lDp5XnZAYpQdb76FdIKLaVmqgfwX7XWRxv2322i-vDxRfqNzo_tETKzpVLzfiwQyeyPGLBIO56YJ7eObdv0je81860ppamavo35UgoRdbYaBcoh9QcfylQr66oc6vFWXRcZ_ZT2LawVCWTIy3brGPi6UklfCpIMfIjf7iGdXKHzg.48V1_ALb6US04U3b.5eym8TW_c8SuK0ltJ3rpYIzOeDQz7TALvtu6UG9oMo4vpzs9tX_EFShS8iB7j6jiSdiwkIr3ajwQzaBtQD_A.XFBoMYUZodetZdvTiFvSkQ";
    assert_eq!(reviewer.review(jwe), [secret(0, jwe.len(), JWT)]);
    // After a JSON escape, and after a `-` inside a longer run.
    let text = format!("\"a\\n{JWT_EXAMPLE}\"");
    assert_eq!(
        reviewer.review(&text),
        [secret(4, 4 + JWT_EXAMPLE.len(), JWT)]
    );
    let text = format!("id-{JWT_EXAMPLE}");
    assert_eq!(
        reviewer.review(&text),
        [secret(3, 3 + JWT_EXAMPLE.len(), JWT)]
    );
}

#[test]
fn dotted_text_that_is_not_a_jwt_is_not_found() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    // `{"not":"a jose header"}` . `{"a":1}` . `sig`
    assert_eq!(
        reviewer.review("eyJub3QiOiJhIGpvc2UgaGVhZGVyIn0.eyJhIjoxfQ.c2ln"),
        []
    );
    // A header without the signature's dot, and words that start with `ey`.
    let header = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";
    assert_eq!(
        reviewer.review(&format!("{header}.eyJzdWIiOiIxIn0 and more")),
        []
    );
    assert_eq!(
        reviewer.review("eyebrows.eyeliner.eyewear and keys.money.they"),
        []
    );
    // `ey` inside a word is no start.
    assert_eq!(reviewer.review(&format!("key{JWT_EXAMPLE}")), []);
}

#[test]
fn jose_header_checks_alg_braces_and_controls() {
    let encode = |json: &str| crate::tests::base64url(json.as_bytes());
    assert!(jose_header(encode("{\"alg\":\"HS256\"}").as_bytes()));
    assert!(jose_header(
        encode("{ \"typ\" : \"JWT\", \"alg\" : \"ES256\" }\n").as_bytes()
    ));
    assert!(!jose_header(encode("{\"typ\":\"JWT\"}").as_bytes()));
    assert!(!jose_header(encode("{\"alg\"}").as_bytes()));
    assert!(!jose_header(encode("{\"alg\":\"HS256\"").as_bytes()));
    assert!(!jose_header(encode("{\"alg\":\"HS256\u{1}\"}").as_bytes()));
    assert!(!jose_header(encode("[\"alg\":1]").as_bytes()));
}

#[test]
fn findings_of_several_rules_keep_their_order() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let github = format!("ghp_{}", fill(ALNUM, 36, 1));
    let aws = format!("AKIA{}", fill(UPPER_DIGITS, 16, 19));
    let text = format!("{aws} then {github}, {JWT_EXAMPLE} and {aws}");
    let jwt_start = 20 + 6 + 40 + 2;
    assert_eq!(
        reviewer.review(&text),
        [
            secret(0, 20, "aws-access-key-id"),
            secret(26, 66, "github-pat"),
            secret(jwt_start, jwt_start + JWT_EXAMPLE.len(), JWT),
            secret(text.len() - 20, text.len(), "aws-access-key-id"),
        ]
    );
}

#[test]
fn the_regexes_compile() {
    assert!(Secrets::new().is_ok());
}
