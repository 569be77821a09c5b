//! The gateway's own standard input and output, and the bound on one client message.
//!
//! **Why not `tokio::io::stdin()`/`stdout()`:** those run every read and every write on
//! tokio's blocking thread pool, so each message crosses threads twice and waits for a
//! thread to wake; that was most of the latency the gateway added to a call
//! (`benches/gateway.rs`). When standard input or output is a pipe or a socket, as it is when
//! an MCP client starts toolward, it is read and written here without blocking, on the
//! runtime's own event loop. A terminal or a regular file keeps the blocking pool: putting a
//! terminal in non-blocking mode would leak into the shell that shares it.
//!
//! Non-blocking mode belongs to the open file description, which every process holding it
//! shares. So standard output is only switched when standard error is not the same pipe
//! (`toolward serve 2>&1 | …`): a log line written while the pipe is full would otherwise be
//! lost with `EAGAIN`. The servers toolward starts never share these: their standard
//! streams are pipes of their own (`transport::process`).
//!
//! **One message's size:** a line longer than [`MAX_MESSAGE_BYTES`] is dropped by rmcp's
//! transport without an answer, so the client would wait for its own timeout.
//! [`OversizeGuard`] watches the lines go by, reads the request's `id` (and its `method`
//! and `params.name`) wherever they are in the line, and after the dropped line hands rmcp
//! a small request of method [`OVERSIZED_METHOD`] with the same `id`, which the gateway
//! answers with an error naming the tool and the size.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

/// The longest client message, in bytes, counting its newline: rmcp's own cap on one line
/// of its stdio transport (`DEFAULT_MAX_LINE_LENGTH`, 16 MiB), which the gateway sets
/// explicitly so the two cannot drift apart.
pub(crate) const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// The method of the request [`OversizeGuard`] puts in place of a dropped one. Its
/// `params`: `bytes` (the dropped line's length), `limit`, and `method` and `tool` when
/// they could be read from the line (JSON strings, as the client wrote them).
pub(crate) const OVERSIZED_METHOD: &str = "toolward/oversized-message";

/// Standard input, read without blocking a thread where it can be.
#[derive(Debug)]
pub(crate) enum Input {
    /// A pipe (`pipe(2)`, a FIFO): what Python's and most clients' `subprocess` give.
    Pipe(
        pipe::Receiver,
        #[expect(dead_code, reason = "kept for its Drop")] RestoreBlocking,
    ),
    /// A Unix socket: what Node's `child_process` (libuv) gives.
    Socket(
        UnixStream,
        #[expect(dead_code, reason = "kept for its Drop")] RestoreBlocking,
    ),
    /// Anything else (a terminal, a file): read on tokio's blocking pool.
    Blocking(tokio::fs::File),
}

/// Standard output, written without blocking a thread where it can be. As [`Input`].
#[derive(Debug)]
pub(crate) enum Output {
    /// A pipe.
    Pipe(
        pipe::Sender,
        #[expect(dead_code, reason = "kept for its Drop")] RestoreBlocking,
    ),
    /// A Unix socket.
    Socket(
        UnixStream,
        #[expect(dead_code, reason = "kept for its Drop")] RestoreBlocking,
    ),
    /// Anything else, or a pipe standard error shares: written on tokio's blocking pool.
    Blocking(tokio::fs::File),
}

/// Puts an open file description back in blocking mode when dropped, so whoever shares it
/// after toolward (a wrapper script reading on) finds it as it was.
#[derive(Debug)]
pub(crate) struct RestoreBlocking(Option<OwnedFd>);

impl RestoreBlocking {
    fn of(fd: &OwnedFd) -> Self {
        Self(fd.try_clone().ok())
    }
}

impl Drop for RestoreBlocking {
    fn drop(&mut self) {
        if let Some(fd) = self.0.take() {
            // `set_nonblocking` is `ioctl(FIONBIO)`, which any descriptor takes, pipes too;
            // the descriptor is a duplicate, closed when `stream` drops.
            let stream = std::os::unix::net::UnixStream::from(fd);
            let _ = stream.set_nonblocking(false);
        }
    }
}

/// What kind of file an open descriptor is, and which one (device and inode).
fn identify(fd: &OwnedFd) -> io::Result<(std::fs::FileType, (u64, u64))> {
    let file = File::from(fd.try_clone()?);
    let metadata = file.metadata()?;
    Ok((metadata.file_type(), (metadata.dev(), metadata.ino())))
}

fn socket(fd: OwnedFd) -> io::Result<UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true)?;
    UnixStream::from_std(stream)
}

impl Input {
    /// Standard input (a duplicate of descriptor 0). Must be called within a tokio runtime.
    ///
    /// # Errors
    /// When the descriptor cannot be duplicated, examined or registered with the runtime.
    pub(crate) fn stdin() -> io::Result<Self> {
        Self::from_fd(io::stdin().as_fd().try_clone_to_owned()?)
    }

    /// `fd` as an input, switched to non-blocking mode when it is a pipe or a socket.
    pub(crate) fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        let (kind, _) = identify(&fd)?;
        let restore = RestoreBlocking::of(&fd);
        if kind.is_fifo() {
            Ok(Self::Pipe(pipe::Receiver::from_owned_fd(fd)?, restore))
        } else if kind.is_socket() {
            Ok(Self::Socket(socket(fd)?, restore))
        } else {
            Ok(Self::Blocking(tokio::fs::File::from_std(File::from(fd))))
        }
    }
}

impl Output {
    /// Standard output (a duplicate of descriptor 1). Must be called within a tokio runtime.
    ///
    /// # Errors
    /// As [`Input::stdin`].
    pub(crate) fn stdout() -> io::Result<Self> {
        let stderr = io::stderr().as_fd().try_clone_to_owned()?;
        Self::from_fd(io::stdout().as_fd().try_clone_to_owned()?, Some(&stderr))
    }

    /// `fd` as an output, switched to non-blocking mode when it is a pipe or a socket that
    /// `stderr` (when given) is not.
    pub(crate) fn from_fd(fd: OwnedFd, stderr: Option<&OwnedFd>) -> io::Result<Self> {
        let (kind, id) = identify(&fd)?;
        let shared_with_stderr = match stderr {
            Some(stderr) => identify(stderr)
                .map(|(_, other)| other == id)
                .unwrap_or(true),
            None => false,
        };
        let restore = RestoreBlocking::of(&fd);
        if kind.is_fifo() && !shared_with_stderr {
            Ok(Self::Pipe(pipe::Sender::from_owned_fd(fd)?, restore))
        } else if kind.is_socket() && !shared_with_stderr {
            Ok(Self::Socket(socket(fd)?, restore))
        } else {
            Ok(Self::Blocking(tokio::fs::File::from_std(File::from(fd))))
        }
    }
}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Pipe(r, _) => Pin::new(r).poll_read(cx, buf),
            Self::Socket(s, _) => Pin::new(s).poll_read(cx, buf),
            Self::Blocking(f) => Pin::new(f).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Pipe(w, _) => Pin::new(w).poll_write(cx, buf),
            Self::Socket(s, _) => Pin::new(s).poll_write(cx, buf),
            Self::Blocking(f) => Pin::new(f).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Pipe(w, _) => Pin::new(w).poll_flush(cx),
            Self::Socket(s, _) => Pin::new(s).poll_flush(cx),
            Self::Blocking(f) => Pin::new(f).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Pipe(w, _) => Pin::new(w).poll_shutdown(cx),
            // Not `shutdown(2)`: the socket may be standard input too.
            Self::Socket(..) => Poll::Ready(Ok(())),
            Self::Blocking(f) => Pin::new(f).poll_shutdown(cx),
        }
    }
}

/// Passes a newline-delimited stream through unchanged, except that after each line longer
/// than [`MAX_MESSAGE_BYTES`] (which rmcp drops) it adds one line: a request of method
/// [`OVERSIZED_METHOD`] with the dropped request's `id`, so the client gets an answer.
/// A dropped line without an `id` (a notification, or not JSON) adds nothing.
#[derive(Debug)]
pub(crate) struct OversizeGuard<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line seen so far, its newline included.
    line_bytes: usize,
    scan: HeadScan,
    /// Bytes already looked at, to hand out before reading on (only after a stand-in was
    /// added), and how many of them are out.
    queued: Vec<u8>,
    queued_out: usize,
}

impl<R> OversizeGuard<R> {
    /// Guards `inner` with the limit [`MAX_MESSAGE_BYTES`].
    pub(crate) fn new(inner: R) -> Self {
        Self::with_limit(inner, MAX_MESSAGE_BYTES)
    }

    /// Guards `inner` with `limit` bytes a line, newline included (tests use small ones).
    pub(crate) fn with_limit(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            line_bytes: 0,
            scan: HeadScan::default(),
            queued: Vec::new(),
            queued_out: 0,
        }
    }

    /// Looks at `bytes` as they pass. Returns each stand-in line to add, with the offset in
    /// `bytes` just past the newline of the oversized line it stands in for.
    fn observe(&mut self, bytes: &[u8]) -> Vec<(usize, Vec<u8>)> {
        let mut stand_ins = Vec::new();
        let mut start = 0;
        while start < bytes.len() {
            let rest = &bytes[start..];
            let Some(at) = rest.iter().position(|b| *b == b'\n') else {
                self.line_bytes = self.line_bytes.saturating_add(rest.len());
                self.scan.feed(rest);
                break;
            };
            self.line_bytes = self.line_bytes.saturating_add(at + 1);
            self.scan.feed(&rest[..at]);
            start += at + 1;
            let line_bytes = std::mem::take(&mut self.line_bytes);
            let scan = std::mem::take(&mut self.scan);
            if line_bytes > self.limit {
                tracing::warn!(
                    bytes = line_bytes,
                    limit = self.limit,
                    "a client message is over the size limit; it is answered with an error"
                );
                if let Some(line) = scan.stand_in(line_bytes, self.limit) {
                    stand_ins.push((start, line));
                }
            }
        }
        stand_ins
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for OversizeGuard<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.queued_out < this.queued.len() {
            let n = buf.remaining().min(this.queued.len() - this.queued_out);
            buf.put_slice(&this.queued[this.queued_out..this.queued_out + n]);
            this.queued_out += n;
            if this.queued_out == this.queued.len() {
                this.queued.clear();
                this.queued_out = 0;
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let stand_ins = this.observe(&buf.filled()[before..]);
        let Some((first, _)) = stand_ins.first() else {
            return Poll::Ready(Ok(()));
        };
        // What is handed out now ends at the first oversized line's newline; its stand-in
        // and everything read after it wait in `queued`, stand-ins spliced in place.
        let first = before + first;
        let mut from = first;
        for (at, line) in &stand_ins {
            let at = before + at;
            this.queued.extend_from_slice(&buf.filled()[from..at]);
            this.queued.extend_from_slice(line);
            from = at;
        }
        this.queued.extend_from_slice(&buf.filled()[from..]);
        buf.set_filled(first);
        Poll::Ready(Ok(()))
    }
}

/// The longest `id`, `method` or `params.name` [`HeadScan`] keeps, in bytes as written.
const MAX_CAPTURE: usize = 512;

/// Where [`HeadScan`] is within the object it follows (the request, or its `params`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Pos {
    /// Before the request's opening brace.
    #[default]
    Start,
    /// Where a key or the closing brace comes.
    Key,
    /// After a key, before its colon.
    Colon,
    /// After the colon, before the value.
    Value,
    /// After a value, before a comma or the closing brace.
    AfterValue,
    /// Past the request, or the line is not a JSON object: nothing more to read.
    Done,
}

/// Which member's value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Id,
    Method,
    Params,
    Name,
    Other,
}

/// Reads a request's top-level `id` and `method` and its `params.name` from a line fed in
/// pieces, wherever they are in it, without keeping the line: a byte-at-a-time walk that
/// follows strings, escapes and nesting, and looks closely only at the request object and
/// its `params` object. Keys are compared as written (a key spelt with `\u` escapes is not
/// recognised); the first of duplicate keys counts. Values longer than 512 bytes are not
/// kept.
#[derive(Debug, Default)]
struct HeadScan {
    /// Nesting depth: 1 inside the request object, 2 inside one of its values, …
    depth: u32,
    /// Whether depth 2 is the `params` object.
    in_params: bool,
    pos: Pos,
    /// `pos` of the request object, kept while inside `params`.
    outer_pos: Pos,
    in_string: bool,
    escaped: bool,
    /// Inside a number, `true`, `false` or `null`.
    in_scalar: bool,
    /// The key being read (depth 1, or 2 in `params`), without its quotes.
    key: Vec<u8>,
    reading_key: bool,
    field: Option<Field>,
    capture: Vec<u8>,
    capturing: bool,
    id: Option<Vec<u8>>,
    method: Option<Vec<u8>>,
    name: Option<Vec<u8>>,
}

impl HeadScan {
    fn feed(&mut self, bytes: &[u8]) {
        if self.pos == Pos::Done {
            return;
        }
        for &b in bytes {
            self.byte(b);
        }
    }

    /// Whether the walk is at a depth it looks at closely.
    fn watched(&self) -> bool {
        self.depth == 1 || (self.depth == 2 && self.in_params)
    }

    fn keep(&mut self, b: u8) {
        if self.capture.len() < MAX_CAPTURE + 1 {
            self.capture.push(b);
        }
    }

    fn end_capture(&mut self) {
        self.capturing = false;
        let value = std::mem::take(&mut self.capture);
        if value.len() > MAX_CAPTURE {
            return;
        }
        let slot = match self.field {
            Some(Field::Id) => &mut self.id,
            Some(Field::Method) => &mut self.method,
            Some(Field::Name) => &mut self.name,
            _ => return,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if self.capturing {
                self.keep(b);
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.reading_key {
                    self.reading_key = false;
                    self.pos = Pos::Colon;
                } else if self.capturing {
                    self.end_capture();
                }
                return;
            }
            if self.reading_key && self.key.len() <= 16 {
                self.key.push(b);
            }
            return;
        }
        if self.in_scalar {
            if !(b.is_ascii_whitespace() || matches!(b, b',' | b'}' | b']')) {
                if self.capturing {
                    self.keep(b);
                }
                return;
            }
            self.in_scalar = false;
            if self.capturing {
                self.end_capture();
            }
        }
        if b.is_ascii_whitespace() {
            return;
        }
        if self.depth == 0 {
            self.pos = if b == b'{' && self.pos == Pos::Start {
                self.depth = 1;
                Pos::Key
            } else {
                Pos::Done
            };
            return;
        }
        if !self.watched() {
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.watched() {
                        self.pos = Pos::AfterValue;
                    }
                }
                _ => {}
            }
            return;
        }
        match (self.pos, b) {
            (Pos::Key, b'"') => {
                self.in_string = true;
                self.reading_key = true;
                self.key.clear();
            }
            (Pos::Key | Pos::AfterValue, b'}') => self.close_object(),
            (Pos::Colon, b':') => {
                self.pos = Pos::Value;
                self.field = Some(match (self.depth, self.key.as_slice()) {
                    (1, b"id") => Field::Id,
                    (1, b"method") => Field::Method,
                    (1, b"params") => Field::Params,
                    (2, b"name") => Field::Name,
                    _ => Field::Other,
                });
            }
            (Pos::Value, b'{' | b'[') => {
                self.depth += 1;
                if b == b'{' && self.depth == 2 && self.field == Some(Field::Params) {
                    self.in_params = true;
                    self.outer_pos = Pos::AfterValue;
                    self.pos = Pos::Key;
                } else {
                    self.pos = Pos::AfterValue;
                }
            }
            (Pos::Value, b'"') => {
                self.in_string = true;
                self.pos = Pos::AfterValue;
                if matches!(self.field, Some(Field::Id | Field::Method | Field::Name)) {
                    self.capturing = true;
                    self.keep(b);
                }
            }
            (Pos::Value, _) => {
                self.pos = Pos::AfterValue;
                self.in_scalar = true;
                if self.field == Some(Field::Id) {
                    self.capturing = true;
                    self.keep(b);
                }
            }
            (Pos::AfterValue, b',') => self.pos = Pos::Key,
            _ => self.pos = Pos::Done,
        }
    }

    fn close_object(&mut self) {
        self.depth -= 1;
        if self.depth == 1 && self.in_params {
            self.in_params = false;
            self.pos = self.outer_pos;
        } else {
            self.pos = Pos::Done;
        }
    }

    /// The request to hand rmcp in place of a dropped line of `bytes` bytes: `None` when no
    /// usable `id` was read (a string or an integer).
    fn stand_in(self, bytes: usize, limit: usize) -> Option<Vec<u8>> {
        use serde_json::{Value as Json, json};
        let as_json =
            |raw: Option<Vec<u8>>| raw.and_then(|r| serde_json::from_slice::<Json>(&r).ok());
        let id = as_json(self.id).filter(|id| id.is_string() || id.is_i64() || id.is_u64())?;
        let mut params = json!({ "bytes": bytes, "limit": limit });
        for (key, value) in [
            ("method", as_json(self.method)),
            ("tool", as_json(self.name)),
        ] {
            if let (Some(Json::String(text)), Json::Object(map)) = (value, &mut params) {
                map.insert(key.to_owned(), Json::String(text));
            }
        }
        let request =
            json!({ "jsonrpc": "2.0", "id": id, "method": OVERSIZED_METHOD, "params": params });
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        Some(line)
    }
}

#[cfg(test)]
mod tests;
