//! OpenTelemetry: a trace of every `tools/call` and the gateway's metrics, exported over
//! OTLP/HTTP (protobuf) to the collector the `telemetry` config section names. Off unless
//! configured: without it nothing is collected and a call pays one branch per step.
//!
//! # Contract
//!
//! - **Spans.** One span per call, `tools/call` (kind server), with a child per step that
//!   ran: `validate`, `decide`, `approval wait` (held calls) and `forward` (kind client).
//!   Attributes on the call's span: `toolward.tool` (the exposed name), `toolward.server`,
//!   `toolward.effect`, `toolward.decision` (`allow`, `deny`, `hold`; absent when the call
//!   was refused before its decision), `toolward.outcome` (as the `calls` metric) and
//!   `toolward.principal`. **Never an argument value**, a result, or a reason that could
//!   quote one: the audit log is where those are, under its own protection.
//! - **Context.** A W3C `traceparent` in the request's `params._meta` (the MCP
//!   specification's `_meta`, 2025-11-25 "General fields") makes the call's span its child;
//!   the forwarded request carries the `forward` span's `traceparent` in its own
//!   `params._meta`, so a server that traces continues the same trace. A malformed
//!   `traceparent` is ignored (a new trace starts), as W3C Trace Context §4.3 asks.
//! - **Metrics.** `toolward.calls` (counter; attributes `server`, `outcome`: `refused`,
//!   `denied`, `not-approved`, `allowed`, `approved`; `decision`: `allow`, `deny`,
//!   `hold`, `none`), `toolward.upstream.duration` (histogram of the forward step, in
//!   milliseconds; attribute `server`), `toolward.load.refusals` (counter of tools a load
//!   kept out; attribute `server`).
//! - **Export.** Spans and metrics leave on a timer, every `export_interval_ms`: a stdio
//!   gateway is killed by its client and never exits cleanly, so nothing waits for a
//!   shutdown. At most one interval's spans are lost when it is killed; spans past
//!   [`MAX_QUEUED_SPANS`] between two exports are dropped (counted by the SDK), never
//!   allowed to grow the gateway's memory. Exports run on a thread of their own with its
//!   own small runtime, so a slow collector never delays a call.
//! - **A runtime's own providers.** An embedder with OpenTelemetry of its own gives its
//!   tracer and meter providers ([`Telemetry::from_providers`], or the global ones,
//!   [`Telemetry::global`]) instead of a `telemetry` section: the same spans and metrics go
//!   where its own go, through its exporters, and toolward starts no exporter or thread.

mod export;
#[cfg(test)]
mod tests;
mod traceparent;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::global::BoxedTracer;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider};
use opentelemetry::trace::{
    SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

use crate::config::TelemetryConfig;

pub use traceparent::{format_traceparent, parse_traceparent};

/// Most finished spans kept between two exports; more are dropped. 2,048 calls' spans
/// (four or five each) of about 1 KB: a few MB at most.
pub const MAX_QUEUED_SPANS: usize = 8_192;

/// How long one export may take before it is abandoned, in milliseconds: the next interval
/// sends what is new.
pub const EXPORT_TIMEOUT_MS: u64 = 10_000;

/// What can go wrong starting telemetry.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built for the configured endpoint.
    #[error(
        "cannot export {signal} to `{endpoint}`: {source} (check `telemetry.endpoint` and `telemetry.headers`)"
    )]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The URL it would export to.
        endpoint: String,
        /// Why.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// The thread that sends exports could not be started.
    #[error("cannot start the telemetry export thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The name of toolward's tracer and meter (their instrumentation scope): `toolward`.
pub const INSTRUMENTATION_SCOPE: &str = "toolward";

/// Traces and metrics of a running gateway; shared by every call.
#[derive(Debug)]
pub struct Telemetry {
    tracer: BoxedTracer,
    calls: Counter<u64>,
    upstream_ms: Histogram<f64>,
    load_refusals: Counter<u64>,
    /// The OTLP export toolward started (`telemetry`); `None` with a runtime's providers,
    /// which the runtime flushes and shuts down.
    own: Option<OwnExport>,
}

/// The providers and the export thread of toolward's own OTLP export.
#[derive(Debug)]
struct OwnExport {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    _exports: export::ExportThread,
}

impl Telemetry {
    /// Starts exporting to `config.endpoint` every `config.export_interval_ms`.
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] when an exporter cannot be built (a malformed URL or
    /// header), [`TelemetryError::Thread`] when the export thread cannot start.
    pub fn start(config: &TelemetryConfig) -> Result<Arc<Telemetry>, TelemetryError> {
        let exports = export::ExportThread::start().map_err(TelemetryError::Thread)?;
        let interval = Duration::from_millis(config.export_interval_ms);
        let timeout = Duration::from_millis(EXPORT_TIMEOUT_MS);
        let headers: std::collections::HashMap<String, String> = config
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();

        let traces_url = format!("{}/v1/traces", config.endpoint);
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(traces_url.clone())
            .with_timeout(timeout)
            .with_headers(headers.clone())
            .build()
            .map_err(|source| TelemetryError::Exporter {
                signal: "traces",
                endpoint: traces_url,
                source,
            })?;
        let batch = BatchConfigBuilder::default()
            .with_scheduled_delay(interval)
            .with_max_queue_size(MAX_QUEUED_SPANS)
            .with_max_export_batch_size(MAX_QUEUED_SPANS)
            .build();
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(
                BatchSpanProcessor::builder(exports.spans(spans))
                    .with_batch_config(batch)
                    .build(),
            )
            .with_resource(resource.clone())
            .build();

        let metrics_url = format!("{}/v1/metrics", config.endpoint);
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(metrics_url.clone())
            .with_timeout(timeout)
            .with_headers(headers)
            .build()
            .map_err(|source| TelemetryError::Exporter {
                signal: "metrics",
                endpoint: metrics_url,
                source,
            })?;
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(
                PeriodicReader::builder(exports.metrics(metrics))
                    .with_interval(interval)
                    .build(),
            )
            .with_resource(resource)
            .build();

        let tracer = BoxedTracer::new(Box::new(tracer_provider.tracer(INSTRUMENTATION_SCOPE)));
        let meter = meter_provider.meter(INSTRUMENTATION_SCOPE);
        Ok(Telemetry::with(
            tracer,
            &meter,
            Some(OwnExport {
                tracer_provider,
                meter_provider,
                _exports: exports,
            }),
        ))
    }

    /// Traces and metrics through a runtime's own providers: toolward's tracer and meter
    /// ([`INSTRUMENTATION_SCOPE`]) from `tracer_provider` and `meter_provider`, exported
    /// however the runtime set them up. Nothing is started; [`flush`](Self::flush) does
    /// nothing (the runtime flushes its providers).
    pub fn from_providers<T, M>(tracer_provider: &T, meter_provider: &M) -> Arc<Telemetry>
    where
        T: TracerProvider,
        T::Tracer: Send + Sync + 'static,
        <T::Tracer as opentelemetry::trace::Tracer>::Span: Send + Sync + 'static,
        M: MeterProvider + ?Sized,
    {
        let tracer = BoxedTracer::new(Box::new(tracer_provider.tracer(INSTRUMENTATION_SCOPE)));
        Telemetry::with(tracer, &meter_provider.meter(INSTRUMENTATION_SCOPE), None)
    }

    /// Traces and metrics through the process's global providers
    /// (`opentelemetry::global`), as the runtime set them, at the time of this call.
    pub fn global() -> Arc<Telemetry> {
        Telemetry::with(
            opentelemetry::global::tracer(INSTRUMENTATION_SCOPE),
            &opentelemetry::global::meter(INSTRUMENTATION_SCOPE),
            None,
        )
    }

    fn with(tracer: BoxedTracer, meter: &Meter, own: Option<OwnExport>) -> Arc<Telemetry> {
        let calls = meter
            .u64_counter("toolward.calls")
            .with_description("tools/call requests, by server, outcome and decision")
            .build();
        let upstream_ms = meter
            .f64_histogram("toolward.upstream.duration")
            .with_unit("ms")
            .with_description("how long servers took to answer forwarded calls")
            .build();
        let load_refusals = meter
            .u64_counter("toolward.load.refusals")
            .with_description("tools a load kept out (pin mismatch, schema, rules)")
            .build();
        Arc::new(Telemetry {
            tracer,
            calls,
            upstream_ms,
            load_refusals,
            own,
        })
    }

    /// Counts `count` tools the load of `server` kept out.
    pub fn load_refused(&self, server: &str, count: u64) {
        self.load_refusals
            .add(count, &[KeyValue::new("server", server.to_owned())]);
    }

    /// Sends what is collected now, waiting for at most [`EXPORT_TIMEOUT_MS`] per signal. Not
    /// needed for correctness (exports run on a timer); for a gateway that exits cleanly.
    pub fn flush(&self) {
        if let Some(own) = &self.own {
            let _ = own.tracer_provider.force_flush();
            let _ = own.meter_provider.force_flush();
        }
    }
}

/// The trace of one call: the call's span and its attributes; does nothing when telemetry
/// is off ([`CallTrace::off`]).
#[derive(Debug)]
pub struct CallTrace {
    live: Option<Live>,
}

#[derive(Debug)]
struct Live {
    telemetry: Arc<Telemetry>,
    /// The context holding the call's span.
    cx: Context,
    server: String,
    decision: &'static str,
}

/// One step's span; ends when dropped.
#[derive(Debug)]
pub struct StepSpan {
    cx: Option<Context>,
    started: Instant,
}

impl StepSpan {
    /// The `traceparent` of this span, to continue the trace in a forwarded request.
    pub fn traceparent(&self) -> Option<String> {
        let cx = self.cx.as_ref()?;
        let span = cx.span();
        let context = span.span_context();
        context.is_valid().then(|| format_traceparent(context))
    }

    /// How long since the step began.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for StepSpan {
    fn drop(&mut self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

impl CallTrace {
    /// A trace that records nothing.
    pub fn off() -> CallTrace {
        CallTrace { live: None }
    }

    /// Starts the span of a call of `tool` on `server` (either may be what the client sent,
    /// for an unknown tool) by `principal`, the child of `traceparent` when it is a valid
    /// W3C `traceparent`.
    pub fn start(
        telemetry: Option<&Arc<Telemetry>>,
        traceparent: Option<&str>,
        tool: &str,
        server: &str,
        principal: &str,
    ) -> CallTrace {
        let Some(telemetry) = telemetry else {
            return CallTrace::off();
        };
        let parent = match traceparent.and_then(parse_traceparent) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let span = telemetry
            .tracer
            .span_builder("tools/call")
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("toolward.tool", tool.to_owned()),
                KeyValue::new("toolward.server", server.to_owned()),
                KeyValue::new("toolward.principal", principal.to_owned()),
            ])
            .start_with_context(&telemetry.tracer, &parent);
        CallTrace {
            live: Some(Live {
                telemetry: Arc::clone(telemetry),
                cx: parent.with_span(span),
                server: server.to_owned(),
                decision: "none",
            }),
        }
    }

    /// Starts the span of a step (`validate`, `decide`, `approval wait`, `forward`).
    pub fn step(&self, name: &'static str) -> StepSpan {
        let cx = self.live.as_ref().map(|live| {
            let kind = if name == "forward" {
                SpanKind::Client
            } else {
                SpanKind::Internal
            };
            let span = live
                .telemetry
                .tracer
                .span_builder(name)
                .with_kind(kind)
                .start_with_context(&live.telemetry.tracer, &live.cx);
            live.cx.with_span(span)
        });
        StepSpan {
            cx,
            started: Instant::now(),
        }
    }

    /// Sets the tool's effect on the call's span.
    pub fn effect(&self, effect: &str) {
        if let Some(live) = &self.live {
            live.cx
                .span()
                .set_attribute(KeyValue::new("toolward.effect", effect.to_owned()));
        }
    }

    /// Sets the policy's decision (`allow`, `deny`, `hold`) on the call's span.
    pub fn decision(&mut self, decision: &'static str) {
        if let Some(live) = &mut self.live {
            live.decision = decision;
            live.cx
                .span()
                .set_attribute(KeyValue::new("toolward.decision", decision));
        }
    }

    /// Records how long the server took to answer the forwarded call.
    pub fn upstream(&self, took: Duration) {
        if let Some(live) = &self.live {
            live.telemetry.upstream_ms.record(
                took.as_secs_f64() * 1_000.0,
                &[KeyValue::new("server", live.server.clone())],
            );
        }
    }

    /// Ends the call's span with `outcome` (`refused`, `denied`, `not-approved`, `allowed`,
    /// `approved`) and counts the call.
    pub fn finish(self, outcome: &'static str) {
        let Some(live) = self.live else {
            return;
        };
        let span = live.cx.span();
        span.set_attribute(KeyValue::new("toolward.outcome", outcome));
        if matches!(outcome, "refused" | "denied" | "not-approved") {
            span.set_status(Status::error(Cow::Borrowed(outcome)));
        }
        span.end();
        live.telemetry.calls.add(
            1,
            &[
                KeyValue::new("server", live.server),
                KeyValue::new("outcome", outcome),
                KeyValue::new("decision", live.decision),
            ],
        );
    }
}
