//! A started toolward as Python holds it: its tools, its calls (asyncio coroutines), the
//! audit records it makes, and its shutdown.

use std::sync::{Arc, Mutex, PoisonError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast::{self, error::TryRecvError};
use toolward::{Approver, AuditRecord, DenyAll, RegisteredTool};

use crate::approver::PyApprover;

/// A started toolward, shared: every coroutine holds it while it runs, so a call in flight
/// outlives a dropped Python object.
#[pyclass(frozen, module = "toolward._native")]
#[derive(Debug)]
pub struct Toolward {
    inner: Arc<toolward::Toolward>,
    /// The audit records since the start, as the audit store streams them (every store
    /// toolward brings does: in memory, the state folder's log, PostgreSQL).
    records: Mutex<Option<broadcast::Receiver<AuditRecord>>>,
}

impl Toolward {
    /// Holds `inner`, following its audit records from now on.
    pub fn new(inner: Arc<toolward::Toolward>) -> Self {
        let records = Mutex::new(inner.audit_events());
        Toolward { inner, records }
    }
}

#[pymethods]
impl Toolward {
    /// The registered tools, as JSON text: a list of objects, each an MCP `Tool` (`name`,
    /// `description`, `inputSchema`, and `outputSchema` and `annotations` when there are
    /// any) under `tool`, with the tool's `server`, `upstream_name` and `effect`.
    fn tools_json(&self) -> String {
        let tools: Vec<Value> = self
            .inner
            .tools()
            .map(|tool| {
                json!({
                    "tool": mcp_tool(tool),
                    "server": tool.server,
                    "upstream_name": tool.upstream_name,
                    "effect": tool.effect.to_string(),
                })
            })
            .collect();
        Value::Array(tools).to_string()
    }

    /// The load report, as `toolward serve` prints it.
    fn report(&self) -> String {
        self.inner.report().render()
    }

    /// One call through toolward's whole path: a coroutine returning `(outcome, call_id,
    /// server, result)`, the outcome's name (`allowed`, `approved`, `refused`, `denied`,
    /// `not-approved`), the server of the tool (`None` for a name no server has) and the
    /// MCP `CallToolResult` as JSON text. Held calls ask `approver` (a callable), or are
    /// denied without one. Cancelling the coroutine cancels the call.
    #[pyo3(signature = (name, arguments, approver))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        name: String,
        arguments: Option<&str>,
        approver: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = match arguments {
            None => None,
            Some(text) => match serde_json::from_str(text) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => {
                    return Err(PyValueError::new_err(format!(
                        "the arguments of tool `{}`: not a JSON object",
                        name.escape_debug()
                    )));
                }
                Err(e) => {
                    return Err(PyValueError::new_err(format!(
                        "the arguments of tool `{}`: not JSON: {e}",
                        name.escape_debug()
                    )));
                }
            },
        };
        let approver: Arc<dyn Approver> = match approver {
            Some(callable) => Arc::new(PyApprover::new(
                callable,
                pyo3_async_runtimes::tokio::get_current_locals(py)?,
            )),
            None => Arc::new(DenyAll),
        };
        let inner = Arc::clone(&self.inner);
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let server = inner
                .tools()
                .find(|tool| tool.exposed_name == name)
                .map(|tool| tool.server.clone());
            let ended = inner.call(&name, arguments, approver).await;
            Ok((
                ended.outcome.as_str(),
                ended.call_id,
                server,
                ended.result.to_string(),
            ))
        })
    }

    /// The audit records this process made since the start or the last call of this, as JSON
    /// text each (the audit log's lines), in `seq` order. Records missed by falling more than
    /// `AUDIT_EVENTS_CAPACITY` behind are left out.
    fn audit_records(&self) -> Vec<String> {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(receiver) = records.as_mut() else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        loop {
            match receiver.try_recv() {
                Ok(record) => lines.push(serde_json::to_string(&record).unwrap_or_default()),
                Err(TryRecvError::Lagged(_)) => continue,
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        lines.retain(|line| !line.is_empty());
        lines
    }

    /// Closes every server: a coroutine. Calls made after it fail as calls to a server that
    /// is down.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = Arc::clone(&self.inner);
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            inner.shutdown().await;
            Ok(())
        })
    }
}

/// A registered tool as an MCP `Tool` object, as toolward's MCP side lists it.
fn mcp_tool(tool: &RegisteredTool) -> Value {
    let mut object = Map::new();
    object.insert("name".to_owned(), json!(tool.exposed_name));
    object.insert("description".to_owned(), json!(tool.description));
    object.insert("inputSchema".to_owned(), tool.input_schema.to_serde_json());
    if let Some(schema) = &tool.output_schema {
        object.insert("outputSchema".to_owned(), schema.to_serde_json());
    }
    let annotations = serde_json::to_value(&tool.annotations).unwrap_or(Value::Null);
    if annotations.as_object().is_some_and(|a| !a.is_empty()) {
        object.insert("annotations".to_owned(), annotations);
    }
    Value::Object(object)
}
