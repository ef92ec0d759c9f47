//! The sentinels: a thread per CPU, pinned to it, that sleeps as the workers sleep, one real-time
//! step above them, throughout a run while frames flow, and records how late each of its
//! wake-ups comes. One per CPU, since a stall is often one CPU's (its host's vCPU not run): a
//! single sentinel on one CPU missed the 14 ms stalls the workers met on the other.
//!
//! A worker can be no more punctual than the machine wakes it (less its learnt lead, which is
//! capped). Measured idle before a run, the machine looked far better than it was once the
//! run's own traffic, probes and tools loaded it: on a 2-vCPU VM a 50 us sleep woke 54-97 us
//! late idle and 211 us late under cs244 at 10 Mbit/s, and a 1.2 ms real-time sleep 1.1 ms late
//! at p99. So the machine's lateness is measured beside the departures', under the same load,
//! and a run judges what the datapath added against that. One step above the workers, so that
//! a running worker (SCHED_FIFO does not preempt its own level) does not count as the machine.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock::{monotonic_now, read};
use crate::direction::{LatenessHistogram, LatenessSummary};
use crate::sched::{frames_flow, LAST_ARRIVAL_NS, LAST_SLEEP_NS};
use crate::wake::{sleep_ns, Epoll, EventFd};

/// Its sleeps copy the workers' last, within these bounds: at most a thousand wake-ups a
/// second per CPU (on a VM each costs 20-40 us of CPU: 2-4% of the CPU while frames flow),
/// and no sleep longer than a worker's longest while frames are in flight.
pub const MIN_SLEEP_NS: u64 = 1_000_000;
pub const MAX_SLEEP_NS: u64 = 10_000_000;

#[derive(Clone, Copy, Default)]
pub struct SentinelReport {
    /// How late its wake-ups came.
    pub late: LatenessSummary,
    /// How late something due at a moment taken at random while it slept would have been, p50
    /// and p99 (LatenessHistogram::at_random_ns): what the machine's stalls cost a departure.
    pub at_random_p50_ns: u64,
    pub at_random_p99_ns: u64,
    /// The time its sleeps took, overshoots included.
    pub span_ns: u64,
    /// The median length of its sleeps.
    pub sleep_p50_ns: u64,
    /// Their CPU time together: what measuring cost.
    pub cpu_ns: u64,
    /// The real-time priority they slept at; None where refused (then normal threads).
    pub rt_priority: Option<i32>,
    /// How many there are (a CPU each).
    pub sentinels: usize,
}

/// What the sentinels measured, together: every sleep of each counts as a moment of the machine.
pub struct Watch {
    late: LatenessHistogram,
    sleeps: LatenessHistogram,
    span_ns: u64,
    cpu_ns: Vec<u64>,
    rt_priority: Option<i32>,
}

impl Watch {
    pub fn new(sentinels: usize) -> Self {
        Watch { late: LatenessHistogram::new(), sleeps: LatenessHistogram::new(), span_ns: 0, cpu_ns: vec![0; sentinels], rt_priority: None }
    }

    pub fn report(&self) -> SentinelReport {
        SentinelReport {
            late: self.late.summary(),
            at_random_p50_ns: self.late.at_random_ns(0.5, self.span_ns),
            at_random_p99_ns: self.late.at_random_ns(0.99, self.span_ns),
            span_ns: self.span_ns,
            sleep_p50_ns: self.sleeps.quantile_ns(0.5),
            cpu_ns: self.cpu_ns.iter().sum(),
            rt_priority: self.rt_priority,
            sentinels: self.cpu_ns.len(),
        }
    }
}

/// The CPUs this process may run on, in order.
pub fn cpus() -> Vec<usize> {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return vec![0];
    }
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// How many sentinels wait for frames; the main thread rings their bells when frames flow.
pub static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Sentinel `index`, on `cpu`: sleeps and records into `watch` until `stop`.
pub fn run(index: usize, cpu: usize, stop: &AtomicBool, bell: &EventFd, stop_bell: RawFd, worker_priority: i32, watch: Arc<Mutex<Watch>>) {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // Unpinned (where refused), it still measures whatever CPU it runs on.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    let rt_priority = (worker_priority > 0).then_some(worker_priority + 1).filter(|&prio| {
        let p = libc::sched_param { sched_priority: prio };
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
    });
    if index == 0 {
        watch.lock().unwrap().rt_priority = rt_priority;
    }
    let mut epoll = match Epoll::new().and_then(|e| e.add(bell.fd(), 0).and(e.add(stop_bell, 1)).map(|_| e)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bloatlab-link: note: a sentinel cannot wait for frames ({e}); runs are judged without it");
            return;
        }
    };
    let cpu0 = read(libc::CLOCK_THREAD_CPUTIME_ID);
    while !stop.load(Ordering::Relaxed) {
        let now = monotonic_now().nanos();
        if !frames_flow(now, LAST_ARRIVAL_NS.load(Ordering::Relaxed)) {
            watch.lock().unwrap().cpu_ns[index] = read(libc::CLOCK_THREAD_CPUTIME_ID) - cpu0;
            WAITING.fetch_add(1, Ordering::SeqCst);
            if !frames_flow(monotonic_now().nanos(), LAST_ARRIVAL_NS.load(Ordering::SeqCst)) {
                epoll.wait(None, |_| {});
                bell.clear();
            }
            WAITING.fetch_sub(1, Ordering::Relaxed);
            continue;
        }
        let sleep = LAST_SLEEP_NS.load(Ordering::Relaxed).clamp(MIN_SLEEP_NS, MAX_SLEEP_NS);
        let t0 = monotonic_now().nanos();
        sleep_ns(sleep);
        let woke = monotonic_now().nanos();
        let mut w = watch.lock().unwrap();
        w.late.add(woke.saturating_sub(t0 + sleep));
        w.sleeps.add(sleep);
        w.span_ns += woke - t0;
        w.cpu_ns[index] = read(libc::CLOCK_THREAD_CPUTIME_ID) - cpu0;
    }
}
