//! The host modules the fuzz targets exercise, compiled from the host's own source files: they
//! depend on nothing but `serde_json`, `sha2`, `thiserror` and `tokio`, so the fuzz build
//! stays small (no wasmtime). A crash found here is fixed in those files and kept as an
//! ordinary regression test in the module's tests.
#![allow(dead_code, reason = "each target uses part of the modules")]

#[path = "../../host/src/canonical.rs"]
pub mod canonical;

#[path = "../../host/src/schema.rs"]
pub mod schema;

#[path = "../../host/src/transport/framing.rs"]
mod framing;

/// How reading `input` as newline-delimited frames of at most `limit` bytes ended.
#[derive(Debug, PartialEq, Eq)]
pub enum FramesEnd {
    /// The stream ended; every line was read.
    Eof,
    /// A line went past the limit.
    TooLong,
}

/// Reads `input` through the transport's line reader, with a read buffer of `buffer` bytes
/// (so lines arrive split across reads at every possible place): the lines read, and how
/// reading ended.
pub fn read_frames(input: &[u8], limit: usize, buffer: usize) -> (Vec<Vec<u8>>, FramesEnd) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let reader = tokio::io::BufReader::with_capacity(buffer.max(1), input);
        let mut lines = framing::LineReader::new(reader, limit);
        let mut out = Vec::new();
        loop {
            match lines.next_line().await {
                Ok(Some(line)) => out.push(line.to_vec()),
                Ok(None) => return (out, FramesEnd::Eof),
                Err(framing::FrameError::TooLong { .. }) => return (out, FramesEnd::TooLong),
                Err(framing::FrameError::Io(error)) => panic!("reading a slice failed: {error}"),
            }
        }
    })
}

/// How locating the top-level member `name` of `text` came out.
#[derive(Debug, PartialEq, Eq)]
pub enum Member<'a> {
    /// The member's exact bytes.
    Found(&'a [u8]),
    /// The object has no such member.
    Absent,
    /// The object names it twice.
    Duplicate,
    /// Not an object, or not well-formed.
    Refused,
}

/// [`framing::top_level_member`], the way the transport keeps a `tools/list` result's bytes.
pub fn top_level_member<'a>(text: &'a [u8], name: &str) -> Member<'a> {
    match framing::top_level_member(text, name) {
        Ok(Some(bytes)) => Member::Found(bytes),
        Ok(None) => Member::Absent,
        Err(framing::SpanError::Duplicate { .. }) => Member::Duplicate,
        Err(_) => Member::Refused,
    }
}
