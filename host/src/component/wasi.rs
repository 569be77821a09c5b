//! WASI 0.2 for policy components, granting nothing.
//!
//! Components built by componentize-py (Python) or jco with componentize-js (JavaScript)
//! carry a language runtime that imports WASI 0.2 interfaces (`wasi:cli`, `wasi:clocks`,
//! `wasi:random`, `wasi:io`, `wasi:filesystem`, `wasi:sockets`). The host links
//! `wasmtime-wasi`'s synchronous WASI 0.2 implementation ([`wasmtime_wasi::p2`]) with a
//! context that grants nothing, and replaces what that context cannot lock down with its
//! own functions (`link`):
//!
//! | WASI interface | what the guest gets | how |
//! | --- | --- | --- |
//! | `wasi:cli/environment` | no variables, no arguments, no working folder | context left empty |
//! | `wasi:cli/stdin` | an empty stream (end of input at once) | context default |
//! | `wasi:cli/stdout`, `stderr` | captured into one buffer of [`MAX_OUTPUT_BYTES`], the rest counted and dropped | own stream |
//! | `wasi:cli/exit` | ends the guest call: the decision is a deny | `wasmtime-wasi` |
//! | `wasi:cli/terminal-*` | no terminal | context default |
//! | `wasi:clocks/wall-clock` | the call's `time-ms` (configure: 0) | own clock |
//! | `wasi:clocks/monotonic-clock` | stopped at 0; a wait that would end later traps | own clock and own `subscribe-*` |
//! | `wasi:random/*` | SHA-256 in counter mode, seeded by the call's arguments hash | own functions |
//! | `wasi:filesystem/*` | no preopened folder, so no file can be named | context left empty |
//! | `wasi:sockets/*` | TCP and UDP refused, every address refused, no name lookup | context settings |
//! | `wasi:io/*` | streams and polls over the above only | `wasmtime-wasi` |
//!
//! Why `wasmtime-wasi` rather than implementations of our own for every interface: its
//! context already refuses files (no preopens), sockets and name lookups, environment and
//! arguments, and its resource types are the ones every WASI component is built against;
//! what it cannot make deterministic (clocks, random) or bounded (output) is replaced
//! here, function by function. Its synchronous host functions run blocking ones through
//! `wasmtime_wasi::runtime::in_tokio`, which panics on a Tokio runtime thread: every
//! guest call of a component that imports WASI runs through `off_runtime`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

#[cfg(feature = "wasi")]
use sha2::{Digest, Sha256};
#[cfg(feature = "wasi")]
use wasmtime::component::{Linker, Resource, ResourceTable};
#[cfg(feature = "wasi")]
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
#[cfg(feature = "wasi")]
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamResult};
#[cfg(feature = "wasi")]
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

/// The WASI version range a component may import: `wasi:*@0.2.x`, any patch version
/// (wasmtime's linker matches `0.2.x` imports to the `0.2.12` it provides).
pub const WASI_VERSION_PREFIX: &str = "@0.2.";

/// Bytes of a guest's stdout and stderr kept, together, per instance: 64 KiB. Past it the
/// guest's writes still succeed and are counted, not kept, so printing cannot grow the
/// host's memory or make a guest fail.
pub const MAX_OUTPUT_BYTES: usize = 64 << 10;

/// Bytes of captured output appended to the deny reason of a decision whose guest failed
/// (trap, fuel, memory), so the audit record shows what it printed: 1 KiB.
pub const MAX_OUTPUT_IN_REASON: usize = 1 << 10;

/// Most bytes one `get-random-bytes` or `get-insecure-random-bytes` call may ask for: 1 MiB.
/// A larger request traps (a deny): a policy needs a few bytes of seed.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// Most WASI resources (streams, pollables, descriptors) one instance may hold at once.
pub const MAX_WASI_RESOURCES: usize = 1024;

/// The domain of the random generator's seed: changing it changes every random byte.
#[cfg(feature = "wasi")]
const RANDOM_DOMAIN: &[u8] = b"toolward wasi random 0.2 v1\0";

/// A guest call of a WASI component was stopped by the host: why, for the deny reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(pub String);

/// The WASI state of one instance of a component that imports WASI.
#[cfg(feature = "wasi")]
pub(crate) struct WasiState {
    ctx: WasiCtx,
    table: ResourceTable,
    now_ms: Arc<AtomicU64>,
    output: Arc<Mutex<Captured>>,
    secure: CounterRng,
    insecure: CounterRng,
}

#[cfg(feature = "wasi")]
impl WasiView for WasiState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

#[cfg(feature = "wasi")]
impl WasiState {
    /// A context that grants nothing: no preopens, no environment, no arguments, sockets
    /// and name lookup refused, stdin empty, output captured, clocks and random the host's
    /// deterministic ones (seeded for configure until [`WasiState::begin_call`]).
    pub(crate) fn locked_down() -> WasiState {
        let now_ms = Arc::new(AtomicU64::new(0));
        let output = Arc::new(Mutex::new(Captured::default()));
        let capture = CaptureStream(Arc::clone(&output));
        let ctx = WasiCtx::builder()
            .stdout(capture.clone())
            .stderr(capture)
            .wall_clock(CallClock(Arc::clone(&now_ms)))
            .monotonic_clock(StoppedClock)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_WASI_RESOURCES);
        WasiState {
            ctx,
            table,
            now_ms,
            output,
            secure: CounterRng::new(b"secure", b""),
            insecure: CounterRng::new(b"insecure", b""),
        }
    }

    /// Sets what the guest's clock and random generators give for the call about to run:
    /// the wall clock reads `time_ms`, and both generators restart from `seed` (the call's
    /// arguments hash).
    pub(crate) fn begin_call(&mut self, time_ms: u64, seed: &[u8]) {
        self.now_ms.store(time_ms, Ordering::Relaxed);
        self.secure = CounterRng::new(b"secure", seed);
        self.insecure = CounterRng::new(b"insecure", seed);
    }

    /// Whether the guest holds no WASI resource (stream, pollable, descriptor) now.
    pub(crate) fn holds_nothing(&self) -> bool {
        self.table.is_empty()
    }

    /// What the guest wrote to stdout and stderr, lossily decoded, and how many bytes past
    /// [`MAX_OUTPUT_BYTES`] were dropped.
    pub(crate) fn output(&self) -> GuestOutput {
        let captured = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        GuestOutput {
            text: String::from_utf8_lossy(&captured.kept).into_owned(),
            dropped_bytes: captured.dropped,
        }
    }
}

/// What a guest printed (stdout and stderr, interleaved as written).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GuestOutput {
    /// The first [`MAX_OUTPUT_BYTES`] bytes, as UTF-8 (invalid sequences replaced).
    pub text: String,
    /// Bytes written past the bound and dropped.
    pub dropped_bytes: u64,
}

impl GuestOutput {
    /// Whether the guest printed nothing.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.dropped_bytes == 0
    }

    /// The start of the output for a deny reason: at most [`MAX_OUTPUT_IN_REASON`] bytes
    /// (cut at a character boundary), and how much more there was.
    pub fn for_reason(&self) -> String {
        let mut end = self.text.len().min(MAX_OUTPUT_IN_REASON);
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let more = (self.text.len() - end) as u64 + self.dropped_bytes;
        let head = self.text.get(..end).unwrap_or_default();
        if more == 0 {
            format!("`{head}`")
        } else {
            format!("`{head}` (and {more} bytes more)")
        }
    }
}

/// Adds WASI 0.2 to `linker`, then replaces the functions the context cannot lock down:
/// `wasi:random/*` (deterministic) and the monotonic clock's `subscribe-*` (no real wait).
///
/// # Errors
/// What wasmtime says when a definition does not fit (a `wasmtime-wasi` upgrade that
/// renamed an interface).
#[cfg(feature = "wasi")]
pub(crate) fn link<T>(
    linker: &mut Linker<T>,
    wasi: fn(&mut T) -> &mut WasiState,
) -> wasmtime::Result<()>
where
    T: WasiView + Send + 'static,
{
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    linker.allow_shadowing(true);
    let version = "0.2.12";
    let mut random = linker.instance(&format!("wasi:random/random@{version}"))?;
    random.func_wrap("get-random-bytes", move |mut store, (len,): (u64,)| {
        Ok((wasi(store.data_mut()).secure.bytes(len)?,))
    })?;
    random.func_wrap("get-random-u64", move |mut store, (): ()| {
        Ok((wasi(store.data_mut()).secure.u64(),))
    })?;
    let mut insecure = linker.instance(&format!("wasi:random/insecure@{version}"))?;
    insecure.func_wrap(
        "get-insecure-random-bytes",
        move |mut store, (len,): (u64,)| Ok((wasi(store.data_mut()).insecure.bytes(len)?,)),
    )?;
    insecure.func_wrap("get-insecure-random-u64", move |mut store, (): ()| {
        Ok((wasi(store.data_mut()).insecure.u64(),))
    })?;
    let mut seed = linker.instance(&format!("wasi:random/insecure-seed@{version}"))?;
    seed.func_wrap("insecure-seed", move |mut store, (): ()| {
        let rng = &mut wasi(store.data_mut()).insecure;
        Ok(((rng.u64(), rng.u64()),))
    })?;
    let mut clock = linker.instance(&format!("wasi:clocks/monotonic-clock@{version}"))?;
    clock.func_wrap("subscribe-duration", move |mut store, (nanos,): (u64,)| {
        Ok((ready_or_stop(wasi(store.data_mut()), nanos)?,))
    })?;
    clock.func_wrap("subscribe-instant", move |mut store, (instant,): (u64,)| {
        // The clock stands at 0: an instant of 0 is now, any later one never comes.
        Ok((ready_or_stop(wasi(store.data_mut()), instant)?,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

/// A pollable that is ready at once for a wait of 0 ns (a non-blocking poll, as wasi-libc's
/// `poll` makes), or the trap that stops a guest that waits on a clock that does not run.
#[cfg(feature = "wasi")]
fn ready_or_stop(state: &mut WasiState, nanos: u64) -> wasmtime::Result<Resource<DynPollable>> {
    if nanos > 0 {
        return Err(wasmtime::Error::new(Stopped(format!(
            "waited {nanos} ns on the monotonic clock, which does not run in a policy (a policy cannot sleep or time out)"
        ))));
    }
    let ready = state.table.push(Ready)?;
    wasmtime_wasi::p2::subscribe(&mut state.table, ready)
}

/// A pollable that is always ready.
#[cfg(feature = "wasi")]
struct Ready;

#[wasmtime_wasi::async_trait]
#[cfg(feature = "wasi")]
impl Pollable for Ready {
    async fn ready(&mut self) {}
}

/// The wall clock of a policy: the call's `time-ms`.
#[cfg(feature = "wasi")]
struct CallClock(Arc<AtomicU64>);

#[cfg(feature = "wasi")]
impl HostWallClock for CallClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn now(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// The monotonic clock of a policy: stopped at 0.
#[cfg(feature = "wasi")]
struct StoppedClock;

#[cfg(feature = "wasi")]
impl HostMonotonicClock for StoppedClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

/// The output of one instance: the first [`MAX_OUTPUT_BYTES`] and a count of the rest.
#[derive(Default)]
#[cfg(feature = "wasi")]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

#[cfg(feature = "wasi")]
impl Captured {
    fn write(&mut self, bytes: &[u8]) {
        let room = MAX_OUTPUT_BYTES.saturating_sub(self.kept.len());
        let (kept, dropped) = bytes.split_at(room.min(bytes.len()));
        self.kept.extend_from_slice(kept);
        self.dropped = self.dropped.saturating_add(dropped.len() as u64);
    }
}

/// stdout and stderr of a policy instance: both write into its [`Captured`].
#[derive(Clone)]
#[cfg(feature = "wasi")]
struct CaptureStream(Arc<Mutex<Captured>>);

#[cfg(feature = "wasi")]
impl CaptureStream {
    fn write_all(&self, bytes: &[u8]) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write(bytes);
    }
}

#[cfg(feature = "wasi")]
impl IsTerminal for CaptureStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

#[cfg(feature = "wasi")]
impl StdoutStream for CaptureStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// How many bytes a guest may write in one `write` call (`check-write`'s permit): 1 MiB, so a
/// large write is taken whole rather than cut short (CPython wrote only the first 4 KiB of
/// one large `sys.stdout.write` when the permit was 4,096); what passes
/// [`MAX_OUTPUT_BYTES`] is counted and dropped as it arrives.
#[cfg(feature = "wasi")]
const WRITE_PERMIT_BYTES: usize = 1 << 20;

#[cfg(feature = "wasi")]
impl OutputStream for CaptureStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.write_all(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT_BYTES)
    }
}

#[wasmtime_wasi::async_trait]
#[cfg(feature = "wasi")]
impl Pollable for CaptureStream {
    async fn ready(&mut self) {}
}

#[cfg(feature = "wasi")]
impl tokio::io::AsyncWrite for CaptureStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.write_all(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// A deterministic generator: block `i` is SHA-256 over [`RANDOM_DOMAIN`], the stream's
/// name, the seed and `i` (big-endian), so a decision's random bytes are a function of its
/// arguments and an audit log replays.
#[cfg(feature = "wasi")]
struct CounterRng {
    key: [u8; 32],
    counter: u64,
    block: [u8; 32],
    used: usize,
}

#[cfg(feature = "wasi")]
impl CounterRng {
    fn new(stream: &[u8], seed: &[u8]) -> CounterRng {
        let mut hasher = Sha256::new();
        hasher.update(RANDOM_DOMAIN);
        hasher.update((stream.len() as u64).to_be_bytes());
        hasher.update(stream);
        hasher.update(seed);
        CounterRng {
            key: hasher.finalize().into(),
            counter: 0,
            block: [0; 32],
            used: 32,
        }
    }

    fn next_byte(&mut self) -> u8 {
        if self.used == self.block.len() {
            let mut hasher = Sha256::new();
            hasher.update(self.key);
            hasher.update(self.counter.to_be_bytes());
            self.block = hasher.finalize().into();
            self.counter = self.counter.wrapping_add(1);
            self.used = 0;
        }
        let byte = self.block.get(self.used).copied().unwrap_or_default();
        self.used += 1;
        byte
    }

    fn bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        if len > MAX_RANDOM_BYTES {
            return Err(wasmtime::Error::new(Stopped(format!(
                "asked for {len} random bytes in one call, more than the {MAX_RANDOM_BYTES} a policy may"
            ))));
        }
        Ok((0..len).map(|_| self.next_byte()).collect())
    }

    fn u64(&mut self) -> u64 {
        let mut bytes = [0u8; 8];
        for b in &mut bytes {
            *b = self.next_byte();
        }
        u64::from_be_bytes(bytes)
    }
}

/// Runs `f` where `wasmtime-wasi`'s synchronous host functions may block: on this thread
/// when it is not a Tokio runtime's, else on a scoped thread of its own (their
/// `in_tokio` calls `Handle::block_on`, which panics inside a runtime). Nothing in the
/// locked-down context ever waits, so the other thread only runs the guest call.
pub(crate) fn off_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// The WASI 0.2 interfaces the host provides (with [`WASI_VERSION_PREFIX`] versions); an
/// import of any other `wasi:` interface (`wasi:http`, for one) is refused at load.
pub const PROVIDED_INTERFACES: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/preopens",
    "wasi:filesystem/types",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:random/random",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
];

/// Whether `import` names a WASI 0.2 interface the host provides ([`PROVIDED_INTERFACES`],
/// version `0.2.x`).
#[must_use]
pub fn is_provided(import: &str) -> bool {
    // Without the `wasi` feature none is: a component that imports WASI is refused at load.
    cfg!(feature = "wasi")
        && import.split_once('@').is_some_and(|(interface, version)| {
        PROVIDED_INTERFACES.contains(&interface)
            && format!("@{version}").starts_with(WASI_VERSION_PREFIX)
    })
}

/// What a WASI import gives a policy, for `policy inspect`: `denied`, `deterministic`,
/// `captured`, `empty`, or `streams` (`wasi:io`, over the others only).
#[must_use]
pub fn grant_of(import: &str) -> &'static str {
    let interface = import.split('@').next().unwrap_or(import);
    match interface {
        "wasi:cli/environment" | "wasi:cli/stdin" | "wasi:filesystem/preopens" => "empty",
        "wasi:cli/stdout" | "wasi:cli/stderr" => "captured",
        "wasi:cli/exit" => "ends the call (a deny)",
        "wasi:clocks/wall-clock" => "deterministic (the call's time-ms)",
        "wasi:clocks/monotonic-clock" => "deterministic (stopped; a wait traps)",
        "wasi:random/random" | "wasi:random/insecure" | "wasi:random/insecure-seed" => {
            "deterministic (seeded by the arguments hash)"
        }
        "wasi:io/error" | "wasi:io/poll" | "wasi:io/streams" => {
            "streams (over the other grants only)"
        }
        "wasi:cli/terminal-input"
        | "wasi:cli/terminal-output"
        | "wasi:cli/terminal-stdin"
        | "wasi:cli/terminal-stdout"
        | "wasi:cli/terminal-stderr" => "empty (no terminal)",
        _ => "denied",
    }
}

/// Without the `wasi` feature no component imports WASI ([`is_provided`] is false), so no
/// instance has a WASI state: this stands in for the type where the engine names it.
#[cfg(not(feature = "wasi"))]
pub(crate) struct WasiState;

#[cfg(not(feature = "wasi"))]
impl WasiState {
    pub(crate) fn locked_down() -> WasiState {
        WasiState
    }

    pub(crate) fn begin_call(&mut self, _time_ms: u64, _seed: &[u8]) {}

    pub(crate) fn holds_nothing(&self) -> bool {
        true
    }

    pub(crate) fn output(&self) -> GuestOutput {
        GuestOutput::default()
    }
}

/// Without the `wasi` feature: refuses, since nothing may import WASI.
#[cfg(not(feature = "wasi"))]
pub(crate) fn link<T>(
    _linker: &mut wasmtime::component::Linker<T>,
    _wasi: fn(&mut T) -> &mut WasiState,
) -> wasmtime::Result<()> {
    Err(wasmtime::Error::msg(
        "WASI needs the `wasi` feature of the toolward crate, which this build leaves out",
    ))
}

#[cfg(all(test, feature = "wasi"))]
mod tests {
    use super::*;

    #[test]
    fn random_streams_are_a_function_of_the_seed_and_differ_by_stream_and_seed() {
        let a = CounterRng::new(b"secure", b"seed-a").bytes(100).unwrap();
        let again = CounterRng::new(b"secure", b"seed-a").bytes(100).unwrap();
        let other_seed = CounterRng::new(b"secure", b"seed-b").bytes(100).unwrap();
        let other_stream = CounterRng::new(b"insecure", b"seed-a").bytes(100).unwrap();
        assert_eq!(a, again);
        assert_ne!(a, other_seed);
        assert_ne!(a, other_stream);
        assert!(
            CounterRng::new(b"secure", b"")
                .bytes(MAX_RANDOM_BYTES + 1)
                .is_err()
        );
    }

    #[test]
    fn output_past_the_bound_is_counted_not_kept() {
        let mut captured = Captured::default();
        captured.write(&vec![b'x'; MAX_OUTPUT_BYTES - 1]);
        captured.write(b"abc");
        assert_eq!(captured.kept.len(), MAX_OUTPUT_BYTES);
        assert_eq!(captured.dropped, 2);
    }
}
