//! A criterion measurement of the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`)
//! instead of wall time: on a shared machine (load 5–9 on 2 cores while these figures were
//! taken) wall time mostly measures the other processes' share of the CPU, CPU time much
//! less so (their cache and memory-bandwidth pressure remains). Only for single-threaded
//! benchmarks without waiting: time the thread spends blocked is not counted.
//! `TOOLWARD_BENCH_CLOCK=wall` measures wall time instead.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// Thread CPU time, or wall time under `TOOLWARD_BENCH_CLOCK=wall`.
pub struct CpuTime;

fn wall() -> bool {
    static WALL: OnceLock<bool> = OnceLock::new();
    *WALL.get_or_init(|| std::env::var("TOOLWARD_BENCH_CLOCK").is_ok_and(|v| v == "wall"))
}

#[expect(
    unsafe_code,
    reason = "clock_gettime is a libc call; its only argument is a timespec it fills"
)]
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The clock [`CpuTime`] reads, for benchmarks that time steps themselves.
pub fn now() -> Duration {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    if wall() {
        ORIGIN.get_or_init(Instant::now).elapsed()
    } else {
        thread_cpu()
    }
}

impl Measurement for CpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        now()
    }

    fn end(&self, start: Duration) -> Duration {
        now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        static FORMAT: WallTime = WallTime;
        FORMAT.formatter()
    }
}
