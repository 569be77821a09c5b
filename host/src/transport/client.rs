//! The JSON-RPC client's side of a connection: the requests in flight and their replies, the
//! state the tasks share, and cancellation.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use super::errors::tail;
use super::incoming::LogBudget;
use super::lifecycle::with_request_meta;
use super::{FailureReason, STDERR_IN_ERROR_BYTES, STDERR_TAIL_BYTES, TransportError};

/// A line to the server, or the order to close its standard input.
#[derive(Debug)]
pub(super) enum Outgoing {
    Line(Vec<u8>),
    Close,
}

/// What a request waits for.
#[derive(Debug)]
pub(super) enum Payload {
    /// The decoded `result`.
    Decoded(Value),
    /// The exact bytes of `result`.
    Raw(Vec<u8>),
}

pub(super) type ReplySender = oneshot::Sender<Result<Payload, TransportError>>;

/// A request waiting for its answer.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) method: &'static str,
    pub(super) raw: bool,
    pub(super) progress: Option<mpsc::UnboundedSender<Value>>,
    pub(super) reply: ReplySender,
}

/// The state the reader, writer, stderr and supervisor tasks (over HTTP: the dispatcher,
/// exchange and supervisor tasks) share with the handles.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) server: String,
    pub(super) pending: Mutex<HashMap<u64, Pending>>,
    pub(super) failure: Mutex<Option<FailureReason>>,
    /// How many `notifications/tools/list_changed` the server has sent.
    pub(super) list_changed: watch::Sender<u64>,
    pub(super) stderr: Mutex<VecDeque<u8>>,
    pub(super) outgoing: mpsc::UnboundedSender<Outgoing>,
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) next_id: AtomicU64,
    /// The `_meta` members every request carries, once `server/discover` chose the
    /// 2026-07-28 revision; unset for a server that spoke `initialize`.
    pub(super) request_meta: std::sync::OnceLock<Map<String, Value>>,
    /// How many of the server's `notifications/message` this second were logged.
    pub(super) log_budget: Mutex<LogBudget>,
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its data consistent, so a panic elsewhere does not
    // make it unusable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(super) fn new(
        server: &str,
        outgoing: mpsc::UnboundedSender<Outgoing>,
        shutdown: watch::Sender<bool>,
    ) -> Shared {
        Shared {
            server: server.to_owned(),
            pending: Mutex::new(HashMap::new()),
            failure: Mutex::new(None),
            list_changed: watch::Sender::new(0),
            stderr: Mutex::new(VecDeque::new()),
            outgoing,
            shutdown,
            next_id: AtomicU64::new(1),
            request_meta: std::sync::OnceLock::new(),
            log_budget: Mutex::new(LogBudget::new(Instant::now())),
        }
    }

    pub(super) fn stderr_tail(&self) -> String {
        let ring = lock(&self.stderr);
        let (front, back) = ring.as_slices();
        let mut bytes = Vec::with_capacity(ring.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub(super) fn push_stderr(&self, bytes: &[u8]) {
        let mut ring = lock(&self.stderr);
        let keep = bytes
            .get(bytes.len().saturating_sub(STDERR_TAIL_BYTES)..)
            .unwrap_or_default();
        ring.extend(keep);
        let excess = ring.len().saturating_sub(STDERR_TAIL_BYTES);
        ring.drain(..excess);
    }

    pub(super) fn failure(&self) -> Option<FailureReason> {
        lock(&self.failure).clone()
    }

    pub(super) fn failed_error(&self, reason: FailureReason) -> TransportError {
        TransportError::Failed {
            server: self.server.clone(),
            reason,
            stderr: tail(&self.stderr_tail(), STDERR_IN_ERROR_BYTES).to_owned(),
        }
    }

    /// Marks the server failed (the first reason wins), fails every waiting request, and
    /// starts ending its processes.
    pub(super) fn fail(&self, reason: FailureReason) {
        let first = {
            let mut failure = lock(&self.failure);
            if failure.is_none() {
                *failure = Some(reason.clone());
                true
            } else {
                false
            }
        };
        if first {
            if reason != FailureReason::Closed {
                tracing::warn!(server = %self.server, "server `{}` failed: {reason}", self.server);
            }
            let waiting: Vec<Pending> = lock(&self.pending)
                .drain()
                .map(|(_, pending)| pending)
                .collect();
            for pending in waiting {
                let _ = pending.reply.send(Err(self.failed_error(reason.clone())));
            }
        }
        self.shutdown.send_replace(true);
    }

    /// Whether request `id` still waits for its answer.
    pub(super) fn is_waiting(&self, id: u64) -> bool {
        lock(&self.pending).contains_key(&id)
    }

    /// Ends request `id` with `error`, if it still waits.
    pub(super) fn refuse(&self, id: u64, error: TransportError) {
        if let Some(pending) = lock(&self.pending).remove(&id) {
            let _ = pending.reply.send(Err(error));
        }
    }

    pub(super) fn send(&self, message: &Value) -> Result<(), TransportError> {
        let line =
            serde_json::to_vec(message).map_err(|error| TransportError::MalformedResponse {
                server: self.server.clone(),
                method: String::from("(encoding a message)"),
                detail: error.to_string(),
            })?;
        self.outgoing
            .send(Outgoing::Line(line))
            .map_err(|_| self.failed_error(self.failure().unwrap_or(FailureReason::Closed)))
    }

    pub(super) fn notify(&self, method: &str, params: Option<Value>) -> Result<(), TransportError> {
        let mut message = json!({ "jsonrpc": "2.0", "method": method });
        if let (Some(params), Value::Object(object)) = (params, &mut message) {
            object.insert(String::from("params"), params);
        }
        self.send(&message)
    }

    /// Sends request `id` and waits for its answer, for at most `timeout` when given. When the
    /// wait ends without an answer (timeout, or the future dropped) and `cancellable`, the
    /// server gets `notifications/cancelled`.
    pub(super) async fn request(
        self: &Arc<Self>,
        id: u64,
        method: &'static str,
        params: Value,
        options: RequestOptions,
    ) -> Result<Payload, TransportError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            // Checked under the table's lock: `fail` drains the table after setting the reason.
            if let Some(reason) = self.failure() {
                return Err(self.failed_error(reason));
            }
            pending.insert(
                id,
                Pending {
                    method,
                    raw: options.raw,
                    progress: options.progress,
                    reply,
                },
            );
        }
        let mut guard = PendingGuard {
            shared: Arc::clone(self),
            id,
            cancellable: options.cancellable,
            reason: "the client stopped waiting",
        };
        let params = with_request_meta(params, self.request_meta.get());
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        let answer = match options.timeout {
            Some(timeout) => match tokio::time::timeout(timeout, answer).await {
                Ok(answer) => answer,
                Err(_) => {
                    guard.reason = "timeout";
                    return Err(TransportError::RequestTimeout {
                        server: self.server.clone(),
                        method: method.to_owned(),
                        timeout_ms: timeout.as_millis(),
                    });
                }
            },
            None => answer.await,
        };
        match answer {
            Ok(answer) => answer,
            Err(_) => Err(self.failed_error(self.failure().unwrap_or(FailureReason::Closed))),
        }
    }
}

#[derive(Debug)]
pub(super) struct RequestOptions {
    pub(super) raw: bool,
    pub(super) progress: Option<mpsc::UnboundedSender<Value>>,
    pub(super) timeout: Option<Duration>,
    pub(super) cancellable: bool,
}

/// Removes a request from the table when its waiter goes away, and tells the server when it
/// was still unanswered (MCP specification, "Cancellation").
#[derive(Debug)]
struct PendingGuard {
    shared: Arc<Shared>,
    id: u64,
    cancellable: bool,
    reason: &'static str,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let unanswered = lock(&self.shared.pending).remove(&self.id).is_some();
        if unanswered && self.cancellable && self.shared.failure().is_none() {
            let _ = self.shared.notify(
                "notifications/cancelled",
                Some(json!({ "requestId": self.id, "reason": self.reason })),
            );
        }
    }
}

/// The running server's tasks; dropping the last reference starts closing it.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) shared: Arc<Shared>,
    pub(super) done: watch::Receiver<bool>,
    pub(super) pid: Option<u32>,
    /// How the server was started confined, as the launcher was asked (it refuses to start a
    /// server less confined): `None` for an unconfined or HTTP server.
    pub(super) confinement: Option<crate::confine::Confinement>,
}

impl Connection {
    pub(super) async fn close(&self) {
        self.shared.fail(FailureReason::Closed);
        let mut done = self.done.clone();
        let _ = done.wait_for(|done| *done).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.fail(FailureReason::Closed);
    }
}
