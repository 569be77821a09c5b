//! Telemetry in a build without the `otel` feature: the interface of `telemetry.rs` (the
//! contract is documented there), recording nothing, as a gateway with no `telemetry`
//! section does. A config that has one is refused at start.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Traces and metrics of a running gateway: never made in this build.
#[derive(Debug)]
pub struct Telemetry {
    _never: std::convert::Infallible,
}

impl Telemetry {
    /// Counts `count` tools the load of `server` kept out.
    pub fn load_refused(&self, _server: &str, _count: u64) {}

    /// Sends what is collected now: nothing is.
    pub fn flush(&self) {}
}

/// The trace of one call: records nothing.
#[derive(Debug)]
pub struct CallTrace;

/// One step: only its start, for [`StepSpan::elapsed`].
#[derive(Debug)]
pub struct StepSpan {
    started: Instant,
}

impl StepSpan {
    /// No trace is continued: `None`.
    pub fn traceparent(&self) -> Option<String> {
        None
    }

    /// How long since the step began.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

// As the real span, whose end is its drop: the call path drops steps to end them.
impl Drop for StepSpan {
    fn drop(&mut self) {}
}

impl CallTrace {
    /// A trace that records nothing.
    pub fn off() -> CallTrace {
        CallTrace
    }

    /// A trace that records nothing (there is no [`Telemetry`] in this build).
    pub fn start(
        _telemetry: Option<&Arc<Telemetry>>,
        _traceparent: Option<&str>,
        _tool: &str,
        _server: &str,
        _principal: &str,
    ) -> CallTrace {
        CallTrace
    }

    /// A step that records nothing but its start.
    pub fn step(&self, _name: &'static str) -> StepSpan {
        StepSpan {
            started: Instant::now(),
        }
    }

    /// Records nothing.
    pub fn effect(&self, _effect: &str) {}

    /// Records nothing.
    pub fn decision(&mut self, _decision: &'static str) {}

    /// Records nothing.
    pub fn upstream(&self, _took: Duration) {}

    /// Records nothing.
    pub fn finish(self, _outcome: &'static str) {}
}
