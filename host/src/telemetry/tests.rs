use super::*;

#[test]
fn a_traceparent_round_trips_and_malformed_ones_are_ignored() {
    let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let context = parse_traceparent(text).unwrap();
    assert!(context.is_remote());
    assert!(context.is_sampled());
    assert_eq!(format_traceparent(&context), text);
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
    ] {
        assert!(parse_traceparent(bad).is_none(), "{bad:?} was accepted");
    }
}

#[test]
fn a_trace_that_is_off_records_nothing_and_passes_no_traceparent_on() {
    let mut trace = CallTrace::start(
        None,
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        "t",
        "s",
        "p",
    );
    trace.decision("allow");
    let step = trace.step("forward");
    assert_eq!(step.traceparent(), None);
    drop(step);
    trace.finish("allowed");
}
