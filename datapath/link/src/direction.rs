//! One link direction as a worker serves it: its pipeline, where its departures go (a veth end,
//! or a port of a switch inside the datapath), and what it counts and writes (lateness, queue
//! log, captures).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::{Arc, Mutex};

use bloatlab_core::pipeline::{Departure, DropRecord, Event};
use bloatlab_core::qdisc::{DualPi2Stats, QueueStats, TinReport};
use bloatlab_core::stats::DirectionStats;
use bloatlab_core::{Instant, Pipeline};

use bloatlab_link::capture::{Capture, CaptureCounts};
use bloatlab_link::config::MAX_DEAF_NS;

use crate::clock::{monotonic_now, WakeupLead};
use crate::socket::{PacketSocket, TxBatch};

/// Whether a sleep of `sleep_ns` must end early for an arrival. No frame arriving from now on
/// leaves before the pipeline's next departure (the delay line is FIFO, the serialiser first
/// finishes what it holds) or before its arrival plus the shortest delay. A sleep no longer
/// than that delay has a departure ahead (an idle worker's sleep listens), and the worker wakes
/// its lead before it anyway: it takes the frame then, at the kernel's stamp, with the same
/// fate and as punctually. On a VM a wake-up costs ~14 us of CPU, and on a delayed path one
/// came per ACK.
pub fn listens(sleep_ns: u64, shortest_delay_ns: u64) -> bool {
    sleep_ns > shortest_delay_ns.min(MAX_DEAF_NS)
}

/// Lateness in 1 us buckets up to 100 ms: of departures against their due time, and of the
/// sentinel's wake-ups against theirs.
#[derive(Clone)]
pub struct LatenessHistogram {
    buckets: Vec<u64>,
    pub count: u64,
    pub max_ns: u64,
}

impl LatenessHistogram {
    const BUCKETS: usize = 100_001;
    pub fn new() -> Self {
        // Zeroed pages from the kernel: only the buckets ever hit take memory.
        LatenessHistogram { buckets: vec![0; Self::BUCKETS], count: 0, max_ns: 0 }
    }
    pub fn add(&mut self, late_ns: u64) {
        self.buckets[((late_ns / 1_000) as usize).min(Self::BUCKETS - 1)] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(late_ns);
    }
    /// Upper edge of the bucket holding quantile `q`, in ns.
    pub fn quantile_ns(&self, q: f64) -> u64 {
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
    /// How late something due at a moment taken at random over `span_ns` would have been, at
    /// quantile `q`, where these are the overshoots of sleeps that filled the span back to back
    /// (the sentinel's): a sleep that overshot by `o` holds up what falls due in its last `o`,
    /// by between 0 and `o`. So one stall of 12 ms weighs as the 12 ms it lasted, not as one
    /// sleep among thousands, as it weighs for the departures it holds up. The smallest `x`
    /// with sum(max(0, o - x)) <= (1 - q) * span, in ns; buckets count at their middle.
    pub fn at_random_ns(&self, q: f64, span_ns: u64) -> u64 {
        let allowed = (1.0 - q) * span_ns as f64;
        let (mut above, mut sum_above) = (0.0f64, 0.0f64); // count and total (ns) above the bucket
        for i in (0..Self::BUCKETS).rev() {
            let x = i as f64 * 1_000.0; // the bucket's lower edge
            let n = self.buckets[i] as f64;
            let value = if i == Self::BUCKETS - 1 { self.max_ns.max(x as u64) as f64 } else { x + 500.0 };
            // The time held up past x, counting this bucket: if more than allowed, the answer
            // lies in this bucket, where that time falls linearly with x.
            let (c, s) = (above + n, sum_above + n * value);
            if s - c * x > allowed {
                let at = if c > 0.0 { (s - allowed) / c } else { x };
                return at.clamp(x, x + 1_000.0).min(self.max_ns as f64) as u64;
            }
            (above, sum_above) = (c, s);
        }
        0
    }

    pub fn summary(&self) -> LatenessSummary {
        LatenessSummary { count: self.count, p50_ns: self.quantile_ns(0.5), p99_ns: self.quantile_ns(0.99), max_ns: self.max_ns }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct LatenessSummary {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// A frame's arrival on the monotonic clock: the kernel's receive stamp where it is sane
/// (not before the pipeline's last event, not after we read it), else the read time.
pub fn arrival_time(stamp_real_ns: u64, rt_offset: i64, last: Instant, read_at: Instant) -> Instant {
    let mono = stamp_real_ns as i64 - rt_offset;
    if stamp_real_ns == 0 || mono > read_at.nanos() as i64 {
        return read_at;
    }
    Instant((mono.max(0) as u64).max(last.nanos()))
}

/// What the main thread reports for a direction.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub dir: DirectionStats,
    pub queue: QueueStats,
    pub rx_overrun: u64,
    pub tx_error: u64,
    pub late: LatenessSummary,
    /// Frames a switch handed on after this direction's clock had passed their due time (from
    /// another worker, late), and by how much at most: the error of their arrival times.
    pub late_arrivals: u64,
    pub late_arrival_max_ns: u64,
    pub capture: Option<CaptureCounts>,
    /// The discipline's classes (CAKE's tins), empty for the others.
    pub tins: Vec<TinReport>,
    /// DualPI2's own figures (tc -s), None for the others.
    pub dualpi2: Option<DualPi2Stats>,
}

/// Where a direction's departures go.
pub enum Output {
    /// Out of a veth end in the datapath's namespace, to the node at the link's far end.
    Socket { tx: PacketSocket, batch: TxBatch, due: Vec<Departure> },
    /// Into a switch inside the datapath, by one of its ports.
    Switch { switch: usize, port: usize },
}

pub struct Dir {
    /// "LINK.forward": its files' names.
    pub name: String,
    pub pipe: Pipeline,
    pub output: Output,
    /// Its ring in the worker's list, when frames come in from a veth end.
    pub ring: Option<usize>,
    pub log: Option<BufWriter<File>>,
    pub capture: Option<Capture>,
    pub shared: Arc<Mutex<Snapshot>>,
    pub late: LatenessHistogram,
    pub rx_overrun: u64,
    pub tx_error: u64,
    pub late_arrivals: u64,
    pub late_arrival_max_ns: u64,
    /// Changed since it last published.
    pub dirty: bool,
    /// When it last handed frames to the kernel (a cold send path is walked before the next).
    pub last_tx_ns: u64,
    /// How long before its departures its worker must stop sleeping, learnt from the sleeps
    /// the worker took for them.
    pub lead: WakeupLead,
    drops: Vec<DropRecord>,
    events: Vec<Event>,
}

impl Dir {
    pub fn new(name: String, pipe: Pipeline, output: Output, log: Option<BufWriter<File>>, capture: Option<Capture>, shared: Arc<Mutex<Snapshot>>, lead: WakeupLead) -> Self {
        let late = LatenessHistogram::new();
        Dir { name, pipe, output, ring: None, log, capture, shared, late, rx_overrun: 0, tx_error: 0, late_arrivals: 0, late_arrival_max_ns: 0, dirty: true, last_tx_ns: 0, lead, drops: Vec::new(), events: Vec::with_capacity(1024) }
    }

    /// A frame handed on by a switch, due at `at`; never before this direction's clock.
    pub fn arrive_at(&mut self, at: Instant, data: Vec<u8>) {
        let last = self.pipe.last_time();
        if at < last {
            self.late_arrivals += 1;
            self.late_arrival_max_ns = self.late_arrival_max_ns.max(last.nanos() - at.nanos());
        }
        self.pipe.arrive(at.max(last), data);
        self.dirty = true;
    }

    /// Everything due by `until` (never before its own clock), captured at its due time.
    pub fn poll(&mut self, until: Instant, out: &mut Vec<Departure>, rt_offset: i64) {
        let first = out.len();
        self.pipe.poll(until.max(self.pipe.last_time()), out);
        if let Some(c) = self.capture.as_mut() {
            for d in &out[first..] {
                c.departure(&d.packet.data, d.packet.wire_len, d.packet.id, wall_ns(d.at, rt_offset));
            }
        }
        self.dirty = true;
    }

    /// Sends what is due out of its veth end, recording how late each frame left; returns the
    /// buffers for reuse.
    pub fn send(&mut self, spare: &mut Vec<Vec<u8>>) {
        let Output::Socket { tx, batch, due } = &mut self.output else { return };
        if due.is_empty() {
            return;
        }
        // Lateness is taken when the frames are handed to the kernel: sendmmsg returns only
        // after the receiving host's stack has processed them (veth delivers inline).
        let sent = monotonic_now();
        for d in due.iter() {
            self.late.add(sent.saturating_since(d.at).nanos());
        }
        self.tx_error += batch.send(tx, due.iter().map(|d| d.packet.data.as_slice()));
        self.last_tx_ns = sent.nanos();
        for d in due.drain(..) {
            recycle(spare, d.packet.data);
        }
    }

    /// Writes its queue log's new events and its captured drops.
    pub fn write_logs(&mut self, rt_offset: i64, spare: &mut Vec<Vec<u8>>) -> std::io::Result<()> {
        if let Some(w) = self.log.as_mut() {
            self.pipe.take_events(&mut self.events);
            write_events(w, &self.events)?;
            self.events.clear();
        }
        if let Some(c) = self.capture.as_mut() {
            self.pipe.take_drops(&mut self.drops);
            for d in self.drops.drain(..) {
                c.dropped(&d.packet.data, d.packet.wire_len, d.packet.id, wall_ns(d.at, rt_offset), d.reason.name());
                recycle(spare, d.packet.data);
            }
        }
        Ok(())
    }

    pub fn publish(&mut self) {
        let snap = Snapshot {
            dir: self.pipe.stats().clone(),
            queue: self.pipe.queue_stats().clone(),
            rx_overrun: self.rx_overrun,
            tx_error: self.tx_error,
            late: self.late.summary(),
            late_arrivals: self.late_arrivals,
            late_arrival_max_ns: self.late_arrival_max_ns,
            capture: self.capture.as_ref().map(Capture::counts),
            tins: self.pipe.queue_tins(),
            dualpi2: self.pipe.queue_dualpi2(),
        };
        *self.shared.lock().unwrap() = snap;
        self.dirty = false;
    }

    /// At the end: logs flushed, captures closed, the final figures published.
    pub fn finish(&mut self, rt_offset: i64) -> std::io::Result<()> {
        let mut spare = Vec::new();
        let written = self.write_logs(rt_offset, &mut spare);
        if let Some(w) = self.log.as_mut() {
            w.flush()?;
        }
        if let Some(c) = self.capture.as_mut() {
            c.finish();
        }
        self.publish();
        written
    }
}

/// Keeps a sent frame's buffer for a frame to come, so the steady state allocates nothing.
pub fn recycle(spare: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
    if buf.capacity() >= crate::socket::SLOT_BYTES && spare.len() < 4096 {
        buf.clear();
        spare.push(buf);
    }
}

/// A monotonic instant on the wall clock, in ns since the Unix epoch.
pub fn wall_ns(t: Instant, rt_offset: i64) -> u64 {
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

    #[test]
    fn at_a_random_moment_a_stall_weighs_as_long_as_it_lasted() {
        // 10,000 sleeps of 1 ms that overshot by 30 us, and one that overshot by 12 ms: per
        // sleep the p99 is 30 us, yet the stall holds up 12 of the span's 10.3 s. At a random
        // moment: 12 ms - x + 10,000 * (30.5 us - x) <= 1% of 10,313 ms at x >= 21.4 us.
        let mut h = LatenessHistogram::new();
        for _ in 0..10_000 {
            h.add(30_000);
        }
        h.add(12_000_000);
        let span = 10_000 * 1_030_000 + 1_012_000 + 12_000_000;
        assert_eq!(h.quantile_ns(0.99), 31_000);
        assert_eq!(h.at_random_ns(0.99, span), 21_384);
        // With the stall alone taking 5% of the span, the p99 is within it.
        let mut stalled = LatenessHistogram::new();
        stalled.add(50_000_000);
        assert!((40_000_000..40_001_000).contains(&stalled.at_random_ns(0.99, 1_000_000_000))); // to a bucket
        assert_eq!(LatenessHistogram::new().at_random_ns(0.99, 1_000_000_000), 0);
    }

    #[test]
    fn the_histogram_gives_bucket_edges_never_past_the_max() {
        let mut h = LatenessHistogram::new();
        for us in 1..=100u64 {
            h.add(us * 1_000 + 500);
        }
        let s = h.summary();
        assert_eq!((s.count, s.p50_ns, s.p99_ns, s.max_ns), (100, 51_000, 100_000, 100_500));
        let mut one = LatenessHistogram::new();
        one.add(1_234);
        assert_eq!(one.quantile_ns(0.99), 1_234);
    }

    #[test]
    fn a_probability_record_is_written_at_its_update_time() {
        use bloatlab_core::pipeline::EventKind;
        use bloatlab_core::qdisc::PacketInfo;
        // DualPI2's p' = 3/8 at 16 ms, with two frames queued then: kind 5, value in parts per 2^32.
        let e = Event { t: Instant(16_000_000), kind: EventKind::Probability, reason: 0, value: 3 << 29, backlog_pkts: 2, backlog_bytes: 3028, packet: PacketInfo::default() };
        let mut out = Vec::new();
        write_events(&mut out, &[e]).unwrap();
        let mut want = [0u8; 32];
        want[0..8].copy_from_slice(&16_000_000u64.to_le_bytes());
        want[8..16].copy_from_slice(&(3u64 << 29).to_le_bytes());
        want[16..20].copy_from_slice(&3028u32.to_le_bytes());
        want[20..24].copy_from_slice(&2u32.to_le_bytes());
        want[24] = 5;
        assert_eq!(out, want);
    }
}
