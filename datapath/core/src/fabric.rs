//! Switches inside the datapath: learning bridges between link directions, so that a frame
//! crossing several links and switches enters the datapath once and leaves it once.
//!
//! A switch learns which port each source address sits behind and forwards by destination, as
//! a Linux bridge does: broadcast, multicast and unknown destinations go out of every other
//! port, and a frame for the port it came in by is filtered. Several workers forward through
//! one switch, so its address table is lock-free: one atomic word per entry, written only when
//! an address is new or has moved. Links that would close a loop between switches are blocked
//! from the start, as a spanning tree would block them (the topology is known, so no STP runs),
//! and a flood never circles. No clock: addresses never age, as hosts do not move in an
//! emulated network.

use std::sync::atomic::{AtomicU64, Ordering};

/// A link direction, by its index in the datapath's config (link i: 2i forward, 2i+1 reverse).
pub type DirId = usize;

/// What is at the far end of a switch's port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Another switch of this fabric, over link `link`.
    Switch { switch: usize, link: usize },
    /// A host, or a switch outside the datapath (a namespace with a bridge).
    External,
}

/// One port of a switch: the link direction that carries frames out of it, and its far end.
#[derive(Clone, Copy, Debug)]
pub struct PortSpec {
    pub out: DirId,
    pub peer: Peer,
}

/// What a switch did with a frame, for the counters of whoever forwarded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// To the one port its destination was learnt behind.
    Forwarded,
    /// Broadcast, multicast or an unknown destination: out of every other open port.
    Flooded,
    /// Its destination sits behind the port it came in by.
    Filtered,
    /// It came in by a port blocked to break a loop.
    Blocked,
}

/// A switch's counters, one per RouteKind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchCounts {
    pub forwarded: u64,
    pub flooded: u64,
    pub filtered: u64,
    pub blocked: u64,
}

impl SwitchCounts {
    pub fn add(&mut self, kind: RouteKind) {
        match kind {
            RouteKind::Forwarded => self.forwarded += 1,
            RouteKind::Flooded => self.flooded += 1,
            RouteKind::Filtered => self.filtered += 1,
            RouteKind::Blocked => self.blocked += 1,
        }
    }
    pub fn merge(&mut self, o: &SwitchCounts) {
        self.forwarded += o.forwarded;
        self.flooded += o.flooded;
        self.filtered += o.filtered;
        self.blocked += o.blocked;
    }
}

struct Switch {
    ports: Vec<PortSpec>,
    blocked: Vec<bool>,
    table: MacTable,
}

/// Every switch of a datapath.
pub struct Fabric {
    switches: Vec<Switch>,
}

impl Fabric {
    /// Switches by index, each with its ports in order. Ports between switches that are not on
    /// a breadth-first spanning tree (from switch 0, then each not yet reached) are blocked.
    pub fn new(switches: Vec<Vec<PortSpec>>) -> Fabric {
        let n = switches.len();
        let mut reached = vec![false; n];
        let mut tree_links = std::collections::HashSet::new();
        for root in 0..n {
            if reached[root] {
                continue;
            }
            reached[root] = true;
            let mut queue = std::collections::VecDeque::from([root]);
            while let Some(s) = queue.pop_front() {
                for p in &switches[s] {
                    if let Peer::Switch { switch, link } = p.peer {
                        if !reached[switch] {
                            reached[switch] = true;
                            tree_links.insert(link);
                            queue.push_back(switch);
                        }
                    }
                }
            }
        }
        let switches = switches
            .into_iter()
            .map(|ports| {
                let blocked = ports.iter().map(|p| matches!(p.peer, Peer::Switch { link, .. } if !tree_links.contains(&link))).collect();
                Switch { ports, blocked, table: MacTable::new() }
            })
            .collect();
        Fabric { switches }
    }

    pub fn len(&self) -> usize {
        self.switches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.switches.is_empty()
    }

    /// Whether a port is blocked to break a loop.
    pub fn blocked(&self, switch: usize, port: usize) -> bool {
        self.switches[switch].blocked[port]
    }

    /// A frame came into `switch` by `port`: learns its source there and appends the link
    /// directions it leaves by to `out` (none when filtered or blocked).
    pub fn route(&self, switch: usize, port: usize, frame: &[u8], out: &mut Vec<DirId>) -> RouteKind {
        let s = &self.switches[switch];
        if s.blocked[port] {
            return RouteKind::Blocked;
        }
        let (Some(dst), Some(src)) = (mac(frame, 0), mac(frame, 6)) else {
            return RouteKind::Filtered; // no Ethernet header: pipelines drop runts before this
        };
        if src & MULTICAST_BIT == 0 {
            s.table.learn(src, port);
        }
        if dst & MULTICAST_BIT == 0 {
            match s.table.lookup(dst) {
                Some(p) if p == port => return RouteKind::Filtered,
                Some(p) if !s.blocked[p] => {
                    out.push(s.ports[p].out);
                    return RouteKind::Forwarded;
                }
                _ => {}
            }
        }
        out.extend(s.ports.iter().enumerate().filter(|&(p, _)| p != port && !s.blocked[p]).map(|(_, spec)| spec.out));
        RouteKind::Flooded
    }
}

/// The group bit of the first octet, where `mac` packs an address into a u64.
const MULTICAST_BIT: u64 = 1 << 40;

/// The six bytes at `at`, big-endian in the low 48 bits.
fn mac(frame: &[u8], at: usize) -> Option<u64> {
    let b = frame.get(at..at + 6)?;
    Some(b.iter().fold(0u64, |acc, &x| acc << 8 | x as u64))
}

/// Address -> port, open addressing over atomic words: the address in the high 48 bits, the
/// port plus one in the low 16 (0: an empty slot). Readers never wait; a writer claims an
/// empty slot with a compare-and-swap. Entries are never removed, so a probe stops at the
/// first empty slot; a full probe run overwrites its first slot (that address is learnt again
/// the next time it sends).
struct MacTable {
    slots: Box<[AtomicU64]>,
}

impl MacTable {
    const SLOTS: usize = 4096;
    const PROBES: usize = 16;

    fn new() -> Self {
        MacTable { slots: (0..Self::SLOTS).map(|_| AtomicU64::new(0)).collect() }
    }

    fn home(mac: u64) -> usize {
        (mac.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % Self::SLOTS
    }

    fn slot(&self, mac: u64, i: usize) -> &AtomicU64 {
        &self.slots[(Self::home(mac) + i) % Self::SLOTS]
    }

    fn lookup(&self, mac: u64) -> Option<usize> {
        for i in 0..Self::PROBES {
            match self.slot(mac, i).load(Ordering::Relaxed) {
                0 => return None,
                v if v >> 16 == mac => return Some((v & 0xffff) as usize - 1),
                _ => {}
            }
        }
        None
    }

    fn learn(&self, mac: u64, port: usize) {
        let want = mac << 16 | (port as u64 + 1);
        for i in 0..Self::PROBES {
            let slot = self.slot(mac, i);
            let mut v = slot.load(Ordering::Relaxed);
            if v == 0 {
                match slot.compare_exchange(0, want, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return,
                    Err(now) => v = now, // another worker took it meanwhile
                }
            }
            if v == want {
                return;
            }
            if v >> 16 == mac {
                slot.store(want, Ordering::Relaxed); // moved
                return;
            }
        }
        self.slot(mac, 0).store(want, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
        let mut f = Vec::from(dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00]);
        f.resize(60, 0);
        f
    }

    const H1: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const H2: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const H3: [u8; 6] = [2, 0, 0, 0, 0, 3];
    const BROADCAST: [u8; 6] = [0xff; 6];

    fn ext(out: DirId) -> PortSpec {
        PortSpec { out, peer: Peer::External }
    }

    fn route(f: &Fabric, switch: usize, port: usize, frame: &[u8]) -> (RouteKind, Vec<DirId>) {
        let mut out = Vec::new();
        let kind = f.route(switch, port, frame, &mut out);
        (kind, out)
    }

    #[test]
    fn a_switch_floods_until_it_has_learnt_then_forwards_to_one_port() {
        // s0 with three hosts: port p carries frames out by direction 10 + p.
        let f = Fabric::new(vec![vec![ext(10), ext(11), ext(12)]]);
        // h1 asks for h2 (ARP): flooded to the other two ports.
        assert_eq!(route(&f, 0, 0, &frame(BROADCAST, H1)), (RouteKind::Flooded, vec![11, 12]));
        // h2 answers h1, learnt behind port 0 from its broadcast: one port.
        assert_eq!(route(&f, 0, 1, &frame(H1, H2)), (RouteKind::Forwarded, vec![10]));
        assert_eq!(route(&f, 0, 0, &frame(H2, H1)), (RouteKind::Forwarded, vec![11]));
        // h3 has sent nothing yet: unknown, flooded.
        assert_eq!(route(&f, 0, 0, &frame(H3, H1)), (RouteKind::Flooded, vec![11, 12]));
        // A frame for the port it came by goes nowhere.
        assert_eq!(route(&f, 0, 0, &frame(H1, H2)), (RouteKind::Filtered, vec![]));
        // h1 moves to port 2: learnt again.
        route(&f, 0, 2, &frame(BROADCAST, H1));
        assert_eq!(route(&f, 0, 1, &frame(H1, H2)), (RouteKind::Forwarded, vec![12]));
    }

    #[test]
    fn multicast_is_flooded_and_never_learnt_as_a_source() {
        let f = Fabric::new(vec![vec![ext(0), ext(1)]]);
        let group = [0x33, 0x33, 0, 0, 0, 1];
        assert_eq!(route(&f, 0, 0, &frame(group, H1)).0, RouteKind::Flooded);
        route(&f, 0, 1, &frame(H1, group)); // a bogus multicast source
        assert_eq!(route(&f, 0, 0, &frame(group, H2)), (RouteKind::Flooded, vec![1]));
    }

    #[test]
    fn a_loop_of_switches_is_broken_and_a_flood_reaches_every_host_once() {
        // s0, s1, s2 in a triangle (links 0: s0-s1, 1: s1-s2, 2: s2-s0), a host on each.
        // Directions: each switch's ports are [host, to next, to previous].
        let sw = |s: usize| {
            let (next, prev) = ((s + 1) % 3, (s + 2) % 3);
            vec![ext(100 + s), PortSpec { out: 10 * s + 1, peer: Peer::Switch { switch: next, link: s } },
                 PortSpec { out: 10 * s + 2, peer: Peer::Switch { switch: prev, link: prev } }]
        };
        let f = Fabric::new((0..3).map(sw).collect());
        // BFS from s0 keeps s0-s1 (link 0) and s2-s0 (link 2); s1-s2 (link 1) is blocked at both ends.
        assert!(!f.blocked(0, 1) && !f.blocked(0, 2));
        assert!(f.blocked(1, 1) && f.blocked(2, 2));
        assert!(!f.blocked(1, 2) && !f.blocked(2, 1));
        // h0's broadcast: s0 floods to s1 and s2, which each give it to their host only.
        assert_eq!(route(&f, 0, 0, &frame(BROADCAST, H1)), (RouteKind::Flooded, vec![1, 2]));
        assert_eq!(route(&f, 1, 2, &frame(BROADCAST, H1)), (RouteKind::Flooded, vec![101]));
        assert_eq!(route(&f, 2, 1, &frame(BROADCAST, H1)), (RouteKind::Flooded, vec![102]));
        // Whatever comes in by a blocked port is dropped.
        assert_eq!(route(&f, 1, 1, &frame(BROADCAST, H2)), (RouteKind::Blocked, vec![]));
    }

    #[test]
    fn the_table_keeps_thousands_of_addresses_and_survives_overflowing_a_probe_run() {
        let t = MacTable::new();
        for i in 0..3000u64 {
            t.learn(0x0200_0000_0000 | i, (i % 7) as usize);
        }
        let found = (0..3000u64).filter(|&i| t.lookup(0x0200_0000_0000 | i) == Some((i % 7) as usize)).count();
        // Open addressing at 73% load with 16 probes loses few, and never answers wrongly.
        assert!(found > 2900, "{found}");
        assert!((0..3000u64).all(|i| t.lookup(0x0200_0000_0000 | i).map_or(true, |p| p == (i % 7) as usize)));
        assert_eq!(t.lookup(0x0400_0000_0000), None);
    }

    #[test]
    fn two_threads_learning_at_once_agree() {
        let t = std::sync::Arc::new(MacTable::new());
        let handles: Vec<_> = (0..2)
            .map(|k| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        t.learn(0x0200_0000_0000 | (i * 2 + k), k as usize);
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        for i in 0..2000u64 {
            assert_eq!(t.lookup(0x0200_0000_0000 | i), Some((i % 2) as usize));
        }
    }
}
