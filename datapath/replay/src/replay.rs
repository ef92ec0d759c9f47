//! Drives the core's `Pipeline` in virtual time, exactly as the live datapath does, and turns
//! its event log and departures into one fate per packet.

use std::collections::{HashMap, VecDeque};

use bloatlab_core::pipeline::Departure;
use bloatlab_core::wire::{synthetic_ipv4_udp, Ecn, SYNTHETIC_HEADER_BYTES};
use bloatlab_core::{DirectionConfig, DropReason, Event, EventKind, Instant, MarkReason, Pipeline};

use crate::arrivals::Arrival;

/// What became of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Left the link; CE-marked on the way if the reason is set.
    Departed(Option<MarkReason>),
    Dropped(DropReason),
}

/// One packet's fate. Times are ns of virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fate {
    /// The pipeline's packet id: the arrival's index, from 0.
    pub id: u64,
    pub t_arrival_ns: u64,
    pub size_bytes: u32,
    pub flow: u32,
    pub outcome: Outcome,
    /// When it left the link (after serialisation and delay), or was dropped.
    pub t_ns: u64,
    /// Time in the queue: from arrival until the serialiser took it, or until its drop.
    pub sojourn_ns: u64,
}

/// Where fates go, in the order they are settled.
pub trait FateSink {
    fn fate(&mut self, f: &Fate);
}

impl FateSink for Vec<Fate> {
    fn fate(&mut self, f: &Fate) {
        self.push(*f);
    }
}

/// Packets the replay could not account for: a defect, never the input's fault.
fn lost(what: &str) -> String {
    format!("internal error: {what}; please report it with the config and arrivals")
}

/// The per-packet bookkeeping between the pipeline's log and its departures.
struct Books {
    events: Vec<Event>,
    departures: Vec<Departure>,
    /// Marked packets still on their way; a fate needs the mark when the packet leaves.
    marks: HashMap<u64, MarkReason>,
    /// (id, sojourn) of dequeued packets not yet out: the serialiser and the delay line keep
    /// order, so departures come in dequeue order.
    dequeued: VecDeque<(u64, u64)>,
    settled: u64,
}

impl Books {
    fn settle(&mut self, p: &mut Pipeline, sink: &mut impl FateSink) -> Result<(), String> {
        p.take_events(&mut self.events);
        for e in self.events.drain(..) {
            let info = e.packet;
            match e.kind {
                // A packet's fate only: the replay writes no queue log.
                EventKind::Enqueue | EventKind::Probability => {}
                EventKind::Dequeue => self.dequeued.push_back((info.id, e.value)),
                EventKind::Mark => {
                    let reason = MarkReason::ALL[e.reason as usize - 1];
                    self.marks.insert(info.id, reason);
                }
                EventKind::Drop => {
                    if !self.marks.is_empty() {
                        self.marks.remove(&info.id);
                    }
                    self.settled += 1;
                    sink.fate(&Fate {
                        id: info.id,
                        t_arrival_ns: info.enqueued_at.nanos(),
                        size_bytes: info.len,
                        flow: info.tag,
                        outcome: Outcome::Dropped(DropReason::ALL[e.reason as usize - 1]),
                        t_ns: e.t.nanos(),
                        sojourn_ns: e.t.saturating_since(info.enqueued_at).nanos(),
                    });
                }
            }
        }
        for d in self.departures.drain(..) {
            let pkt = &d.packet;
            let (id, sojourn_ns) = self.dequeued.pop_front().ok_or_else(|| lost("a packet left without leaving the queue"))?;
            if id != pkt.id {
                return Err(lost("packets left out of queue order"));
            }
            let mark = if self.marks.is_empty() { None } else { self.marks.remove(&id) };
            self.settled += 1;
            sink.fate(&Fate {
                id,
                t_arrival_ns: pkt.enqueued_at.nanos(),
                size_bytes: pkt.wire_len,
                flow: pkt.tag,
                outcome: Outcome::Departed(mark),
                t_ns: d.at.nanos(),
                sojourn_ns,
            });
        }
        Ok(())
    }
}

/// The synthetic headers of recent (flow, ECN, size) triples: building them (and their IPv4
/// checksum) anew for every packet costs more than copying them.
struct Headers {
    slots: Vec<Option<((u32, Ecn, u32), [u8; SYNTHETIC_HEADER_BYTES])>>,
}

impl Headers {
    const SLOTS: usize = 256;
    fn get(&mut self, a: &Arrival) -> Vec<u8> {
        let key = (a.flow, a.ecn, a.size_bytes);
        let slot = &mut self.slots[(a.flow as usize ^ (a.size_bytes as usize).wrapping_mul(31)) % Self::SLOTS];
        match slot {
            Some((k, h)) if *k == key => h.to_vec(),
            _ => {
                let h = synthetic_ipv4_udp(a.flow, a.ecn, a.size_bytes as usize);
                *slot = Some((key, h.as_slice().try_into().expect("synthetic headers have a fixed size")));
                h
            }
        }
    }
}

/// Replays `arrivals` (times never decreasing) through a link direction, from time 0, until
/// every packet has left or been dropped; each packet's fate goes to `sink`.
/// Returns the number of packets.
pub fn replay(cfg: &DirectionConfig, arrivals: impl IntoIterator<Item = Arrival>, sink: &mut impl FateSink) -> Result<u64, String> {
    let mut p = Pipeline::new(cfg, Instant(0));
    p.record_events(true);
    let mut books = Books { events: Vec::with_capacity(64), departures: Vec::with_capacity(64), marks: HashMap::new(), dequeued: VecDeque::new(), settled: 0 };
    let mut headers = Headers { slots: vec![None; Headers::SLOTS] };
    let mut n = 0u64;
    let mut last_t = 0u64;
    for a in arrivals {
        if a.t_ns < last_t {
            return Err(format!("arrival {n}: {} ns comes before {last_t} ns; times must not decrease", a.t_ns));
        }
        last_t = a.t_ns;
        let now = Instant(a.t_ns);
        p.arrive_with(now, headers.get(&a), a.size_bytes, a.flow);
        p.poll(now, &mut books.departures);
        books.settle(&mut p, sink)?;
        n += 1;
    }
    // Drain: every deadline in turn until nothing is left in the queue, the serialiser or the line.
    while let Some(t) = p.next_deadline() {
        let now = t.max(p.last_time());
        p.poll(now, &mut books.departures);
        books.settle(&mut p, sink)?;
    }
    if books.settled != n || !books.dequeued.is_empty() || p.in_flight() != 0 || p.queue_stats().backlog_pkts != 0 {
        return Err(lost(&format!("{n} packets arrived but {} were settled", books.settled)));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloatlab_core::qdisc::{CodelParams, Limit, QueueConfig};
    use bloatlab_core::rate::Rate;
    use bloatlab_core::wire::Ecn;
    use bloatlab_core::Duration;

    fn config(queue: QueueConfig, bps: u64, delay_ns: u64) -> DirectionConfig {
        DirectionConfig {
            rate: Rate::Constant { bps },
            delay: Duration(delay_ns),
            jitter: Duration(0),
            loss: 0.0,
            queue,
            seed: 7,
            max_frame_bytes: 65535,
            ect1_rewrite: Vec::new(),
        }
    }

    fn arrival(t_ns: u64, size_bytes: u32, flow: u32, ecn: Ecn) -> Arrival {
        Arrival { t_ns, size_bytes, flow, ecn }
    }

    #[test]
    fn departures_at_the_serialisation_times_plus_delay() {
        // 1500 bytes at 12 Mbit/s take 1 ms; three back-to-back arrivals leave 1 ms apart.
        let cfg = config(QueueConfig::DropTail(Limit::Packets(10)), 12_000_000, 5_000_000);
        let mut fates = Vec::new();
        let n = replay(&cfg, (0..3).map(|_| arrival(0, 1500, 1, Ecn::NotEct)), &mut fates).unwrap();
        assert_eq!(n, 3);
        let t: Vec<_> = fates.iter().map(|f| (f.id, f.t_ns, f.sojourn_ns, f.outcome)).collect();
        assert_eq!(
            t,
            [
                (0, 6_000_000, 0, Outcome::Departed(None)),
                (1, 7_000_000, 1_000_000, Outcome::Departed(None)),
                (2, 8_000_000, 2_000_000, Outcome::Departed(None))
            ]
        );
    }

    #[test]
    fn droptail_of_one_drops_what_finds_the_slot_taken() {
        // As in Linux, the serialiser is not the queue: of simultaneous arrivals at an idle link
        // the first goes straight onto the wire, the second takes the one queue slot and waits,
        // the third finds it taken and is dropped.
        let cfg = config(QueueConfig::DropTail(Limit::Packets(1)), 12_000_000, 0);
        let mut fates = Vec::new();
        let arrivals = (0..3).map(|k| arrival(0, 1500, k, Ecn::NotEct));
        replay(&cfg, arrivals, &mut fates).unwrap();
        let got: Vec<_> = fates.iter().map(|f| (f.id, f.outcome, f.t_ns)).collect();
        assert_eq!(
            got,
            [
                (2, Outcome::Dropped(DropReason::QueueFull), 0),
                (0, Outcome::Departed(None), 1_000_000),
                (1, Outcome::Departed(None), 2_000_000)
            ]
        );
        // Behind a busy link, two simultaneous arrivals: the second is dropped.
        let mut fates = Vec::new();
        let arrivals = [arrival(0, 1500, 0, Ecn::NotEct), arrival(500_000, 1500, 1, Ecn::NotEct), arrival(500_000, 1500, 2, Ecn::NotEct)];
        replay(&cfg, arrivals, &mut fates).unwrap();
        assert_eq!(fates[0].id, 2);
        assert_eq!(fates[0].outcome, Outcome::Dropped(DropReason::QueueFull));
        assert_eq!(fates.len(), 3);
    }

    #[test]
    fn every_packet_has_exactly_one_fate_and_replays_repeat() {
        let codel = QueueConfig::Codel(Limit::Packets(100), CodelParams { ecn: true, ..CodelParams::default() });
        let cfg = DirectionConfig { loss: 0.01, ..config(codel, 10_000_000, 2_000_000) };
        // 1.5x overload for 2 s, half the flows ECN-capable: drops, marks and random loss.
        let arrivals: Vec<_> = (0..2500u64)
            .map(|k| arrival(k * 800_000, 1500, (k % 4) as u32, if k % 2 == 0 { Ecn::Ect0 } else { Ecn::NotEct }))
            .collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        replay(&cfg, arrivals.clone(), &mut a).unwrap();
        replay(&cfg, arrivals.clone(), &mut b).unwrap();
        assert_eq!(a, b, "the same inputs give the same fates");
        let mut ids: Vec<_> = a.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..2500).collect::<Vec<_>>(), "one fate per packet");
        let count = |pred: &dyn Fn(&Outcome) -> bool| a.iter().filter(|f| pred(&f.outcome)).count();
        assert!(count(&|o| *o == Outcome::Dropped(DropReason::Codel)) > 0);
        assert!(count(&|o| *o == Outcome::Dropped(DropReason::Loss)) > 0);
        assert!(count(&|o| *o == Outcome::Departed(Some(MarkReason::Codel))) > 0);
        for f in &a {
            let k = f.id;
            assert_eq!((f.t_arrival_ns, f.flow, f.size_bytes), (k * 800_000, (k % 4) as u32, 1500));
            if let Outcome::Departed(mark) = f.outcome {
                assert!(f.t_ns >= f.t_arrival_ns + f.sojourn_ns + 1_200_000 + 2_000_000, "tx time and delay after the queue");
                assert!(mark.is_none() || k % 2 == 0, "only ECN-capable packets are marked");
            }
        }
        let departed: Vec<_> = a.iter().filter(|f| matches!(f.outcome, Outcome::Departed(_))).map(|f| f.t_ns).collect();
        assert!(departed.windows(2).all(|w| w[1] >= w[0] + 1_200_000), "one packet at a time on the wire");
    }
}
