//! How the workers are scheduled: real-time, within a share of the machine.
//!
//! A link stands for hardware, which does not wait for the hosts' processes. At normal
//! priority a thread woken for a departure waits behind whatever else is runnable on its
//! core (iperf3, the hosts' stacks, other networks' datapaths): on a loaded 2-vCPU VM the
//! p99 lateness at 100 Mbit/s was 1-17 ms, and 23-122 us under SCHED_FIFO. But a busy
//! real-time thread keeps its core from every normal thread, hosts included. So the threads
//! run real-time only while the whole datapath has used at most `cores - 1/2` cores over the
//! main thread's last report period: past that, they run at normal priority for the next
//! period, and the hosts keep at least half a core on average whatever the links carry.
//! Nor may one thread keep its core to itself: at 1 Gbit/s such threads saw p99 lateness of
//! 11-20 ms and 2174 ring overruns, which fits the kernel's fair server running the normal
//! threads starved there for up to 50 ms at once. So a thread that was busy more than 90% of
//! the last period runs the next one at normal priority.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use bloatlab_link::config::Batching;

use crate::clock::read;

/// Whether a datapath that used `cpu_ns` of CPU time in `wall_ns` on `cores` cores may run
/// real-time: at most all cores but half of one (half a core on a single-core machine).
pub fn within_share(cpu_ns: u64, wall_ns: u64, cores: usize) -> bool {
    let cap = (cores as f64 - 0.5).max(0.5);
    (cpu_ns as f64) <= cap * wall_ns as f64
}

/// Set by the main thread, read by the workers on every turn of their loops.
pub struct RtGate {
    allowed: AtomicBool,
}

impl RtGate {
    pub const fn new() -> Self {
        RtGate { allowed: AtomicBool::new(true) }
    }
    pub fn allows(&self) -> bool {
        self.allowed.load(Ordering::Relaxed)
    }
}

/// The main thread's meter of the process's CPU use between reviews.
pub struct CpuShare {
    cores: usize,
    last_cpu_ns: u64,
    last_wall_ns: u64,
    noted: bool,
}

impl CpuShare {
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuShare { cores, last_cpu_ns: read(libc::CLOCK_PROCESS_CPUTIME_ID), last_wall_ns: read(libc::CLOCK_MONOTONIC), noted: false }
    }
    /// Opens or closes `gate` by the CPU the process used since the previous review.
    pub fn review(&mut self, gate: &RtGate) {
        let (cpu, wall) = (read(libc::CLOCK_PROCESS_CPUTIME_ID), read(libc::CLOCK_MONOTONIC));
        let ok = within_share(cpu - self.last_cpu_ns, wall - self.last_wall_ns, self.cores);
        if gate.allowed.swap(ok, Ordering::Relaxed) && !ok && !self.noted {
            // Once: at a saturated link the gate may close and open every period.
            let used = (cpu - self.last_cpu_ns) as f64 / (wall - self.last_wall_ns).max(1) as f64;
            eprintln!("bloatlab-link: note: the datapath used {used:.2} of {} cores; workers at normal priority until it uses less", self.cores);
            self.noted = true;
        }
        (self.last_cpu_ns, self.last_wall_ns) = (cpu, wall);
    }
}

/// One worker's scheduling: SCHED_FIFO at `rt_priority` while the gate allows and the
/// thread left its core some time in the last period; else normal, at BUSY_NICE while frames
/// wait in its ring.
pub struct ThreadPriority {
    rt_priority: i32,
    realtime: bool,
    /// The current period: when it began (CLOCK_MONOTONIC) and the thread's CPU time then.
    period_start_ns: u64,
    period_cpu_ns: u64,
    /// Busy more than MAX_THREAD_SHARE of the last period.
    hot: bool,
    /// Set when the kernel refuses a change: the thread then stops trying it.
    rt_refused: bool,
    nice_refused: bool,
    boosted: bool,
}

/// Nice value of a thread at normal priority while frames wait in its ring. At equal weight
/// the thread of a saturated link gets only its share of a core next to the iperf3s, and is
/// preempted whenever one wakes, so the link's capacity fell with the hosts' load (on 2
/// cores, -10 raised unlimited TCP throughput by about a sixth). Only while backlogged: a
/// thread that spins for a departure at -10 would take the hosts' CPU for nothing.
const BUSY_NICE: libc::c_int = -10;
const PERIOD_NS: u64 = 200_000_000;
const MAX_THREAD_SHARE: f64 = 0.9;

impl ThreadPriority {
    pub fn new(rt_priority: i32) -> Self {
        ThreadPriority {
            rt_priority,
            realtime: false,
            period_start_ns: read(libc::CLOCK_MONOTONIC),
            period_cpu_ns: read(libc::CLOCK_THREAD_CPUTIME_ID),
            hot: false,
            rt_refused: rt_priority <= 0,
            nice_refused: false,
            boosted: false,
        }
    }

    /// Called on every turn of the loop: follows the gate, and the ring's backlog at normal
    /// priority. Costs a system call only when something changes.
    pub fn update(&mut self, gate: &RtGate, backlogged: bool, now_ns: u64) {
        if now_ns.saturating_sub(self.period_start_ns) >= PERIOD_NS {
            let cpu = read(libc::CLOCK_THREAD_CPUTIME_ID);
            self.hot = (cpu - self.period_cpu_ns) as f64 > MAX_THREAD_SHARE * (now_ns - self.period_start_ns) as f64;
            (self.period_start_ns, self.period_cpu_ns) = (now_ns, cpu);
        }
        let want_rt = !self.rt_refused && !self.hot && gate.allows();
        if want_rt != self.realtime {
            let (policy, prio) = if want_rt { (libc::SCHED_FIFO, self.rt_priority) } else { (libc::SCHED_OTHER, 0) };
            let p = libc::sched_param { sched_priority: prio };
            if unsafe { libc::sched_setscheduler(0, policy, &p) } < 0 {
                eprintln!("bloatlab-link: note: scheduling policy {policy} refused ({}); running at normal priority", std::io::Error::last_os_error());
                // Not tried again (nor, were it the way back, retried on every turn).
                self.rt_refused = true;
                self.realtime = false;
            } else {
                self.realtime = want_rt;
            }
        }
        // Nice means nothing to a real-time thread.
        let boost = backlogged && !self.realtime;
        if boost != self.boosted && !self.nice_refused {
            let nice = if boost { BUSY_NICE } else { 0 };
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) } < 0 {
                eprintln!("bloatlab-link: note: nice {nice} refused ({}); keeping normal priority", std::io::Error::last_os_error());
                self.nice_refused = true;
            } else {
                self.boosted = boost;
            }
        }
    }
}

/// Set by the main thread (CpuPressure) while the workers batch their departures.
pub static BATCHING: AtomicBool = AtomicBool::new(false);

/// Whether the workers should batch departures, judged every report period by the
/// machine's CPU pressure: the share of the period in which some runnable task waited for a
/// CPU (PSI's "some", /proc/pressure/cpu).
///
/// A thread spinning for departures that are always near (1 Gbit/s and up) keeps its vCPU
/// from the hosts: on two vCPUs the machine stayed 91-95% busy, iperf3's receiver fell
/// behind (UDP at 1.5 Gbit/s: 46-48% received) and even the datapath's own wake-ups came late
/// (p99 1.1-2.3 ms at 1 Gbit/s + 10 ms). Batching (past a small spin share, a sleep of at
/// least `sleep_ns`, deaf, then all that fell due at once) gave back a third of a core (UDP
/// at 1.5 Gbit/s: 64-74%; p99 0.17-0.26 ms), but where the hosts had CPU to spare it only
/// made departures later (docs/datapath.md, "Timing"). So the workers batch while tasks wait:
/// the pressure was 0.39-0.57 with the links spinning at 1 Gbit/s, 0.34-0.39 under TCP and
/// 0.15-0.19 under UDP at 500 Mbit/s. Batching itself lowers the pressure (to 0.31-0.41 at
/// 1 Gbit/s), so it stops only below a lower share, or the threads would swing between the
/// two every period. On a machine with CPU to spare the pressure stays low and nothing
/// changes. PSI is the whole machine's (in a container, its host's unless the container has
/// its own cgroup's pressure in /proc): what any task waits, whoever caused it.
pub struct CpuPressure {
    batching: Option<Batching>,
    /// The "some" total (us) and the monotonic time (ns) at the last review.
    last: Option<(u64, u64)>,
    share: Option<f64>,
    reviews: u64,
    batched: u64,
}

/// The "some" total of the CPU's pressure, in us: None without PSI (a kernel built without
/// it, or booted with psi=0).
fn cpu_pressure_total_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    text.lines().find(|l| l.starts_with("some "))?.split("total=").nth(1)?.trim().parse().ok()
}

/// Whether to batch next, from whether the threads batch now and the last period's pressure.
fn batch_next(batching: bool, share: f64, b: &Batching) -> bool {
    if batching { share > b.exit_pressure } else { share > b.enter_pressure }
}

impl CpuPressure {
    /// None never batches.
    pub fn new(batching: Option<Batching>) -> Self {
        let last = batching.and_then(|_| Some((cpu_pressure_total_us()?, read(libc::CLOCK_MONOTONIC))));
        CpuPressure { batching, last, share: None, reviews: 0, batched: 0 }
    }

    /// Judges the period since the last review, and tells the workers.
    pub fn review(&mut self) {
        let (Some(b), Some((last_us, last_ns))) = (self.batching, self.last) else { return };
        // The period just ended, as the threads ran it.
        let batched = BATCHING.load(Ordering::Relaxed);
        self.reviews += 1;
        self.batched += batched as u64;
        let Some(total_us) = cpu_pressure_total_us() else {
            // Unreadable now: no figure to batch on, so the threads spin as they would without.
            BATCHING.store(false, Ordering::Relaxed);
            self.share = None;
            return;
        };
        let now_ns = read(libc::CLOCK_MONOTONIC);
        let share = (total_us.saturating_sub(last_us) as f64 * 1e3 / now_ns.saturating_sub(last_ns).max(1) as f64).min(1.0);
        BATCHING.store(batch_next(batched, share, &b), Ordering::Relaxed);
        self.share = Some(share);
        self.last = Some((total_us, now_ns));
    }

    /// For the stats file: null when batching is off or the kernel has no PSI. `pressure` is
    /// null before the first review and while the pressure cannot be read.
    pub fn state(&self) -> serde_json::Value {
        if self.batching.is_none() || self.last.is_none() {
            return serde_json::Value::Null;
        }
        serde_json::json!({"pressure": self.share, "active": BATCHING.load(Ordering::Relaxed),
                           "periods": self.reviews, "periods_batching": self.batched})
    }
}

/// When a worker last took a frame from a ring (CLOCK_MONOTONIC ns), for CpuLatency, the main
/// thread's reports and the sentinel.
pub static LAST_ARRIVAL_NS: AtomicU64 = AtomicU64::new(0);

/// Set by the main thread when it sleeps for want of frames; the first worker to take a frame
/// then rings ACTIVITY_BELL, so that reports and the CPU latency request resume at once.
pub static IDLE: AtomicBool = AtomicBool::new(false);
pub static ACTIVITY_BELL: AtomicI32 = AtomicI32::new(-1);

/// A worker took frames at `now_ns`.
pub fn mark_arrival(now_ns: u64) {
    // SeqCst with the main thread's store of IDLE and its read of the time: either it sees
    // this arrival before it sleeps, or this sees it idle and rings.
    LAST_ARRIVAL_NS.store(now_ns, Ordering::SeqCst);
    if IDLE.load(Ordering::SeqCst) && IDLE.swap(false, Ordering::SeqCst) {
        crate::wake::ring_fd(ACTIVITY_BELL.load(Ordering::Relaxed));
    }
}

/// The length of the timed sleep a worker last began (0: a sleep until a frame comes), which
/// the sentinel copies.
pub static LAST_SLEEP_NS: AtomicU64 = AtomicU64::new(0);

/// Asks the kernel (PM QoS, /dev/cpu_dma_latency) for idle CPUs that wake within a bound
/// while frames flow. A halted vCPU takes tens of microseconds to run a woken thread again,
/// and a ping across an idle link wakes two (one per direction). With a bound of 0, under
/// which idle CPUs poll, the 100 Mbit/s min RTT over the path fell from +0.054..+0.065 ms to
/// +0.025..+0.032 (interleaved A/B, docs/datapath.md).
/// Polling costs an idle CPU's power, not the time of anything runnable, so the request is
/// held only while frames came in the last second. The kernel drops it when the file is
/// closed, so a killed datapath leaves nothing behind.
pub struct CpuLatency {
    file: Option<File>,
    bound_us: u32,
    held: bool,
}

/// Frames this recent keep the request held.
const QOS_HOLD_NS: u64 = 1_000_000_000;

/// What the kernel takes as no constraint (PM_QOS_CPU_LATENCY_DEFAULT_VALUE, 2000 s).
const QOS_NONE_US: i32 = 2_000_000_000;

/// Whether a frame taken at `last_arrival_ns` (0: none yet) is recent enough at `now_ns`.
pub fn frames_flow(now_ns: u64, last_arrival_ns: u64) -> bool {
    last_arrival_ns != 0 && now_ns.saturating_sub(last_arrival_ns) < QOS_HOLD_NS
}

impl CpuLatency {
    /// None asks nothing. Without the device or the privilege, a note, and nothing asked.
    pub fn open(bound_us: Option<u32>) -> Self {
        let file = bound_us.and_then(|_| match File::options().write(true).open("/dev/cpu_dma_latency") {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("bloatlab-link: note: /dev/cpu_dma_latency: {e}; idle CPUs keep their own wake-up latency");
                None
            }
        });
        CpuLatency { file, bound_us: bound_us.unwrap_or(0), held: false }
    }

    /// Holds the request while a frame arrived within QOS_HOLD_NS of `now_ns`, else lifts it.
    pub fn update(&mut self, now_ns: u64) {
        let want = frames_flow(now_ns, LAST_ARRIVAL_NS.load(Ordering::Relaxed));
        let Some(f) = self.file.as_mut().filter(|_| want != self.held) else { return };
        let value = if want { self.bound_us.min(i32::MAX as u32) as i32 } else { QOS_NONE_US };
        match f.write_all(&value.to_ne_bytes()) {
            Ok(()) => self.held = want,
            Err(e) => {
                eprintln!("bloatlab-link: note: /dev/cpu_dma_latency refused {value}: {e}");
                self.file = None;
            }
        }
    }

    /// For the stats file: the bound asked for (None: none), and whether it is held now.
    pub fn state(&self) -> (Option<u32>, bool) {
        (self.file.as_ref().map(|_| self.bound_us), self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_request_follows_the_frames() {
        const S: u64 = 1_000_000_000;
        assert!(!frames_flow(5 * S, 0)); // no frame yet
        assert!(frames_flow(5 * S, 5 * S));
        assert!(frames_flow(5 * S, 4 * S + 1)); // within a second
        assert!(!frames_flow(5 * S, 4 * S)); // a second idle: lifted
    }

    #[test]
    fn batching_starts_above_one_pressure_and_stops_below_a_lower_one() {
        let b = Batching::default(); // 0.4 and 0.2
        assert!(!batch_next(false, 0.39, &b));
        assert!(batch_next(false, 0.41, &b));
        // Once batching, the pressure it leaves (0.31-0.41 at 1 Gbit/s) keeps it batching.
        assert!(batch_next(true, 0.25, &b));
        assert!(!batch_next(true, 0.19, &b));
    }

    #[test]
    fn the_hosts_keep_half_a_core() {
        const S: u64 = 1_000_000_000;
        assert!(within_share(3 * S / 2, S, 2)); // 1.5 of 2 cores: still real-time
        assert!(!within_share(3 * S / 2 + 1, S, 2));
        assert!(within_share(S / 10, S / 5, 1)); // one core: half of it
        assert!(!within_share(S / 10 + 1, S / 5, 1));
        assert!(within_share(7 * S, 2 * S, 4)); // 3.5 of 4
        assert!(!within_share(8 * S, 2 * S, 4));
    }
}
