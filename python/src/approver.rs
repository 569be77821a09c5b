//! The approver that asks a Python callable about a held call: [`HeldCall`] is what it is
//! given, [`Approve`] and [`Deny`] what it returns, [`PyApprover`] the `toolward::Approver`
//! around it.
//!
//! The callable is sync or async. Either is called on a thread of toolward's blocking pool,
//! never on a worker of its runtime, so a sync one that waits for a person holds no other
//! call up, and the call path stops waiting for it at the approval timeout or when the call
//! is cancelled: the call is then refused (or dropped) and what the callable answers later
//! is ignored, since nothing waits for it any more (Python cannot interrupt it). An async
//! one runs on the asyncio event loop the call was awaited on, and is cancelled when the call
//! path stops waiting for it. Anything other than an `Approve` or a `Deny` (an exception,
//! another value) is a deny, answered by nobody, with the reason: an approver that fails never
//! lets a call through.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3_async_runtimes::TaskLocals;
use tokio::sync::oneshot;
use toolward::{Answer, AnsweredBy, ApprovalAnswer, ApprovalRequest, Approver, Channel};

/// A held call, as the approver is asked about it. Every field but `reason` comes from the
/// model or a server: escape it before showing it in a terminal.
#[pyclass(frozen, get_all, module = "toolward._native")]
#[derive(Debug)]
pub struct HeldCall {
    /// The call's id (a ULID).
    call_id: String,
    /// The tool's name as the model sees it (`server__tool`).
    tool: String,
    /// The server's name in the operator's config.
    server: String,
    /// The tool's name on its server.
    upstream_tool: String,
    /// The operator's effect (`read-only`, `local-change`, `remote-change`, `destructive`).
    effect: String,
    /// The final arguments (fixed values set), canonical JSON text.
    arguments_json: String,
    /// The policy's reason for holding the call.
    reason: String,
    /// Who made the call.
    principal: String,
    /// The session the call belongs to.
    session: String,
}

#[pymethods]
impl HeldCall {
    /// The final arguments, as Python values (`json.loads` of `arguments_json`).
    #[getter]
    fn arguments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?
            .call_method1("loads", (PyString::new(py, &self.arguments_json),))
    }

    fn __repr__(&self) -> String {
        format!(
            "HeldCall(tool={:?}, server={:?}, arguments={:?})",
            self.tool, self.server, self.arguments_json
        )
    }
}

impl From<ApprovalRequest> for HeldCall {
    fn from(request: ApprovalRequest) -> Self {
        HeldCall {
            call_id: request.call_id,
            tool: request.exposed_tool,
            server: request.server,
            upstream_tool: request.tool,
            effect: request.effect,
            arguments_json: request.arguments,
            reason: request.reason,
            principal: request.principal,
            session: request.session,
        }
    }
}

/// The approver's answer: the call may go ahead, once. `answerer` names who approved it
/// (recorded as `answered_by.answerer` in the audit record, channel `embedder`).
#[pyclass(frozen, get_all, module = "toolward._native")]
#[derive(Debug, Clone)]
pub struct Approve {
    answerer: Option<String>,
}

#[pymethods]
impl Approve {
    #[new]
    #[pyo3(signature = (answerer = None))]
    fn new(answerer: Option<String>) -> Self {
        Approve { answerer }
    }

    fn __repr__(&self) -> String {
        format!("Approve(answerer={:?})", self.answerer)
    }
}

/// The approver's answer: the call is refused with `reason` (its control characters escaped:
/// it may quote what the model sent). `answerer` names who denied it.
#[pyclass(frozen, get_all, module = "toolward._native")]
#[derive(Debug, Clone)]
pub struct Deny {
    reason: String,
    answerer: Option<String>,
}

#[pymethods]
impl Deny {
    #[new]
    #[pyo3(signature = (reason, answerer = None))]
    fn new(reason: String, answerer: Option<String>) -> Self {
        Deny { reason, answerer }
    }

    fn __repr__(&self) -> String {
        format!(
            "Deny(reason={:?}, answerer={:?})",
            self.reason, self.answerer
        )
    }
}

/// Asks `callable` about each held call of one call awaited on the event loop of `locals`.
#[derive(Debug)]
pub struct PyApprover {
    callable: Py<PyAny>,
    locals: TaskLocals,
}

impl PyApprover {
    /// An approver asking `callable`, running an async one on the event loop of `locals`.
    pub fn new(callable: Py<PyAny>, locals: TaskLocals) -> Self {
        PyApprover { callable, locals }
    }

    /// The callable's answer, or why there is none (the callable raised, or returned
    /// something else than an `Approve` or a `Deny`).
    async fn answer(&self, request: ApprovalRequest) -> Result<Answer, String> {
        // Called on the blocking pool: a sync callable may wait for a person, and a worker of
        // the runtime it blocked would hold up other calls and every timer, the approval
        // timeout included. Dropping this future (the timeout, a cancelled call) stops the
        // wait, not the callable: its late answer goes nowhere.
        let callable = Python::attach(|py| self.callable.clone_ref(py));
        let returned = tokio::task::spawn_blocking(move || {
            Python::attach(|py| -> PyResult<Py<PyAny>> {
                let held = Bound::new(py, HeldCall::from(request))?;
                Ok(callable.bind(py).call1((held,))?.unbind())
            })
        })
        .await
        .map_err(|e| format!("the approver's thread failed: {e}"))?
        .map_err(|e| raised(&e))?;
        let asked = Python::attach(|py| -> PyResult<Asked> {
            let value = returned.bind(py);
            if value.hasattr("__await__")? {
                Ok(Asked::Later(self.schedule(value.clone())?))
            } else {
                Ok(Asked::Now(returned.clone_ref(py)))
            }
        })
        .map_err(|e| raised(&e))?;
        let value = match asked {
            Asked::Now(value) => value,
            Asked::Later(mut scheduled) => match (&mut scheduled.answer).await {
                Ok(answer) => answer.map_err(|e| raised(&e))?,
                Err(_) => return Err("the approver's event loop closed before it answered".into()),
            },
        };
        Python::attach(|py| {
            let value = value.bind(py);
            if let Ok(approve) = value.cast::<Approve>() {
                let approve = approve.get();
                return Ok(Answer {
                    verdict: ApprovalAnswer::Approved,
                    by: embedder(approve.answerer.clone()),
                });
            }
            if let Ok(deny) = value.cast::<Deny>() {
                let deny = deny.get();
                return Ok(Answer {
                    verdict: ApprovalAnswer::Denied(visible(&deny.reason)),
                    by: embedder(deny.answerer.clone()),
                });
            }
            let shown = value
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| String::from("a value without a repr"));
            Err(format!(
                "the approver returned {}, not toolward.Approve or toolward.Deny",
                visible(&shown)
            ))
        })
    }

    /// Runs the awaitable `value` on the event loop of the call, in the caller's context
    /// (its `contextvars`), as a task the returned value cancels when dropped.
    fn schedule(&self, value: Bound<'_, PyAny>) -> PyResult<Scheduled> {
        let py = value.py();
        let asyncio = py.import("asyncio")?;
        // `wait_for` without a timeout: any awaitable as a coroutine, as
        // `run_coroutine_threadsafe` takes.
        let coroutine = asyncio.call_method1("wait_for", (value, py.None()))?;
        let run = asyncio.getattr("run_coroutine_threadsafe")?;
        let task = self
            .locals
            .context(py)
            .call_method1("run", (run, coroutine, self.locals.event_loop(py)))?;
        let (sender, answer) = oneshot::channel();
        task.call_method1(
            "add_done_callback",
            (Done {
                sender: Mutex::new(Some(sender)),
            },),
        )?;
        Ok(Scheduled {
            task: task.unbind(),
            answer,
        })
    }
}

/// The callable's first return: an answer, or an awaitable scheduled on the event loop.
enum Asked {
    Now(Py<PyAny>),
    Later(Scheduled),
}

/// An async approver's task on its event loop (a `concurrent.futures.Future`), and where its
/// result arrives. Dropped before the result (the approval timed out, or the call was
/// cancelled), it cancels the task: the approver's coroutine gets `CancelledError` and can
/// withdraw its question.
struct Scheduled {
    task: Py<PyAny>,
    answer: oneshot::Receiver<PyResult<Py<PyAny>>>,
}

impl Drop for Scheduled {
    fn drop(&mut self) {
        Python::attach(|py| {
            // A no-op once the task is done.
            let _ = self.task.bind(py).call_method0("cancel");
        });
    }
}

/// The task's done callback: sends its result (or the exception it raised) to the waiting
/// [`Scheduled`]. Called on the event loop's thread.
#[pyclass]
struct Done {
    sender: Mutex<Option<oneshot::Sender<PyResult<Py<PyAny>>>>>,
}

#[pymethods]
impl Done {
    fn __call__(&self, task: &Bound<'_, PyAny>) {
        let result = task.call_method0("result").map(Bound::unbind);
        let sender = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(result);
        }
    }
}

/// An answer given through the embedder by `answerer`.
fn embedder(answerer: Option<String>) -> AnsweredBy {
    AnsweredBy {
        answerer,
        ..AnsweredBy::nobody(Channel::Embedder)
    }
}

/// Why there is no answer when the callable raised `error`.
fn raised(error: &PyErr) -> String {
    visible(&format!("the approver raised {error}"))
}

/// The most of an approver's own text kept in a refusal and its audit record (a deny's
/// reason, what it raised, the repr of what it returned), in characters: what a person
/// reads, not a payload.
const MAX_REASON_CHARS: usize = 1000;

/// `text` cut at [`MAX_REASON_CHARS`] (then `…`) and escaped by toolward's one rule for
/// foreign text ([`toolward::escape`]: controls, bidirectional and hidden characters as
/// `\u{XXXX}`): it ends up in a refusal's text and the audit record, read in terminals.
fn visible(text: &str) -> String {
    match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((end, _)) => format!("{}…", toolward::escape(&text[..end])),
        None => toolward::escape(text),
    }
}

impl Approver for PyApprover {
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            self.answer(request).await.unwrap_or_else(|reason| Answer {
                verdict: ApprovalAnswer::Denied(reason),
                by: AnsweredBy::nobody(Channel::Embedder),
            })
        })
    }

    fn channel(&self) -> Channel {
        Channel::Embedder
    }
}
