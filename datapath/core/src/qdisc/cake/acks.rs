//! CAKE's ACK filter, after Linux sch_cake: when a TCP ACK joins a flow's queue, an older pure
//! ACK of the same connection that it makes redundant (it acknowledges no less, SACKs no less,
//! carries no older timestamps, no data and no option the filter does not understand) leaves
//! the queue. On a slow upstream this frees room for the data the ACKs share it with.
//!
//! Conservative mode drops only when two such ACKs wait (the one nearest the head goes), so one
//! always stays to carry what the newest might not; aggressive mode also drops a single one
//! right before the newest. An ECE or CWR flag that changes between them ends the search, so
//! no congestion signal is lost.

use std::collections::VecDeque;

use super::super::Packet;
use crate::wire::{tcp_segment, TcpSegment, TCP_ACK, TCP_CWR, TCP_ECE, TCP_SYN};

/// Which ACKs the filter drops (tc's no-ack-filter, ack-filter, ack-filter-aggressive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckFilter {
    Off,
    Conservative,
    Aggressive,
}

impl AckFilter {
    pub const ALL: [AckFilter; 3] = [AckFilter::Off, AckFilter::Conservative, AckFilter::Aggressive];

    pub fn name(self) -> &'static str {
        match self {
            AckFilter::Off => "off",
            AckFilter::Conservative => "conservative",
            AckFilter::Aggressive => "aggressive",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

const OPT_EOL: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_SACK: u8 = 5;
const OPT_TIMESTAMP: u8 = 8;
const OPT_MD5SIG: u8 = 19;
const TIMESTAMP_LEN: usize = 10;
const SACK_BLOCK: usize = 8;
/// Every flag but ECE and CWR, with the reserved bits: of these a droppable ACK has ACK alone.
const FLAGS_BUT_ECN: u16 = 0x0F3F;

/// Sequence numbers compared on the circle, as TCP does.
fn after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

fn before(a: u32, b: u32) -> bool {
    after(b, a)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The options as (kind, body) pairs, in order; the walk stops where Linux's does (at EOL, or at
/// a length that is short or runs past the header).
fn options(opts: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        let kind = *opts.get(at)?;
        if kind == OPT_EOL {
            return None;
        }
        if kind == OPT_NOP {
            at += 1;
            continue;
        }
        let size = *opts.get(at + 1)? as usize;
        if size < 2 || at + size > opts.len() {
            return None;
        }
        let body = &opts[at + 2..at + size];
        at += size;
        return Some((kind, body));
    })
}

fn option(opts: &[u8], kind: u8) -> Option<&[u8]> {
    options(opts).find(|&(k, _)| k == kind).map(|(_, body)| body)
}

/// The segment's timestamp value and echo reply, (0, 0) without the option.
fn timestamps(seg: &TcpSegment) -> (u32, u32) {
    match option(seg.options, OPT_TIMESTAMP) {
        Some(body) if body.len() + 2 == TIMESTAMP_LEN => (be32(body), be32(&body[4..])),
        _ => (0, 0),
    }
}

/// Whether an older ACK may go for a newer one with these timestamps: ACK its only flag (ECE
/// and CWR aside), no timestamp later than the newer's, and only options known not to matter.
fn may_drop(seg: &TcpSegment, tsval: u32, tsecr: u32) -> bool {
    if seg.flags & FLAGS_BUT_ECN != TCP_ACK {
        return false;
    }
    options(seg.options).all(|(kind, body)| match kind {
        OPT_MD5SIG => true,
        OPT_SACK => (body.len() + 2) % SACK_BLOCK == 2,
        OPT_TIMESTAMP => {
            body.len() + 2 == TIMESTAMP_LEN && !after(be32(body), tsval) && !after(be32(&body[4..]), tsecr)
        }
        _ => false, // MSS, window scale, SACK-permitted, fast open, experiments, the unknown
    })
}

/// The SACK blocks (start, end) of a segment.
fn sack_blocks<'a>(seg: &TcpSegment<'a>) -> impl Iterator<Item = (u32, u32)> + 'a {
    let body = option(seg.options, OPT_SACK).unwrap_or(&[]);
    body.chunks_exact(SACK_BLOCK).map(|b| (be32(b), be32(&b[4..])))
}

/// -1 if `a` SACKs something `b` does not (or holds a D-SACK), 1 if `b` SACKs all of `a`'s and
/// more bytes, 0 if they SACK the same (or neither SACKs).
fn sack_compare(a: &TcpSegment, b: &TcpSegment) -> i32 {
    let (has_a, has_b) = (sack_blocks(a).next().is_some(), sack_blocks(b).next().is_some());
    match (has_a, has_b) {
        (true, false) => return -1,
        (false, true) => return 1,
        (false, false) => return 0,
        (true, true) => {}
    }
    let bytes_b = sack_blocks(b).fold(0u32, |n, (start, end)| n.wrapping_add(end.wrapping_sub(start)));
    let mut bytes_a = 0u32;
    for (start_a, end_a) in sack_blocks(a) {
        if before(start_a, a.ack) {
            return -1; // a D-SACK: news of a duplicate, never dropped
        }
        bytes_a = bytes_a.wrapping_add(end_a.wrapping_sub(start_a));
        if !sack_blocks(b).any(|(start_b, end_b)| !after(start_b, start_a) && !before(end_b, end_a)) {
            return -1;
        }
    }
    if bytes_b > bytes_a {
        1
    } else {
        0
    }
}

/// The position in `queue` of the ACK that its last packet, just added, makes redundant.
pub fn redundant_ack(queue: &VecDeque<Packet>, aggressive: bool) -> Option<usize> {
    let newest = queue.len().checked_sub(1).filter(|&n| n > 0)?;
    let trigger = tcp_segment(&queue[newest].data)?;
    if trigger.flags & (TCP_ACK | TCP_SYN) != TCP_ACK {
        return None; // a SYN has no ACK before it; anything else with ACK set may trigger
    }
    let (tsval, tsecr) = timestamps(&trigger);
    let ecn_flags = |seg: &TcpSegment| seg.flags & (TCP_ECE | TCP_CWR);
    let mut eligible: Option<(usize, u16)> = None;
    let mut found = 0;
    for (i, pkt) in queue.iter().take(newest).enumerate() {
        let Some(seg) = tcp_segment(&pkt.data) else { continue };
        if seg.v6 != trigger.v6 || seg.ports != trigger.ports || seg.addrs != trigger.addrs {
            continue;
        }
        if let Some((_, flags)) = eligible {
            if ecn_flags(&seg) != flags {
                eligible = None; // dropping it now would lose the change of ECN signal
                found -= 1;
            }
        }
        if !may_drop(&seg, tsval, tsecr) || seg.data_len != 0 || after(seg.ack, trigger.ack) {
            continue;
        }
        let sacks = sack_compare(&seg, &trigger);
        if sacks < 0 || (seg.ack == trigger.ack && sacks == 0) {
            continue; // the newest does not cover all it says
        }
        if eligible.is_none() {
            eligible = Some((i, ecn_flags(&seg)));
        }
        found += 1;
        if found > 1 {
            return eligible.map(|(i, _)| i);
        }
    }
    match eligible {
        Some((i, flags)) if aggressive && i + 1 == newest && flags == ecn_flags(&trigger) => Some(i),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testkit::Harness;
    use super::super::super::{DropReason, Limit, QueueConfig};
    use super::super::{CakeParams, FlowMode};
    use super::*;
    use crate::rng::Rng;

    const NOP: u8 = 1;

    /// A TCP segment from 10.0.0.`host`:`port` to 10.0.1.1:80 (or the same in IPv6).
    #[derive(Clone)]
    struct Seg {
        host: u8,
        port: u16,
        ack: u32,
        flags: u16,
        options: Vec<u8>,
        data: usize,
        v6: bool,
    }

    fn ack(ack: u32) -> Seg {
        Seg { host: 1, port: 40000, ack, flags: TCP_ACK, options: vec![], data: 0, v6: false }
    }

    impl Seg {
        fn flags(mut self, flags: u16) -> Self {
            self.flags = flags;
            self
        }
        fn data(mut self, bytes: usize) -> Self {
            self.data = bytes;
            self
        }
        fn port(mut self, port: u16) -> Self {
            self.port = port;
            self
        }
        fn v6(mut self) -> Self {
            self.v6 = true;
            self
        }
        fn timestamps(mut self, tsval: u32, tsecr: u32) -> Self {
            self.options.extend([NOP, NOP, OPT_TIMESTAMP, 10]);
            self.options.extend(tsval.to_be_bytes());
            self.options.extend(tsecr.to_be_bytes());
            self
        }
        fn sack(mut self, blocks: &[(u32, u32)]) -> Self {
            self.options.extend([NOP, NOP, OPT_SACK, (2 + 8 * blocks.len()) as u8]);
            for (start, end) in blocks {
                self.options.extend(start.to_be_bytes());
                self.options.extend(end.to_be_bytes());
            }
            self
        }
        fn option(mut self, kind: u8, body: &[u8]) -> Self {
            self.options.extend([kind, (2 + body.len()) as u8]);
            self.options.extend(body);
            while self.options.len() % 4 != 0 {
                self.options.push(NOP);
            }
            self
        }
        fn frame(&self) -> Vec<u8> {
            let tcp_len = 20 + self.options.len();
            let mut f = vec![0u8; 12];
            let (ethertype, ip_len) = if self.v6 { (0x86DDu16, 40) } else { (0x0800, 20) };
            f.extend(ethertype.to_be_bytes());
            if self.v6 {
                f.extend([0x60, 0, 0, 0]);
                f.extend(((tcp_len + self.data) as u16).to_be_bytes());
                f.extend([6, 64]);
                f.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, self.host]);
                f.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
            } else {
                f.extend([0x45, 0]);
                f.extend(((ip_len + tcp_len + self.data) as u16).to_be_bytes());
                f.extend([0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, self.host, 10, 0, 1, 1]);
            }
            f.extend(self.port.to_be_bytes());
            f.extend(80u16.to_be_bytes());
            f.extend(7u32.to_be_bytes()); // seq
            f.extend(self.ack.to_be_bytes());
            f.extend((((tcp_len / 4) as u16) << 12 | self.flags).to_be_bytes());
            f.extend([0xff, 0xff, 0, 0, 0, 0]);
            f.extend(&self.options);
            f.extend(std::iter::repeat(0).take(self.data));
            f
        }
    }

    fn queue(segs: &[Seg]) -> VecDeque<Packet> {
        segs.iter().enumerate().map(|(i, s)| Packet::new(i as u64, s.frame())).collect()
    }

    fn conservative(segs: &[Seg]) -> Option<usize> {
        redundant_ack(&queue(segs), false)
    }

    fn aggressive(segs: &[Seg]) -> Option<usize> {
        redundant_ack(&queue(segs), true)
    }

    #[test]
    fn two_redundant_acks_lose_the_oldest_and_one_only_when_aggressive() {
        assert_eq!(conservative(&[ack(1000), ack(2000), ack(3000)]), Some(0));
        assert_eq!(aggressive(&[ack(1000), ack(2000), ack(3000)]), Some(0));
        assert_eq!(conservative(&[ack(1000), ack(3000)]), None); // one always stays
        assert_eq!(aggressive(&[ack(1000), ack(3000)]), Some(0));
        assert_eq!(conservative(&[ack(1000)]), None);
        // Aggressive drops a lone one only right before the newest.
        assert_eq!(aggressive(&[ack(1000), ack(1500).data(1448), ack(3000)]), None);
        // Only the newest packet triggers; an ACK with data may, a SYN may not.
        assert_eq!(conservative(&[ack(1000), ack(2000), ack(3000).data(100)]), Some(0));
        assert_eq!(aggressive(&[ack(1000), ack(3000).flags(TCP_ACK | TCP_SYN)]), None);
        assert_eq!(aggressive(&[ack(1000), ack(3000).flags(0)]), None);
        assert_eq!(conservative(&[ack(1000).v6(), ack(2000).v6(), ack(3000).v6()]), Some(0));
    }

    #[test]
    fn only_pure_acks_of_the_same_connection_that_say_no_more_may_go() {
        // Aggressive, so that when the older cannot go the one between (adjacent to the newest) does.
        let newer = || [ack(2000), ack(3000)];
        let with = |older: Seg| {
            let mut q = vec![older];
            q.extend(newer());
            aggressive(&q)
        };
        assert_eq!(with(ack(1000)), Some(0));
        assert_eq!(with(ack(1000).data(1)), Some(1), "data: not droppable, the next pure ACK goes");
        assert_eq!(with(ack(1000).port(40001)), Some(1), "another connection");
        assert_eq!(with(ack(1000).v6()), Some(1), "another connection");
        for flag in [TCP_SYN, crate::wire::TCP_FIN, 0x0008 /* PSH */, 0x0004 /* RST */, 0x0020 /* URG */, 0x0100 /* AE */] {
            assert_eq!(with(ack(1000).flags(TCP_ACK | flag)), Some(1), "flag {flag:#x}");
        }
        assert_eq!(with(ack(5000)), Some(1), "it acknowledges more than the newest");
        assert_eq!(conservative(&[ack(3000), ack(3000), ack(3000)]), None, "the same ACK with no more SACKed");
        assert_eq!(with(ack(1000).option(3, &[7])), Some(1), "window scale: a SYN's option");
        assert_eq!(with(ack(1000).option(30, &[0, 0])), Some(1), "an unknown option");
        assert_eq!(with(ack(1000).option(19, &[0; 16])), Some(0), "MD5 says nothing of the state");
    }

    #[test]
    fn timestamps_may_not_go_back() {
        let newest = ack(3000).timestamps(500, 90);
        assert_eq!(conservative(&[ack(1000).timestamps(400, 80), ack(2000).timestamps(450, 85), newest.clone()]), Some(0));
        assert_eq!(conservative(&[ack(1000).timestamps(501, 80), ack(2000).timestamps(450, 85), newest.clone()]), None);
        assert_eq!(conservative(&[ack(1000).timestamps(400, 91), ack(2000).timestamps(450, 85), newest]), None);
        // With no timestamps the newest counts as (0, 0): any older timestamp is later.
        assert_eq!(conservative(&[ack(1000).timestamps(400, 80), ack(2000).timestamps(450, 85), ack(3000)]), None);
        // The sequence space wraps.
        assert_eq!(aggressive(&[ack(u32::MAX - 10).timestamps(u32::MAX, 1), ack(5).timestamps(3, 2)]), Some(0));
    }

    #[test]
    fn the_newest_must_sack_all_the_older_did() {
        let at = |older: Seg, newest: Seg| aggressive(&[older, newest]);
        // Same cumulative ACK: droppable only if the newest SACKs strictly more.
        assert_eq!(at(ack(1000), ack(1000).sack(&[(5000, 6000)])), Some(0));
        assert_eq!(at(ack(1000).sack(&[(5000, 6000)]), ack(1000).sack(&[(5000, 7000)])), Some(0));
        assert_eq!(at(ack(1000).sack(&[(5000, 6000)]), ack(1000).sack(&[(5000, 6000)])), None);
        assert_eq!(at(ack(1000).sack(&[(5000, 6000)]), ack(1000).sack(&[(7000, 8000)])), None);
        assert_eq!(at(ack(1000).sack(&[(5000, 6000)]), ack(1000)), None, "the newest forgets a block");
        assert_eq!(at(ack(1000).sack(&[(5000, 6000), (8000, 9000)]), ack(1000).sack(&[(4000, 9000)])), Some(0));
        // A higher cumulative ACK with the same blocks says more.
        assert_eq!(at(ack(1000).sack(&[(5000, 6000)]), ack(2000).sack(&[(5000, 6000)])), Some(0));
        // A D-SACK (below its own ACK) is news of a duplicate: never dropped.
        assert_eq!(at(ack(3000).sack(&[(1000, 2000)]), ack(4000).sack(&[(1000, 2000), (5000, 6000)])), None);
    }

    #[test]
    fn a_change_of_ece_or_cwr_keeps_the_ack_before_it() {
        let ece = |s: Seg| s.flags(TCP_ACK | TCP_ECE);
        // A carries ECE, B does not: A stays, B alone is eligible.
        assert_eq!(conservative(&[ece(ack(1000)), ack(2000), ack(3000)]), None);
        assert_eq!(aggressive(&[ece(ack(1000)), ack(2000), ack(3000)]), Some(1));
        // Aggressive drops a lone one only if the newest's ECN flags match it.
        assert_eq!(aggressive(&[ack(2000), ece(ack(3000))]), None);
        assert_eq!(conservative(&[ece(ack(1000)), ece(ack(2000)), ece(ack(3000))]), Some(0));
    }

    fn cake(filter: AckFilter) -> Harness {
        Harness::new(QueueConfig::Cake(Limit::Packets(1000), CakeParams { ack_filter: filter, flow_mode: FlowMode::Flows, ..Default::default() }))
    }

    fn offer(h: &mut Harness, t: u64, seg: &Seg) -> u64 {
        let mut p = h.packet(0, crate::wire::Ecn::NotEct, 64);
        p.data = seg.frame();
        p.wire_len = p.data.len() as u32;
        h.offer(t, p)
    }

    #[test]
    fn through_cake_the_redundant_ack_is_dropped_counted_and_the_rest_keep_their_order() {
        let mut h = cake(AckFilter::Conservative);
        let ids: Vec<u64> = [ack(1000), ack(2000), ack(3000), ack(4000)].iter().map(|s| offer(&mut h, 0, s)).collect();
        // The third drops the first; the fourth drops the second.
        assert_eq!(h.drops().iter().map(|&(_, id, r)| (id, r)).collect::<Vec<_>>(),
                   vec![(ids[0], DropReason::AckFilter), (ids[1], DropReason::AckFilter)]);
        assert_eq!(h.drain(1), vec![ids[2], ids[3]]);
        let tins = h.q.tins();
        assert_eq!(tins.iter().map(|t| t.stats.ack_drops).sum::<u64>(), 2);
        assert_eq!(tins.iter().map(|t| t.stats.drops).sum::<u64>(), 0, "counted apart from drops, as Linux does");
        assert_eq!(tins.iter().map(|t| t.stats.packets).sum::<u64>(), 4);
        // Off, nothing goes.
        let mut h = cake(AckFilter::Off);
        for s in [ack(1000), ack(2000), ack(3000)] {
            offer(&mut h, 0, &s);
        }
        assert!(h.drops().is_empty() && h.drain(1).len() == 3);
    }

    #[test]
    fn random_acks_and_data_keep_the_books_and_every_connections_newest_ack() {
        // Three connections' ACKs (some with SACK, some with data) arrive and leave at random;
        // the harness checks the queue's accounting after every step. Whatever the filter drops,
        // each connection's highest ACK leaves the queue.
        for filter in AckFilter::ALL {
            let mut h = cake(filter);
            let mut rng = Rng::new(11);
            let mut highest = [0u32; 3];
            let mut sent_max = [0u32; 3];
            let mut acks = [1000u32; 3];
            let mut t = 0;
            for _ in 0..20_000 {
                t += 1000;
                let c = rng.below_incl(2) as usize;
                acks[c] += 1448 * (1 + rng.below_incl(1) as u32);
                let mut s = ack(acks[c]).port(40000 + c as u16);
                if rng.chance(1.0 / 8.0) {
                    s = s.sack(&[(acks[c] + 2896, acks[c] + 4344)]);
                }
                if rng.chance(1.0 / 16.0) {
                    s = s.data(100);
                }
                highest[c] = acks[c];
                offer(&mut h, t, &s);
                if rng.chance(1.0 / 3.0) {
                    if let Some(p) = h.dequeue(t) {
                        let seg = tcp_segment(&p.data).unwrap();
                        let c = (u16::from_be_bytes([seg.ports[0], seg.ports[1]]) - 40000) as usize;
                        sent_max[c] = sent_max[c].max(seg.ack);
                    }
                }
            }
            for p in std::iter::from_fn(|| h.dequeue(t + 1)) {
                let seg = tcp_segment(&p.data).unwrap();
                let c = (u16::from_be_bytes([seg.ports[0], seg.ports[1]]) - 40000) as usize;
                sent_max[c] = sent_max[c].max(seg.ack);
            }
            assert_eq!(sent_max, highest, "{filter:?}");
            let dropped = h.drops().len();
            match filter {
                AckFilter::Off => assert_eq!(dropped, 0),
                _ => assert!(dropped > 1000, "{filter:?}: {dropped}"),
            }
        }
    }
}
