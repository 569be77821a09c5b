//! The thread exports run on, and the exporters that run there.
//!
//! The SDK's batch span processor and periodic metric reader each export from a thread of
//! their own, polling the exporter's future with a plain executor; the OTLP/HTTP exporter's
//! `reqwest` client needs a tokio runtime around it. The gateway's runtime is not that
//! runtime: on stdio it is one thread, and a slow collector must never take its time. So
//! exports get a small runtime on a thread of their own, and every poll of an export enters
//! it ([`InRuntime`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The export thread: a current-thread runtime that runs until this is dropped.
pub(super) struct ExportThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl fmt::Debug for ExportThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportThread").finish_non_exhaustive()
    }
}

impl ExportThread {
    pub(super) fn start() -> std::io::Result<ExportThread> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(String::from("toolward-otlp"))
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(ExportThread {
            handle,
            stop: Some(stop),
        })
    }

    /// `exporter`, exporting inside this thread's runtime.
    pub(super) fn spans<E>(&self, exporter: E) -> InRuntime<E> {
        InRuntime {
            inner: exporter,
            handle: self.handle.clone(),
        }
    }

    /// As [`ExportThread::spans`].
    pub(super) fn metrics<E>(&self, exporter: E) -> InRuntime<E> {
        self.spans(exporter)
    }
}

impl Drop for ExportThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An exporter whose futures are polled inside the export thread's runtime.
pub(super) struct InRuntime<E> {
    inner: E,
    handle: Handle,
}

impl<E: fmt::Debug> fmt::Debug for InRuntime<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InRuntime")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// A future polled with `handle`'s runtime entered, so that what it starts (connections,
/// timers) belongs to that runtime, which drives them.
struct Entered<F> {
    future: Pin<Box<F>>,
    handle: Handle,
}

impl<F: Future> Future for Entered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = self.handle.enter();
        self.future.as_mut().poll(cx)
    }
}

impl<E: SpanExporter> SpanExporter for InRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        Entered {
            future: Box::pin(self.inner.export(batch)),
            handle: self.handle.clone(),
        }
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for InRuntime<E> {
    fn export(&self, metrics: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        Entered {
            future: Box::pin(self.inner.export(metrics)),
            handle: self.handle.clone(),
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
