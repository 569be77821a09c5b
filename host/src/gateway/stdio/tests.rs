use std::io::{Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use serde_json::{Value as Json, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

use super::*;

/// The stand-in `HeadScan` makes of `line` fed in pieces of `chunk` bytes, parsed.
fn stand_in_of(line: &str, chunk: usize) -> Option<Json> {
    let mut scan = HeadScan::default();
    for piece in line.as_bytes().chunks(chunk.max(1)) {
        scan.feed(piece);
    }
    let bytes = scan.stand_in(line.len() + 1, 100)?;
    assert_eq!(bytes.last(), Some(&b'\n'));
    Some(serde_json::from_slice(&bytes).unwrap())
}

#[test]
fn the_id_method_and_tool_are_read_wherever_they_are_in_the_line() {
    let padding = "x".repeat(10_000);
    let line = format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"id":1,"name":"not this","text":"{padding}"}},"name":"fs__write_file"}},"id":"req \"7\""}}"#
    );
    let stand_in = stand_in_of(&line, 7).unwrap();
    assert_eq!(
        stand_in,
        json!({
            "jsonrpc": "2.0",
            "id": "req \"7\"",
            "method": OVERSIZED_METHOD,
            "params": {
                "bytes": line.len() + 1,
                "limit": 100,
                "method": "tools/call",
                "tool": "fs__write_file",
            },
        })
    );
}

#[test]
fn a_line_without_a_usable_id_gets_no_stand_in() {
    for line in [
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"id":3}}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]"#,
        r#"not json at all "id":1"#,
        "",
    ] {
        assert_eq!(stand_in_of(line, 3), None, "{line}");
    }
    let long_id = format!(r#"{{"id":"{}","method":"tools/call"}}"#, "i".repeat(600));
    assert_eq!(stand_in_of(&long_id, 64), None);
}

#[test]
fn a_number_id_with_whitespace_and_a_params_array_are_read() {
    let line = r#" { "params" : [ {"name":"no"} ] , "id" : 12 , "method" : "tools/list" } "#;
    let stand_in = stand_in_of(line, 1).unwrap();
    assert_eq!(stand_in["id"], 12);
    assert_eq!(stand_in["params"]["method"], "tools/list");
    assert_eq!(stand_in["params"].get("tool"), None);
}

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_/]{1,20}",
        any::<String>().prop_map(|s| s.chars().take(40).collect()),
    ]
}

proptest! {
    /// Against serde_json's reading of the same line: any key order, any filler, any split.
    #[test]
    fn the_scan_agrees_with_serde_json(
        id in prop_oneof![any::<i64>().prop_map(Json::from), json_string().prop_map(Json::from)],
        method in json_string(),
        name in json_string(),
        filler in prop::collection::vec(json_string(), 0..5),
        order in Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
        params_order in any::<bool>(),
        chunk in 1usize..50,
    ) {
        let arguments = json!({ "name": filler, "id": [filler.clone()], "nested": { "params": { "name": 1 } } });
        let params = if params_order {
            format!(r#"{{"arguments":{arguments},"name":{}}}"#, Json::from(name.clone()))
        } else {
            format!(r#"{{"name":{},"arguments":{arguments}}}"#, Json::from(name.clone()))
        };
        let members = [
            String::from(r#""jsonrpc":"2.0""#),
            format!(r#""id":{id}"#),
            format!(r#""method":{}"#, Json::from(method.clone())),
            format!(r#""params":{params}"#),
        ];
        let line = format!("{{{}}}", order.iter().map(|i| members[*i].as_str()).collect::<Vec<_>>().join(","));
        let parsed: Json = serde_json::from_str(&line).unwrap();
        let stand_in = stand_in_of(&line, chunk).unwrap();
        prop_assert_eq!(&stand_in["id"], &parsed["id"]);
        prop_assert_eq!(&stand_in["params"]["method"], &parsed["method"]);
        prop_assert_eq!(&stand_in["params"]["tool"], &parsed["params"]["name"]);
    }
}

/// Hands out its bytes `chunk` at a time, as a pipe might.
struct Chunked {
    bytes: Vec<u8>,
    at: usize,
    chunk: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self
            .chunk
            .min(self.bytes.len() - self.at)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.bytes[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn the_guard_passes_lines_through_and_adds_a_stand_in_after_each_oversized_one() {
    let big = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"t","arguments":{{"s":"{}"}}}},"id":{id}}}"#,
            "y".repeat(200)
        )
    };
    let small = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let notification = format!(
        r#"{{"jsonrpc":"2.0","method":"n","params":{{"s":"{}"}}}}"#,
        "z".repeat(200)
    );
    let input = format!("{small}\n{}\n{}\n{notification}\n{small}\n", big(2), big(3));
    for chunk in [1, 5, 64, 1000, 1 << 16] {
        let mut guard = OversizeGuard::with_limit(
            Chunked {
                bytes: input.clone().into_bytes(),
                at: 0,
                chunk,
            },
            100,
        );
        let mut out = String::new();
        guard.read_to_string(&mut out).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 7, "chunk {chunk}: {out}");
        assert_eq!(lines[0], small);
        assert_eq!(lines[1], big(2));
        let stand_in: Json = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(stand_in["id"], 2);
        assert_eq!(stand_in["params"]["bytes"], big(2).len() + 1);
        assert_eq!(stand_in["params"]["tool"], "t");
        assert_eq!(lines[3], big(3));
        assert_eq!(serde_json::from_str::<Json>(lines[4]).unwrap()["id"], 3);
        assert_eq!(lines[5], notification, "a notification gets no stand-in");
        assert_eq!(lines[6], small);
    }
}

#[test]
fn a_line_exactly_at_the_limit_is_not_oversized() {
    let line = format!(r#"{{"id":1,"s":"{}"}}"#, "a".repeat(84));
    assert_eq!(line.len() + 1, 100);
    let mut guard = OversizeGuard::with_limit(tokio::io::empty(), 100);
    assert!(guard.observe(format!("{line}\n").as_bytes()).is_empty());
    let over = format!(r#"{{"id":1,"s":"{}"}}"#, "a".repeat(85));
    assert_eq!(guard.observe(format!("{over}\n").as_bytes()).len(), 1);
}

#[tokio::test]
async fn pipes_and_sockets_are_used_without_blocking_and_other_files_are_not() {
    let (reader, mut writer) = std::io::pipe().unwrap();
    let mut input = Input::from_fd(OwnedFd::from(reader)).unwrap();
    assert!(matches!(input, Input::Pipe(..)), "{input:?}");
    writer.write_all(b"over a pipe\n").unwrap();
    let mut line = [0u8; 12];
    input.read_exact(&mut line).await.unwrap();
    assert_eq!(&line, b"over a pipe\n");

    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut output = Output::from_fd(OwnedFd::from(ours), None).unwrap();
    assert!(matches!(output, Output::Socket(..)), "{output:?}");
    output.write_all(b"over a socket\n").await.unwrap();
    let mut got = [0u8; 14];
    theirs.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"over a socket\n");

    let file = tempfile::tempfile().unwrap();
    let input = Input::from_fd(OwnedFd::from(file)).unwrap();
    assert!(matches!(input, Input::Blocking(_)), "{input:?}");
}

#[tokio::test]
async fn standard_output_stays_blocking_when_standard_error_is_the_same_pipe() {
    let (_reader, writer) = std::io::pipe().unwrap();
    let writer = OwnedFd::from(writer);
    let stderr = writer.try_clone().unwrap();
    let output = Output::from_fd(writer, Some(&stderr)).unwrap();
    assert!(matches!(output, Output::Blocking(_)), "{output:?}");

    let (_reader, writer) = std::io::pipe().unwrap();
    let (_other_reader, other) = std::io::pipe().unwrap();
    let output = Output::from_fd(OwnedFd::from(writer), Some(&OwnedFd::from(other))).unwrap();
    assert!(matches!(output, Output::Pipe(..)), "{output:?}");
}

#[tokio::test]
async fn a_pipe_is_left_blocking_again_when_the_gateway_lets_go_of_it() {
    let (reader, _writer) = std::io::pipe().unwrap();
    let reader = OwnedFd::from(reader);
    let ours = reader.try_clone().unwrap();
    let input = Input::from_fd(ours).unwrap();
    let flags = |fd: &OwnedFd| {
        let link = std::fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            std::os::fd::AsRawFd::as_raw_fd(fd)
        ))
        .unwrap();
        let octal = link
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .unwrap()
            .trim()
            .to_owned();
        u32::from_str_radix(&octal, 8).unwrap()
    };
    const O_NONBLOCK: u32 = 0o4000;
    assert_ne!(flags(&reader) & O_NONBLOCK, 0, "shared while in use");
    drop(input);
    assert_eq!(flags(&reader) & O_NONBLOCK, 0, "blocking again");
}
