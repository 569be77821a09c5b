//! Pin and start from values: [`Options`] fills the builder an embedder uses
//! (`toolward::Toolward::builder`) from what Python gave; [`pin`] and [`start`] are its two
//! coroutines.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Map, Value};
use toolward::{Manifest, ToolwardBuilder, error_chain};

use crate::toolward::Toolward;
use crate::{PinError, StartError};

/// What a toolward is built from, as Python gave it: the servers (`mcpServers` entries) and
/// the other settings as JSON text, the rules text, and the optional policy bytes and
/// folders. Read by [`pin`] and [`start`] alike, so both see the same config.
#[pyclass(frozen, module = "toolward._native")]
#[derive(Debug)]
pub struct Options {
    servers: Map<String, Value>,
    settings: Map<String, Value>,
    rules: Vec<u8>,
    rules_component: Option<Vec<u8>>,
    policy_component: Option<Vec<u8>>,
    policy_settings: Option<Vec<u8>>,
    cedar: Option<Vec<u8>>,
    state_dir: Option<PathBuf>,
    servers_dir: Option<PathBuf>,
    base_dir: Option<PathBuf>,
}

#[pymethods]
impl Options {
    #[new]
    #[pyo3(signature = (
        servers, rules, settings, *, rules_component = None, policy_component = None,
        policy_settings = None, cedar = None, state_dir = None, servers_dir = None,
        base_dir = None,
    ))]
    #[expect(
        clippy::too_many_arguments,
        reason = "Python's keyword arguments, one per value"
    )]
    fn new(
        servers: &str,
        rules: Vec<u8>,
        settings: &str,
        rules_component: Option<Vec<u8>>,
        policy_component: Option<Vec<u8>>,
        policy_settings: Option<Vec<u8>>,
        cedar: Option<Vec<u8>>,
        state_dir: Option<PathBuf>,
        servers_dir: Option<PathBuf>,
        base_dir: Option<PathBuf>,
    ) -> PyResult<Self> {
        Ok(Options {
            servers: object("servers", servers)?,
            settings: object("settings", settings)?,
            rules,
            rules_component,
            policy_component,
            policy_settings,
            cedar,
            state_dir,
            servers_dir,
            base_dir,
        })
    }
}

impl Options {
    /// The builder these values fill (no manifest yet).
    fn builder(&self) -> ToolwardBuilder {
        let mut builder = toolward::Toolward::builder().rules(self.rules.clone());
        for (name, entry) in &self.servers {
            builder = builder.server(name.clone(), entry.clone());
        }
        for (key, value) in &self.settings {
            builder = builder.setting(key.clone(), value.clone());
        }
        if let Some(bytes) = &self.rules_component {
            builder = builder.rules_component(bytes.clone());
        }
        if let Some(bytes) = &self.policy_component {
            builder = builder.policy_component(bytes.clone());
        }
        if let Some(text) = &self.policy_settings {
            builder = builder.policy_settings(text.clone());
        }
        if let Some(text) = &self.cedar {
            builder = builder.cedar(text.clone());
        }
        if let Some(path) = &self.state_dir {
            builder = builder.state_dir(path);
        }
        if let Some(path) = &self.servers_dir {
            builder = builder.servers_dir(path);
        }
        if let Some(path) = &self.base_dir {
            builder = builder.base_dir(path);
        }
        builder
    }
}

/// The JSON object `text` (what Python's `json.dumps` made of a mapping), or a `ValueError`
/// naming `what`.
fn object(what: &str, text: &str) -> PyResult<Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(PyValueError::new_err(format!("{what}: not a JSON object"))),
        Err(e) => Err(PyValueError::new_err(format!("{what}: not JSON: {e}"))),
    }
}

/// Pins the servers `options` names: a coroutine returning the manifest's JSON text, for the
/// operator to review and give back to [`start`]. Raises `PinError` naming each server that
/// could not be started or listed, with the reason; tools a server listed malformed are left
/// out of the manifest and recorded under its `refused`.
#[pyfunction]
pub fn pin<'py>(py: Python<'py>, options: &Bound<'py, Options>) -> PyResult<Bound<'py, PyAny>> {
    let config = options
        .get()
        .builder()
        .config()
        .map_err(|e| StartError::new_err(error_chain(&e)))?;
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let outcome = toolward::pin(&config, None, None, BTreeMap::new())
            .await
            .map_err(|e| PinError::new_err(error_chain(&e)))?;
        if !outcome.failures.is_empty() {
            let failures: Vec<String> = outcome.failures.values().map(|e| error_chain(e)).collect();
            return Err(PinError::new_err(failures.join("; ")));
        }
        Ok(outcome.manifest.to_json())
    })
}

/// Starts the toolward `options` names with the reviewed `manifest` (JSON text, as [`pin`]
/// returned it): a coroutine returning a [`Toolward`]. Raises `StartError` with the reason.
#[pyfunction]
pub fn start<'py>(
    py: Python<'py>,
    options: &Bound<'py, Options>,
    manifest: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let manifest = Manifest::parse(manifest.as_bytes())
        .map_err(|e| StartError::new_err(format!("the manifest: {}", error_chain(&e))))?;
    let builder = options.get().builder().manifest(manifest);
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let started = builder
            .start()
            .await
            .map_err(|e| StartError::new_err(error_chain(&e)))?;
        Ok(Toolward::new(Arc::new(started)))
    })
}
