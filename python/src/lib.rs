//! `toolward._native`: the Rust half of the `toolward` Python package (maturin, PyO3).
//!
//! The package's Python half (`python/toolward/`) is the API a Python runtime uses; this
//! module is what it calls: `pin` and `start` from values (`start.rs`), a started toolward's
//! tools, calls and shutdown (`toolward.rs`), and the approver that asks a Python callable
//! about a held call (`approver.rs`). JSON crosses as text
//! (Python's `json` on one side, `serde_json` on the other); coroutines are asyncio's,
//! driven by tokio through `pyo3-async-runtimes`.
//!
//! It uses only the `toolward` crate's public surface.

use pyo3::prelude::*;

mod approver;
mod start;
mod toolward;

pyo3::create_exception!(
    toolward,
    ToolwardError,
    pyo3::exceptions::PyException,
    "Every error toolward raises."
);
pyo3::create_exception!(
    toolward,
    StartError,
    ToolwardError,
    "The values do not make a toolward that starts: the config, the manifest, the components."
);
pyo3::create_exception!(
    toolward,
    PinError,
    ToolwardError,
    "A server could not be pinned, or tools of it were refused."
);

/// Called at the interpreter's exit (`atexit`, before it starts finalizing): lets go of the
/// GIL for a moment, so a thread of toolward's runtime that has just handed it back (after
/// setting a coroutine's result) finishes leaving Python first. CPython aborts the process
/// when such a thread leaves while it finalizes.
#[pyfunction]
fn at_exit(py: Python<'_>) {
    py.detach(|| std::thread::sleep(std::time::Duration::from_millis(50)));
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("ToolwardError", py.get_type::<ToolwardError>())?;
    module.add("StartError", py.get_type::<StartError>())?;
    module.add("PinError", py.get_type::<PinError>())?;
    module.add_class::<start::Options>()?;
    module.add_class::<toolward::Toolward>()?;
    module.add_class::<approver::HeldCall>()?;
    module.add_class::<approver::Approve>()?;
    module.add_class::<approver::Deny>()?;
    module.add_function(wrap_pyfunction!(start::pin, module)?)?;
    module.add_function(wrap_pyfunction!(start::start, module)?)?;
    module.add_function(wrap_pyfunction!(at_exit, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
