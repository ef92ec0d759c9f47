//! CAKE's classes: the diffserv modes that sort packets by DSCP into tins (with each tin's
//! share of the shaper and its weight), and the flow modes that decide what a flow and a host
//! are. Tables and shares as Linux's sch_cake has them; tins are numbered as it stores them
//! (index 0 is best effort in diffserv3 and diffserv4, whose display order puts bulk first).

/// How packets are sorted into tins by their DSCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffservMode {
    /// One tin for everything.
    Besteffort,
    /// Eight tins by the three IP precedence bits (DSCP >> 3).
    Precedence,
    /// Eight tins: low effort, bulk, best effort, video (AF3x, AF4x, CS3), video (AF2x), CS2,
    /// voice (EF, VA, CS4, CS5), network control (CS6, CS7).
    Diffserv8,
    /// Best effort, bulk (1/16 of the rate), video (1/2), voice (1/4).
    Diffserv4,
    /// Best effort, bulk (1/16), voice (1/4). Linux's default.
    Diffserv3,
}

impl DiffservMode {
    pub const ALL: [DiffservMode; 5] = [
        DiffservMode::Besteffort,
        DiffservMode::Precedence,
        DiffservMode::Diffserv8,
        DiffservMode::Diffserv4,
        DiffservMode::Diffserv3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DiffservMode::Besteffort => "besteffort",
            DiffservMode::Precedence => "precedence",
            DiffservMode::Diffserv8 => "diffserv8",
            DiffservMode::Diffserv4 => "diffserv4",
            DiffservMode::Diffserv3 => "diffserv3",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The tins, by index: threshold rate and DRR weight.
    pub fn tins(self, rate_bytes_per_s: u64) -> Vec<TinShare> {
        let share = |name, shift: u32, quantum| TinShare { name, rate_bytes_per_s: rate_bytes_per_s >> shift, quantum };
        match self {
            DiffservMode::Besteffort => vec![share("Tin 0", 0, 65535)],
            DiffservMode::Precedence | DiffservMode::Diffserv8 => {
                // Each tin 7/8 of the one before, in rate and in weight.
                const NAMES: [&str; 8] = ["Tin 0", "Tin 1", "Tin 2", "Tin 3", "Tin 4", "Tin 5", "Tin 6", "Tin 7"];
                let (mut rate, mut quantum) = (rate_bytes_per_s, 256u32);
                NAMES
                    .iter()
                    .map(|&name| {
                        let tin = TinShare { name, rate_bytes_per_s: rate, quantum: quantum.max(1) };
                        rate = (rate * 7) >> 3;
                        quantum = (quantum * 7) >> 3;
                        tin
                    })
                    .collect()
            }
            DiffservMode::Diffserv4 => vec![
                share("Best Effort", 0, 1024),
                share("Bulk", 4, 64),
                share("Video", 1, 512),
                share("Voice", 2, 256),
            ],
            DiffservMode::Diffserv3 => vec![share("Best Effort", 0, 1024), share("Bulk", 4, 64), share("Voice", 2, 256)],
        }
    }

    /// The tin a DSCP goes to (`dscp` below 64).
    pub fn tin_of(self, dscp: u8) -> usize {
        let d = dscp as usize & 63;
        match self {
            DiffservMode::Besteffort => 0,
            DiffservMode::Precedence => d >> 3,
            DiffservMode::Diffserv8 => DIFFSERV8[d] as usize,
            DiffservMode::Diffserv4 => DIFFSERV4[d] as usize,
            DiffservMode::Diffserv3 => DIFFSERV3[d] as usize,
        }
    }

    /// Tin indices in the order `tc -s qdisc` lists them (bulk before best effort in
    /// diffserv3 and diffserv4, whose tin 0 is best effort).
    pub fn display_order(self) -> &'static [usize] {
        match self {
            DiffservMode::Diffserv3 => &[1, 0, 2],
            DiffservMode::Diffserv4 => &[1, 0, 2, 3],
            DiffservMode::Besteffort => &[0],
            DiffservMode::Precedence | DiffservMode::Diffserv8 => &[0, 1, 2, 3, 4, 5, 6, 7],
        }
    }
}

/// One tin's share: its threshold rate (the shaper serves it first while under this) and its
/// weight when the shaper is off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TinShare {
    pub name: &'static str,
    pub rate_bytes_per_s: u64,
    pub quantum: u32,
}

// DSCP (row of 8 per line, 0-7 first) to tin. Low effort (1) and CS1 (8) are bulk; EF (46),
// VA (44), CS6 (48), CS7 (56) and TOS4 (4) voice; diffserv4 adds video (CS2..AF4x) and moves
// CS4 and CS5 to voice; diffserv8 spreads them over eight tins.
#[rustfmt::skip]
const DIFFSERV8: [u8; 64] = [
    2, 0, 1, 2, 4, 2, 2, 2,
    1, 2, 1, 2, 1, 2, 1, 2,
    5, 2, 4, 2, 4, 2, 4, 2,
    3, 2, 3, 2, 3, 2, 3, 2,
    6, 2, 3, 2, 3, 2, 3, 2,
    6, 2, 2, 2, 6, 2, 6, 2,
    7, 2, 2, 2, 2, 2, 2, 2,
    7, 2, 2, 2, 2, 2, 2, 2,
];
#[rustfmt::skip]
const DIFFSERV4: [u8; 64] = [
    0, 1, 0, 0, 2, 0, 0, 0,
    1, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 2, 0, 2, 0, 2, 0,
    2, 0, 2, 0, 2, 0, 2, 0,
    3, 0, 2, 0, 2, 0, 2, 0,
    3, 0, 0, 0, 3, 0, 3, 0,
    3, 0, 0, 0, 0, 0, 0, 0,
    3, 0, 0, 0, 0, 0, 0, 0,
];
#[rustfmt::skip]
const DIFFSERV3: [u8; 64] = [
    0, 1, 0, 0, 2, 0, 0, 0,
    1, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 2, 0, 2, 0,
    2, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 0, 0, 0, 0, 0, 0,
];

/// What a flow is, and which hosts get fairness between them. Bit 0: source host matters,
/// bit 1: destination host, bit 2: flows (the 5-tuple) apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowMode {
    /// One queue for everything.
    Flowblind = 0,
    /// A queue per source host.
    Srchost = 1,
    /// A queue per destination host.
    Dsthost = 2,
    /// A queue per pair of hosts.
    Hosts = 3,
    /// A queue per flow, no host fairness.
    Flows = 4,
    /// Per flow, and fair between source hosts first.
    DualSrchost = 5,
    /// Per flow, and fair between destination hosts first.
    DualDsthost = 6,
    /// Per flow, and fair between source hosts and between destination hosts. Linux's default.
    TripleIsolate = 7,
}

impl FlowMode {
    pub const ALL: [FlowMode; 8] = [
        FlowMode::Flowblind,
        FlowMode::Srchost,
        FlowMode::Dsthost,
        FlowMode::Hosts,
        FlowMode::Flows,
        FlowMode::DualSrchost,
        FlowMode::DualDsthost,
        FlowMode::TripleIsolate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FlowMode::Flowblind => "flowblind",
            FlowMode::Srchost => "srchost",
            FlowMode::Dsthost => "dsthost",
            FlowMode::Hosts => "hosts",
            FlowMode::Flows => "flows",
            FlowMode::DualSrchost => "dual-srchost",
            FlowMode::DualDsthost => "dual-dsthost",
            FlowMode::TripleIsolate => "triple-isolate",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
    fn bits(self) -> u8 {
        self as u8
    }
    /// Flows are told apart by their 5-tuple (else by hosts alone).
    pub fn per_flow(self) -> bool {
        self.bits() & 4 != 0
    }
    /// A source host's flows share one flow's quantum (dual-srchost, triple-isolate).
    pub fn fair_sources(self) -> bool {
        self.bits() & 5 == 5
    }
    /// A destination host's flows share one flow's quantum (dual-dsthost, triple-isolate).
    pub fn fair_destinations(self) -> bool {
        self.bits() & 6 == 6
    }
    /// Without flows apart, which host hashes make the queue's key.
    pub fn keys_sources(self) -> bool {
        self.bits() & 1 != 0
    }
    pub fn keys_destinations(self) -> bool {
        self.bits() & 2 != 0
    }
}
