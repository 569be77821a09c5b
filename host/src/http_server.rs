//! The accept loop both HTTP servers share (`serve --listen` and `toolward console`): at most
//! a number of connections open at once, each given a time to send every request's head,
//! failed `accept`s retried with a growing wait, and a graceful end on stop.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// First wait after a failed `accept`: 10 ms. Out of descriptors, `accept` fails at once
/// for as long as the condition lasts; retrying without a wait spins a core.
pub const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);

/// Longest wait between two `accept` attempts while they fail: 1 s. The wait doubles from
/// [`ACCEPT_BACKOFF_FIRST`]; a connection that frees a descriptor is taken within this.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How many connections, and how long for a request's head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcceptLimits {
    /// Connections open at once; past it new ones wait to be accepted.
    pub(crate) max_connections: usize,
    /// Time a client has to send a request's head; past it the connection is closed.
    pub(crate) header_read_timeout: Duration,
    /// The setting that raises `max_connections`, named in the warnings
    /// (`listen.max_connections`).
    pub(crate) setting: &'static str,
    /// Largest request head read, in bytes; `None`: hyper's default (about 400 KB).
    pub(crate) max_head_bytes: Option<usize>,
}

/// Waits between failed `accept`s, doubling from [`ACCEPT_BACKOFF_FIRST`] to
/// [`ACCEPT_BACKOFF_MAX`]; warns once when a run of failures starts and once when it ends.
#[derive(Debug, Default)]
struct AcceptBackoff {
    failures: u64,
    since: Option<Instant>,
    wait: Duration,
}

impl AcceptBackoff {
    /// How long to wait after `error` before the next `accept`.
    fn failed(&mut self, error: &std::io::Error, limits: &AcceptLimits) -> Duration {
        if self.failures == 0 {
            let out_of_descriptors = matches!(
                error.raw_os_error(),
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
            );
            let hint = if out_of_descriptors {
                format!(
                    ": out of file descriptors or memory; lower `{}` (now {}) or raise the process's descriptor limit (`ulimit -n`)",
                    limits.setting, limits.max_connections
                )
            } else {
                String::new()
            };
            tracing::warn!(
                "accepting a connection failed: {error}{hint}; retrying with waits of up to {} ms, quietly until it succeeds",
                ACCEPT_BACKOFF_MAX.as_millis()
            );
            self.since = Some(Instant::now());
            self.wait = ACCEPT_BACKOFF_FIRST;
        }
        self.failures = self.failures.saturating_add(1);
        let wait = self.wait;
        self.wait = (self.wait * 2).min(ACCEPT_BACKOFF_MAX);
        wait
    }

    fn succeeded(&mut self) {
        if self.failures > 0 {
            let millis = self.since.map_or(0, |since| since.elapsed().as_millis());
            tracing::warn!(
                "accepting connections again, after {} failed attempts over {millis} ms",
                self.failures
            );
            *self = AcceptBackoff::default();
        }
    }
}

/// Accepts connections on `listener` while fewer than `limits.max_connections` are open,
/// serving each request with `handle` over HTTP/1.1, until `stop`; then each open connection
/// ends gracefully (the request in flight is answered).
pub(crate) async fn accept_loop<H, F, B>(
    listener: TcpListener,
    limits: AcceptLimits,
    handle: H,
    stop: CancellationToken,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let mut backoff = AcceptBackoff::default();
    let mut full = false;
    loop {
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                full = false;
                slot
            }
            Err(_) => {
                if !full {
                    tracing::warn!(
                        "{} connections are open, the limit (`{}`): new connections wait until one closes",
                        limits.max_connections,
                        limits.setting
                    );
                    full = true;
                }
                tokio::select! {
                    slot = Arc::clone(&slots).acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => return,
                    },
                    () = stop.cancelled() => return,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.succeeded();
                    accepted
                }
                Err(error) => {
                    let wait = backoff.failed(&error, &limits);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.cancelled() => return,
                    }
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let handle = handle.clone();
        let connection_stop = stop.clone();
        tokio::spawn(async move {
            // Held until the connection ends: one slot under `max_connections`.
            let _slot = slot;
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let answer = handle(request);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            if let Some(bytes) = limits.max_head_bytes {
                builder.max_buf_size(bytes);
            }
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(error) = served {
                        tracing::debug!("connection from {peer} ended: {error}");
                    }
                }
                () = connection_stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
}
