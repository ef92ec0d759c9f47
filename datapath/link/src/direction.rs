//! The event loop of one link direction: frames in from one veth end, through the core's
//! pipeline, out of the other end at their due time.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bloatlab_core::pipeline::{Departure, DropRecord, Event};
use bloatlab_core::qdisc::{QueueStats, TinReport};
use bloatlab_core::stats::DirectionStats;
use bloatlab_core::{DirectionConfig, Instant, Pipeline};

use bloatlab_link::capture::{Capture, CaptureCounts};
use bloatlab_link::config::{Batching, MAX_DEAF_NS, SPIN_SHARE};

use crate::clock::{monotonic_now, realtime_offset_ns, WakeupLead};
use crate::sched::{RtGate, ThreadPriority, BATCHING, LAST_ARRIVAL_NS};
use crate::socket::{PacketSocket, RxRing, TxBatch};

/// Frames taken from the ring per turn of the loop.
const RX_BATCH: usize = 64;
/// Longest sleep, so a stop request is seen promptly even on an idle link (`down` waits for it;
/// 100 wake-ups a second of an idle thread cost nothing measurable).
const MAX_WAIT_NS: u64 = 10_000_000;
const PUBLISH_EVERY_NS: u64 = 100_000_000;
/// The most a thread wakes before a departure to spin, however late its wake-ups come.
const MAX_LEAD_NS: u64 = 500_000;
/// A transmit path idle this long is walked once (PacketSocket::warm) before the next send,
/// if that is due no sooner than the walk itself takes on a cold path.
const WARM_AFTER_IDLE_NS: u64 = 500_000;
const WARM_TAKES_NS: u64 = 15_000;
/// How often a thread with arrivals refreshes sched::LAST_ARRIVAL_NS; far below the second
/// the CPU latency request is held for.
const MARK_ARRIVAL_NS: u64 = 10_000_000;

/// Whether a sleep of `sleep_ns` must end early for an arrival. No frame arriving from now on
/// leaves before the pipeline's next departure (the delay line is FIFO, the serialiser first
/// finishes what it holds) or before its arrival plus the shortest delay. A sleep no longer
/// than that delay has a departure ahead (an idle link's is MAX_WAIT_NS, which listens), and
/// the thread wakes its lead before it anyway: it takes the frame then, at the kernel's stamp,
/// with the same fate and as punctually. On a VM a wake-up costs ~14 us of CPU, and on a
/// delayed path one came per ACK.
fn listens(sleep_ns: u64, shortest_delay_ns: u64) -> bool {
    sleep_ns > shortest_delay_ns.min(MAX_DEAF_NS)
}

/// Lateness of departures against their due time, in 1 us buckets up to 100 ms.
#[derive(Clone)]
pub struct LatenessHistogram {
    buckets: Vec<u64>,
    count: u64,
    max_ns: u64,
}

impl LatenessHistogram {
    const BUCKETS: usize = 100_001;
    fn new() -> Self {
        LatenessHistogram { buckets: vec![0; Self::BUCKETS], count: 0, max_ns: 0 }
    }
    fn add(&mut self, late_ns: u64) {
        self.buckets[((late_ns / 1_000) as usize).min(Self::BUCKETS - 1)] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(late_ns);
    }
    /// Upper edge of the bucket holding quantile `q`, in ns.
    fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return ((i as u64 + 1) * 1_000).min(self.max_ns);
            }
        }
        self.max_ns
    }
}

/// A frame's arrival on the monotonic clock: the kernel's receive stamp where it is sane
/// (not before the pipeline's last event, not after we read it), else the read time.
fn arrival_time(stamp_real_ns: u64, rt_offset: i64, last: Instant, read_at: Instant) -> Instant {
    let mono = stamp_real_ns as i64 - rt_offset;
    if stamp_real_ns == 0 || mono > read_at.nanos() as i64 {
        return read_at;
    }
    Instant((mono.max(0) as u64).max(last.nanos()))
}

/// Caps the share of time a thread spends spinning (config::SPIN_SHARE, or Batching's
/// smaller one), so that at high packet rates (where a departure is always near) the datapath
/// does not take a whole core from the hosts' stacks; past the cap it sleeps and departures
/// are a little late instead.
#[derive(Default)]
struct SpinBudget {
    window_start: u64,
    spun_ns: u64,
    /// When the thread last chose to spin on, while it has not slept since.
    spinning_since: Option<u64>,
}

impl SpinBudget {
    const WINDOW_NS: u64 = 10_000_000;
    fn allows(&mut self, now: Instant, share: f64) -> bool {
        if now.nanos() - self.window_start >= Self::WINDOW_NS {
            self.window_start = now.nanos();
            self.spun_ns = 0;
        }
        (self.spun_ns as f64) < share * Self::WINDOW_NS as f64
    }
    /// The thread spins on at `now`: all the time since its previous choice to spin counts,
    /// the turn of the loop it ran meanwhile included, not only the pause.
    fn spin_at(&mut self, now: u64) {
        if let Some(since) = self.spinning_since {
            self.spun_ns += now.saturating_sub(since);
        }
        self.spinning_since = Some(now);
    }
    fn sleeps(&mut self) {
        self.spinning_since = None;
    }
}

/// What a thread counts of its own, beside the pipeline's figures.
#[derive(Default)]
struct Counts {
    rx_overrun: u64,
    tx_error: u64,
    batch_sleeps: u64,
}

/// What the main thread reports for a direction.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub dir: DirectionStats,
    pub queue: QueueStats,
    pub rx_overrun: u64,
    pub tx_error: u64,
    /// Sleeps past the spin share while batching (sched::CpuPressure).
    pub batch_sleeps: u64,
    pub late_count: u64,
    pub late_p50_ns: u64,
    pub late_p99_ns: u64,
    pub late_max_ns: u64,
    /// The thread's CPU time since it started, in its own code and in the kernel (where the
    /// frames are copied in and out, and the receiving host's stack runs: a veth delivers
    /// inline), and the wall time since it started, at this report.
    pub cpu: ThreadCpu,
    pub capture: Option<CaptureCounts>,
    /// The discipline's classes (CAKE's tins), empty for the others.
    pub tins: Vec<TinReport>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadCpu {
    pub user_ns: u64,
    pub kernel_ns: u64,
    pub wall_ns: u64,
}

impl ThreadCpu {
    /// The calling thread's, since `started_ns` (CLOCK_MONOTONIC).
    fn now(started_ns: u64) -> Self {
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        ThreadCpu { user_ns: ns(u.ru_utime), kernel_ns: ns(u.ru_stime), wall_ns: monotonic_now().nanos().saturating_sub(started_ns) }
    }
}

pub struct Direction {
    pub cfg: DirectionConfig,
    pub rx: RxRing,
    pub tx: PacketSocket,
    pub tx_batch: TxBatch,
    pub log: Option<BufWriter<File>>,
    /// pcapng files of what leaves and what is dropped, if asked for.
    pub capture: Option<Capture>,
    pub shared: Arc<Mutex<Snapshot>>,
    /// How long before a departure to stop sleeping and spin, at least: the thread wakes
    /// earlier where its wake-ups come later than that (clock::WakeupLead).
    pub spin_ns: u64,
    /// SCHED_FIFO priority for this thread while the gate allows (0: normal scheduling).
    pub rt_priority: i32,
    /// How to batch departures while sched::BATCHING is set (None: never).
    pub batching: Option<Batching>,
}

impl Direction {
    pub fn run(&mut self, stop: &AtomicBool, gate: &RtGate) -> std::io::Result<()> {
        let started_ns = monotonic_now().nanos();
        let mut priority = ThreadPriority::new(self.rt_priority);
        priority.update(gate, false, monotonic_now().nanos());
        let mut pipe = Pipeline::new(&self.cfg, monotonic_now());
        pipe.record_events(self.log.is_some());
        pipe.record_drops(self.capture.is_some());
        let mut drops: Vec<DropRecord> = Vec::new();
        let mut out: Vec<Departure> = Vec::with_capacity(256);
        let mut events: Vec<Event> = Vec::with_capacity(1024);
        let mut late = LatenessHistogram::new();
        let mut counts = Counts::default();
        let mut last_publish = Instant::ZERO;
        let mut spin = SpinBudget::default();
        let mut wakeup = WakeupLead::new(self.spin_ns, MAX_LEAD_NS.max(self.spin_ns));
        let mut last_tx_ns = 0u64; // when this thread last handed frames to the kernel
        let mut rt_offset = realtime_offset_ns();
        let mut last_marked_ns = 0u64; // when this thread last set LAST_ARRIVAL_NS
        while !stop.load(Ordering::Relaxed) {
            // Arrivals first, each at the time the kernel received it rather than when this
            // thread woke: with delay ahead, a late wake-up then costs the packet nothing.
            // The pipeline advances to each arrival time itself, so events stay in order.
            // At most RX_BATCH per turn: a backlog in the ring is then sent on in batches that
            // stay in the cache, rather than copied whole into buffers and only then sent.
            let read_at = monotonic_now();
            let taken = self.rx.recv(RX_BATCH, |frame, stamp_real_ns| {
                let t = arrival_time(stamp_real_ns, rt_offset, pipe.last_time(), read_at);
                pipe.arrive(t, frame)
            });
            // Both threads write this one word: at most every MARK_ARRIVAL_NS, so the cache line
            // does not bounce between them on every turn at high packet rates.
            if taken > 0 && read_at.nanos() - last_marked_ns >= MARK_ARRIVAL_NS {
                LAST_ARRIVAL_NS.store(read_at.nanos(), Ordering::Relaxed);
                last_marked_ns = read_at.nanos();
            }
            let now = monotonic_now();
            // With frames still waiting, time moves on only to the next one's arrival, so
            // nothing leaves ahead of what that frame would change; the next turn takes it
            // without sleeping.
            let backlog = self.rx.peek_stamp().map(|s| arrival_time(s, rt_offset, pipe.last_time(), now));
            pipe.poll(backlog.unwrap_or(now), &mut out);
            if !out.is_empty() {
                last_tx_ns = now.nanos();
            }
            counts.tx_error += self.send(&mut out, &mut late, rt_offset);
            self.capture_drops(&mut pipe, &mut drops, rt_offset);
            if let Some(w) = self.log.as_mut() {
                pipe.take_events(&mut events);
                write_events(w, &events)?;
                events.clear();
            }
            if now.nanos() - last_publish.nanos() >= PUBLISH_EVERY_NS {
                rt_offset = realtime_offset_ns(); // follows NTP adjustments of the wall clock
                counts.rx_overrun += self.rx.socket().take_overruns();
                if let Some(c) = self.capture.as_mut() {
                    c.tick();
                }
                self.publish(&pipe, &counts, &late, started_ns);
                last_publish = now;
            }
            priority.update(gate, backlog.is_some(), now.nanos());
            if backlog.is_some() {
                spin.sleeps();
                continue;
            }
            // Timer wake-ups run tens of microseconds late on a VM, later after long sleeps:
            // sleep until the learnt lead (at least `spin_ns`) before a departure, then spin
            // (still taking arrivals) for the rest. Other deadlines (a frame done serialising
            // with delay still ahead) wake nobody: `poll` catches virtual time up exactly
            // whenever it runs. With spin_ns 0 the thread only sleeps.
            let now = monotonic_now().nanos();
            let to_departure = pipe.next_departure().map_or(MAX_WAIT_NS, |t| t.nanos().saturating_sub(now));
            let lead = if self.spin_ns == 0 { 0 } else { wakeup.lead_ns(to_departure, now) };
            // While the hosts wait for CPU (sched::CpuPressure), a thread past a smaller spin
            // share sleeps at least `sleep_ns`, deaf, and sends what fell due meanwhile at once.
            let batching = self.batching.filter(|_| BATCHING.load(Ordering::Relaxed));
            let sleep = if to_departure > lead {
                to_departure - lead
            } else if spin.allows(Instant(now), batching.map_or(SPIN_SHARE, |b| b.spin_share)) {
                if now.saturating_sub(last_tx_ns) >= WARM_AFTER_IDLE_NS && to_departure >= WARM_TAKES_NS {
                    self.tx.warm();
                    last_tx_ns = now;
                }
                spin.spin_at(now);
                std::hint::spin_loop();
                continue;
            } else if let Some(b) = batching {
                to_departure.max(b.sleep_ns)
            } else {
                to_departure
            };
            if sleep == 0 {
                continue;
            }
            let sleep = sleep.min(MAX_WAIT_NS);
            spin.sleeps();
            // A batching sleep is deaf (never past MAX_DEAF_NS, whatever `spin_ns` made the
            // lead): frames arriving meanwhile leave with the batch.
            let batch_sleep = batching.is_some() && to_departure <= lead;
            counts.batch_sleeps += batch_sleep as u64;
            let listen = listens(sleep, pipe.shortest_delay().nanos()) && !(batch_sleep && sleep <= MAX_DEAF_NS);
            if !self.rx.socket().wait(Some(sleep), listen) {
                // Woken by the timer, not by a frame: how late it came, for the lead of
                // departures as far ahead as this one (or of sleeps this long).
                let ahead = if sleep + lead == to_departure { to_departure } else { sleep };
                let woke = monotonic_now().nanos();
                wakeup.record(ahead, woke.saturating_sub(now + sleep), woke);
            }
        }
        if let Some(w) = self.log.as_mut() {
            pipe.take_events(&mut events);
            write_events(w, &events)?;
            w.flush()?;
        }
        self.capture_drops(&mut pipe, &mut drops, rt_offset);
        if let Some(c) = self.capture.as_mut() {
            c.finish();
        }
        counts.rx_overrun += self.rx.socket().take_overruns();
        self.publish(&pipe, &counts, &late, started_ns);
        Ok(())
    }

    /// Sends what is due; records how late each frame left. Returns frames the kernel refused.
    fn send(&mut self, out: &mut Vec<Departure>, late: &mut LatenessHistogram, rt_offset: i64) -> u64 {
        if out.is_empty() {
            return 0;
        }
        // Captured at their due time, on the wall clock as capture files keep it.
        if let Some(c) = self.capture.as_mut() {
            for d in out.iter() {
                c.departure(&d.packet.data, d.packet.wire_len, d.packet.id, wall_ns(d.at, rt_offset));
            }
        }
        // Lateness is taken when the frames are handed to the kernel: sendmmsg returns only
        // after the receiving host's stack has processed them (veth delivers inline).
        let sent = monotonic_now();
        for d in out.iter() {
            late.add(sent.saturating_since(d.at).nanos());
        }
        let failed = self.tx_batch.send(&self.tx, out.iter().map(|d| d.packet.data.as_slice()));
        for d in out.drain(..) {
            self.rx.recycle(d.packet.data);
        }
        failed
    }

    /// Writes what the pipeline dropped since last time to the capture, then reuses the buffers.
    fn capture_drops(&mut self, pipe: &mut Pipeline, drops: &mut Vec<DropRecord>, rt_offset: i64) {
        let Some(c) = self.capture.as_mut() else { return };
        pipe.take_drops(drops);
        for d in drops.drain(..) {
            c.dropped(&d.packet.data, d.packet.wire_len, d.packet.id, wall_ns(d.at, rt_offset), d.reason.name());
            self.rx.recycle(d.packet.data);
        }
    }

    fn publish(&self, pipe: &Pipeline, counts: &Counts, late: &LatenessHistogram, started_ns: u64) {
        let snap = Snapshot {
            dir: pipe.stats().clone(),
            queue: pipe.queue_stats().clone(),
            rx_overrun: counts.rx_overrun,
            tx_error: counts.tx_error,
            batch_sleeps: counts.batch_sleeps,
            late_count: late.count,
            late_p50_ns: late.quantile_ns(0.5),
            late_p99_ns: late.quantile_ns(0.99),
            late_max_ns: late.max_ns,
            cpu: ThreadCpu::now(started_ns),
            capture: self.capture.as_ref().map(Capture::counts),
            tins: pipe.queue_tins(),
        };
        *self.shared.lock().unwrap() = snap;
    }
}

/// A monotonic instant on the wall clock, in ns since the Unix epoch.
fn wall_ns(t: Instant, rt_offset: i64) -> u64 {
    (t.nanos() as i64 + rt_offset).max(0) as u64
}

/// Queue-log records: 32 bytes, little-endian (docs/datapath.md).
fn write_events(w: &mut impl Write, events: &[Event]) -> std::io::Result<()> {
    for e in events {
        let mut rec = [0u8; 32];
        rec[0..8].copy_from_slice(&e.t.nanos().to_le_bytes());
        rec[8..16].copy_from_slice(&e.value.to_le_bytes());
        rec[16..20].copy_from_slice(&e.backlog_bytes.to_le_bytes());
        rec[20..24].copy_from_slice(&e.backlog_pkts.to_le_bytes());
        rec[24] = e.kind as u8;
        rec[25] = e.reason;
        w.write_all(&rec)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_within_the_shortest_delay_need_not_wake_for_arrivals() {
        // 10 ms of delay: a frame arriving during a 500 us sleep leaves 10 ms later.
        assert!(!listens(500_000, 10_000_000));
        assert!(!listens(1_000_000, 10_000_000));
        // But never deaf past MAX_DEAF_NS, whatever the delay: the ring must not fill.
        assert!(listens(MAX_DEAF_NS + 1, 10_000_000));
        // Without delay an arrival may leave at once: every sleep listens.
        assert!(listens(1, 0));
        // A sleep longer than the delay listens: the frame could be due before it ends.
        assert!(listens(200_001, 200_000));
        assert!(!listens(200_000, 200_000));
    }
}
