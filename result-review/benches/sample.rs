//! The 64 KiB tool result the review benchmarks read (this crate's `benches/review.rs` and
//! the host's `benches/review.rs`, natively and in the guest): prose, JSON, a log with ANSI
//! colours, a URL, non-ASCII text, and a few secrets and hidden characters spread through it.
#![allow(dead_code, clippy::unwrap_used, reason = "a benchmark's input")]

pub const SIZE: usize = 64 * 1024;

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
pub fn secrets() -> Vec<String> {
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
pub fn text(extra: &[String]) -> String {
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
