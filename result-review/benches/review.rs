//! [`Reviewer::review`] on 64 KiB of a tool result: prose, JSON, a log with ANSI colours, a
//! URL, some non-ASCII text, and a few secrets (a GitHub token, an AWS key id, a JWT, a
//! base64-encoded Slack token, a percent-encoded GitHub token, a private key block) and hidden
//! characters spread through it.
//!
//! Cases, each over the same text:
//! - `all`: both reviews, as a policy would run them;
//! - `secrets`, `hidden-characters`: each review alone;
//! - `all/clean`: both reviews on 64 KiB of the same prose, JSON and log without a finding.
//!
//! Run: `cargo bench -p toolward-result-review --bench review` (`-- --quick` for a short run).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use toolward_result_review::{Review, Reviewer};

const SIZE: usize = 64 * 1024;

const PROSE: &str = "The deployment finished at 14:02 and the service answered its health checks \
within the expected window. Three of the eleven workers restarted once; their logs show the \
configuration was read again, which is what a restart does. Nothing in the change touched the \
database schema, so the migration step was skipped. Café, naïve, résumé: the report's titles keep \
their accents, and the Japanese summary (概要: 正常に完了しました) is attached. Next steps: rotate \
the staging credentials on Monday, review the alert thresholds, and archive the old dashboards. \
See https://example.com/docs/runbook?section=deploy&lang=en#rollback for the rollback procedure.\n";

const JSON: &str = "{\"id\":\"run-20240611-0042\",\"status\":\"succeeded\",\"durationMs\":48211,\
\"steps\":[{\"name\":\"build\",\"ok\":true},{\"name\":\"test\",\"ok\":true,\"passed\":1284,\
\"skipped\":12},{\"name\":\"publish\",\"ok\":true,\"artifact\":\"sha256:9f86d081884c7d659a2feaa0\
c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"}],\"url\":\"https:\\/\\/ci.example.com\\/runs\\/42\"}\n";

const LOG: &str = "\u{1b}[32mINFO\u{1b}[0m 2024-06-11T14:02:11Z worker=7 request handled in 12ms \
path=/api/v1/items?page=3&size=50\n\u{1b}[33mWARN\u{1b}[0m 2024-06-11T14:02:12Z worker=3 retrying \
upstream call (attempt 2 of 5)\n";

/// Secrets and hidden characters, one inserted after every few pieces of clean text.
fn secrets() -> Vec<String> {
    let slack = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx";
    vec![
        "export GITHUB_TOKEN=ghp_R4nd0mL00k1ngT0k3nF0rB3nchm4rk1ngXYZ\n".to_owned(),
        "aws_access_key_id = AKIAQWERTYUIOPASDFGH\n".to_owned(),
        "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c\n"
            .to_owned(),
        format!("payload: {}\n", base64(slack.as_bytes())),
        "callback: https://example.com/oauth?token=ghp%5FR4nd0mL00k1ngT0k3nF0rB3nchm4rk1ngXYZ&x=1\n"
            .to_owned(),
        "note\u{200b}with a zero-width space and \u{202e}reversed\u{202c} text\n".to_owned(),
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n"
            .to_owned(),
    ]
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// 64 KiB (cut at a character boundary) of clean pieces, with `extra` spread through them.
fn text(extra: &[String]) -> String {
    let clean = [PROSE, JSON, PROSE, LOG];
    let mut text = String::with_capacity(SIZE + 1024);
    let mut extras = extra.iter().cycle();
    let mut i = 0;
    while text.len() < SIZE {
        text.push_str(clean[i % clean.len()]);
        if !extra.is_empty() && i % 12 == 5 {
            text.push_str(extras.next().unwrap());
        }
        i += 1;
    }
    let mut end = SIZE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

fn bench(c: &mut Criterion) {
    let mixed = text(&secrets());
    let clean = text(&[]);
    let all = Reviewer::new(&Review::ALL).unwrap();
    let found = all.review(&mixed);
    assert!(
        found.iter().any(|f| f.kind == "secret:github-pat"),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.kind == "secret:slack-bot-token+base64"),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.kind == "secret:github-pat+percent"),
        "{found:?}"
    );
    assert!(found.iter().any(|f| f.kind == "secret:jwt"), "{found:?}");
    assert!(
        found.iter().any(|f| f.kind == "secret:private-key"),
        "{found:?}"
    );
    assert!(found.iter().any(|f| f.kind == "hidden:bidi"), "{found:?}");
    assert!(
        found.iter().any(|f| f.kind == "hidden:escape-sequence"),
        "{found:?}"
    );
    let clean_found = all.review(&clean);
    assert!(
        clean_found
            .iter()
            .all(|f| f.kind == "hidden:escape-sequence"),
        "{clean_found:?}"
    );

    let mut group = c.benchmark_group("review");
    group.throughput(Throughput::Bytes(mixed.len() as u64));
    for (name, reviews) in [
        ("all", &Review::ALL[..]),
        ("secrets", &[Review::Secrets][..]),
        ("hidden-characters", &[Review::HiddenCharacters][..]),
    ] {
        let reviewer = Reviewer::new(reviews).unwrap();
        group.bench_with_input(BenchmarkId::new(name, "64KiB"), &mixed, |b, text| {
            b.iter(|| reviewer.review(black_box(text)));
        });
    }
    group.bench_with_input(BenchmarkId::new("all/clean", "64KiB"), &clean, |b, text| {
        b.iter(|| all.review(black_box(text)));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
