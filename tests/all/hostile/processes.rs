//! Servers as processes: descendants, signals ignored, standard output closed, standard
//! error without end, a line of 1 GiB. Each test counts the processes left behind, by the
//! marker every process of its servers inherits.

use std::process::Command;
use std::time::{Duration, Instant};

use futures::future::join_all;

use toolward::transport::{StdioSpec, TransportLimits, Upstream};

use super::*;
use crate::support::{
    FAKE_SERVER, assert_no_processes_left, marked_processes, run_measuring_peak_memory,
    toolward_binary, unique_marker, wait_for_processes,
};

/// Started by the fake server: a child (`sh`), three grandchildren — one ignoring
/// `SIGTERM`, one that left the process group with `setsid` — and the shell waits.
const FAMILY: &str = "sleep 1000 & (trap '' TERM; exec sleep 1001) & setsid sleep 1002 & wait";

/// The fake server, its shell and the shell's three children.
const FAMILY_SIZE: usize = 5;

#[tokio::test]
async fn shutdown_ends_children_grandchildren_and_one_that_ignores_sigterm() {
    let bench = Bench::new("family")
        .server(
            "bad",
            json!({"pages": [page(&[&tool("t")])], "spawn": FAMILY}),
            &["t"],
        )
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    wait_for_processes(&bench.server_marker("bad"), FAMILY_SIZE);
    assert_echoes(&toolward, "bad__t").await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_server_that_closes_stdout_and_keeps_running_is_failed_and_ended() {
    let bench = Bench::new("close-stdout")
        .server(
            "bad",
            json!({"pages": [page(&[&tool("mute"), &tool("t")])], "spawn": FAMILY,
                   "actions": {"mute": {"close_stdout": true}}}),
            &["mute", "t"],
        )
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    wait_for_processes(&bench.server_marker("bad"), FAMILY_SIZE);
    assert_call_fails(
        &toolward,
        "bad__mute",
        &["the call of tool `bad__mute` on server `bad` failed: server `bad` failed: it closed its standard output"],
    )
    .await;
    // The process that kept running is ended with its whole family, before any shutdown:
    // standard input closed, the close grace (2 s), `SIGTERM`, the grace again, `SIGKILL`.
    // (Waited for off the runtime's only thread, which the closing needs.)
    let marker = bench.server_marker("bad");
    tokio::task::spawn_blocking(move || {
        crate::support::assert_no_processes_left_within(&marker, Duration::from_secs(10));
    })
    .await
    .unwrap();
    assert_call_fails(
        &toolward,
        "bad__t",
        &["server `bad` failed: it closed its standard output"],
    )
    .await;
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_server_writing_stderr_without_end_still_answers_and_shows_only_its_tail() {
    let bench = Bench::new("stderr-flood")
        .server(
            "bad",
            json!({"pages": [page(&[&tool("t"), &tool("die")])], "stderr_flood": true,
                   "actions": {"die": {"exit": true}}}),
            &["t", "die"],
        )
        .with_good_server();
    let toolward = bench.pin_and_start().await;
    for _ in 0..20 {
        assert_echoes(&toolward, "bad__t").await;
    }
    let upstream = toolward
        .call_path()
        .registry()
        .upstream("bad")
        .unwrap()
        .unwrap();
    assert_eq!(
        upstream.stderr_tail().len(),
        toolward::transport::STDERR_TAIL_BYTES
    );
    let failed = assert_call_fails(
        &toolward,
        "bad__die",
        &["server `bad` failed: its process exited (exit status: 3); its standard error ends with `eeee"],
    )
    .await;
    assert!(
        failed.text().len() < 2 * 1024 + 300,
        "{} bytes",
        failed.text().len()
    );
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_one_gibibyte_line_is_cut_at_the_frame_limit_without_buffering_it() {
    let Some(bin) = toolward_binary() else { return };
    let bench = Bench::new("gib-line").server(
        "bad",
        json!({"pages": [page(&[&tool("flood")])], "actions": {"flood": {"line_bytes": 1u64 << 30}}}),
        &["flood"],
    );
    bench.pin().await;
    let began = Instant::now();
    let (out, peak_kib) = run_measuring_peak_memory(
        Command::new(bin)
            .args(["call", "--config"])
            .arg(bench.path().join("toolward.json"))
            .arg("bad__flood"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("tool error: the call of tool `bad__flood` on server `bad` failed: server `bad` failed: it sent a line longer than the frame limit of 16842752 bytes"),
        "{stdout}"
    );
    assert!(peak_kib < 150 * 1024, "peak memory {peak_kib} KiB");
    assert!(began.elapsed() < Duration::from_secs(30));
    bench.assert_no_processes_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_start_stop_cycles_of_a_server_with_descendants_leave_no_process() {
    super::become_subreaper();
    let marker = unique_marker("cycles");
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("family.json");
    std::fs::write(
        &scenario,
        json!({"pages": [page(&[&tool("t")])], "spawn": FAMILY}).to_string(),
    )
    .unwrap();
    let spec = StdioSpec {
        command: FAKE_SERVER.to_owned(),
        args: vec![scenario.display().to_string()],
        env: [(MARKER_VARIABLE.to_owned(), marker.clone())].into(),
        ..StdioSpec::default()
    };
    let limits = TransportLimits {
        close_grace: Duration::from_millis(20),
        ..TransportLimits::default()
    };
    let began = Instant::now();
    let mut most_at_once = 0;
    // Four servers at a time, 50 rounds.
    for round in 0..50 {
        let names: Vec<String> = (0..4).map(|n| format!("s{round}-{n}")).collect();
        let started = join_all(
            names
                .iter()
                .map(|name| Upstream::connect_stdio(name, &spec, &limits)),
        )
        .await;
        let upstreams: Vec<Upstream> = started.into_iter().map(Result::unwrap).collect();
        wait_for_processes(&marker, 4 * FAMILY_SIZE);
        most_at_once = most_at_once.max(marked_processes(&marker).len());
        join_all(upstreams.into_iter().map(Upstream::close)).await;
        assert_no_processes_left(&marker);
    }
    assert_eq!(most_at_once, 4 * FAMILY_SIZE);
    assert!(
        began.elapsed() < Duration::from_secs(90),
        "{:?}",
        began.elapsed()
    );
}
