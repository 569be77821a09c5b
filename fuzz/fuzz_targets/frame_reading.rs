//! JSON-RPC frame reading, as the stdio transport reads a server's standard output: the line
//! reader splits any byte stream into exactly the newline-delimited lines it holds, refuses a
//! line past the limit (and no shorter one), whatever the read buffer's size; locating the
//! top-level `result` member agrees with a JSON decoder on every line that is a JSON object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolward_fuzz::{FramesEnd, Member, read_frames, top_level_member};

fuzz_target!(|data: &[u8]| {
    let [limit, buffer, stream @ ..] = data else {
        return;
    };
    let limit = usize::from(*limit % 64);
    let buffer = usize::from(*buffer % 16) + 1;
    let (lines, end) = read_frames(stream, limit, buffer);

    // The lines the stream holds: split at each newline, a last piece without one included.
    let mut expected: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    if expected.last().is_some_and(|last| last.is_empty()) {
        expected.pop();
    }
    match end {
        FramesEnd::Eof => {
            assert_eq!(lines, expected, "lines differ from the stream's");
        }
        FramesEnd::TooLong => {
            assert_eq!(lines.as_slice(), &expected[..lines.len()]);
            let refused = expected.get(lines.len()).expect("a line was refused");
            assert!(
                refused.len() > limit,
                "a line of {} bytes refused at limit {limit}",
                refused.len()
            );
        }
    }
    assert!(
        lines
            .iter()
            .all(|line| line.len() <= limit && !line.contains(&b'\n'))
    );

    for line in expected {
        let member = top_level_member(line, "result");
        let Ok(serde_json::Value::Object(object)) = serde_json::from_slice(line) else {
            continue;
        };
        match member {
            Member::Found(bytes) => {
                let decoded: serde_json::Value = serde_json::from_slice(bytes)
                    .unwrap_or_else(|e| panic!("the span of `result` is not JSON: {e}"));
                assert_eq!(Some(&decoded), object.get("result"));
            }
            Member::Absent => assert!(object.get("result").is_none()),
            // serde_json keeps the last of two equal keys; the transport refuses them.
            Member::Duplicate => {}
            Member::Refused => panic!(
                "a JSON object was refused: {}",
                String::from_utf8_lossy(line)
            ),
        }
    }
});
