//! W3C Trace Context `traceparent` (version `00`): `00-<trace-id>-<parent-id>-<flags>`,
//! 32, 16 and 2 lowercase hex digits.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// The span context a `traceparent` names, as a remote parent; `None` when it is malformed,
/// its version is `ff`, or its trace or parent id is all zeros (W3C Trace Context §3.2).
/// A later version is read as version `00` when it has at least its fields (§4.3).
pub fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let mut parts = text.trim().split('-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let flags = parts.next()?;
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2)
        || version == "ff"
        || (version == "00" && parts.next().is_some())
        || !lower_hex(trace_id, 32)
        || !lower_hex(span_id, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    ))
}

/// The `traceparent` (version `00`) of `context`.
pub fn format_traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}
