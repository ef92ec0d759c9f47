//! The sentinel: a thread that sleeps as the workers sleep, one real-time step above them,
//! throughout a run while frames flow, and records how late each of its wake-ups comes.
//!
//! A worker can be no more punctual than the machine wakes it (less its learnt lead, which is
//! capped). Measured idle before a run, the machine looked far better than it was once the
//! run's own traffic, probes and tools loaded it: on a 2-vCPU VM a 50 us sleep woke 54-97 us
//! late idle and 211 us late under cs244 at 10 Mbit/s, and a 1.2 ms real-time sleep 1.1 ms late
//! at p99. So the machine's lateness is measured beside the departures', under the same load,
//! and a run judges what the datapath added against that. One step above the workers, so that
//! a running worker (SCHED_FIFO does not preempt its own level) does not count as the machine.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock::{monotonic_now, read};
use crate::direction::{LatenessHistogram, LatenessSummary};
use crate::sched::{frames_flow, LAST_ARRIVAL_NS, LAST_SLEEP_NS};
use crate::wake::{sleep_ns, Epoll, EventFd};

/// Its sleeps copy the workers' last, within these bounds: at most a thousand wake-ups a
/// second (on a VM each costs 20-40 us of CPU: 2-4% of a core while frames flow), and no
/// sleep longer than a worker's longest while frames are in flight.
pub const MIN_SLEEP_NS: u64 = 1_000_000;
pub const MAX_SLEEP_NS: u64 = 10_000_000;
const PUBLISH_EVERY_NS: u64 = 100_000_000;

#[derive(Clone, Copy, Default)]
pub struct SentinelReport {
    /// How late its wake-ups came.
    pub late: LatenessSummary,
    /// The median length of its sleeps.
    pub sleep_p50_ns: u64,
    /// Its CPU time: what measuring cost.
    pub cpu_ns: u64,
    /// The real-time priority it slept at; None where refused (then a normal thread).
    pub rt_priority: Option<i32>,
}

/// Set while the sentinel waits for frames; the main thread rings `bell` when they flow.
pub static WAITING: AtomicBool = AtomicBool::new(false);

pub fn run(stop: &AtomicBool, bell: &EventFd, stop_bell: RawFd, worker_priority: i32, out: Arc<Mutex<SentinelReport>>) {
    let rt_priority = (worker_priority > 0).then_some(worker_priority + 1).filter(|&prio| {
        let p = libc::sched_param { sched_priority: prio };
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
    });
    let mut epoll = match Epoll::new().and_then(|e| e.add(bell.fd(), 0).and(e.add(stop_bell, 1)).map(|_| e)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bloatlab-link: note: the sentinel cannot wait for frames ({e}); runs are judged without it");
            return;
        }
    };
    let mut late = LatenessHistogram::new();
    let mut sleeps = LatenessHistogram::new();
    let cpu0 = read(libc::CLOCK_THREAD_CPUTIME_ID);
    let publish = |late: &LatenessHistogram, sleeps: &LatenessHistogram| {
        let report = SentinelReport { late: late.summary(), sleep_p50_ns: sleeps.quantile_ns(0.5), cpu_ns: read(libc::CLOCK_THREAD_CPUTIME_ID) - cpu0, rt_priority };
        *out.lock().unwrap() = report;
    };
    let mut last_publish = 0;
    while !stop.load(Ordering::Relaxed) {
        let now = monotonic_now().nanos();
        if !frames_flow(now, LAST_ARRIVAL_NS.load(Ordering::Relaxed)) {
            publish(&late, &sleeps);
            WAITING.store(true, Ordering::SeqCst);
            if !frames_flow(monotonic_now().nanos(), LAST_ARRIVAL_NS.load(Ordering::SeqCst)) {
                epoll.wait(None, |_| {});
                bell.clear();
            }
            WAITING.store(false, Ordering::Relaxed);
            continue;
        }
        let sleep = LAST_SLEEP_NS.load(Ordering::Relaxed).clamp(MIN_SLEEP_NS, MAX_SLEEP_NS);
        let t0 = monotonic_now().nanos();
        sleep_ns(sleep);
        late.add(monotonic_now().nanos().saturating_sub(t0 + sleep));
        sleeps.add(sleep);
        if t0 - last_publish >= PUBLISH_EVERY_NS {
            publish(&late, &sleeps);
            last_publish = t0;
        }
    }
    publish(&late, &sleeps);
}
