//! Why a packet was dropped or marked: the reasons every counter, log and report names.
//! Its own module, below both the queue disciplines that decide and the statistics that count.

/// Why a packet was dropped. The discriminant is the code written to queue logs.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The link's emulated random loss.
    Loss = 1,
    /// The queue was at its limit; the arriving packet was refused.
    QueueFull = 2,
    /// The queue was full; the oldest packet made room (drop-head).
    HeadDrop = 3,
    /// Larger than the link's largest frame (a super-frame that escaped offload settings).
    Oversize = 4,
    /// Shorter than an Ethernet header.
    Runt = 5,
    /// RED: the average queue was between the thresholds and the coin said drop.
    RedEarly = 6,
    /// RED: the average queue was above the maximum threshold (or harddrop).
    RedForced = 7,
    /// CoDel's control law (CoDel, or a flow of FQ-CoDel), sojourn above target for an interval.
    Codel = 8,
    /// PIE's random early drop.
    PieEarly = 9,
    /// FQ-CoDel over its packet or memory limit: a batch dropped from the fattest flow's head.
    FqOverflow = 10,
    /// CAKE: COBALT's CoDel half, on a packet that was not ECN-capable.
    Cobalt = 11,
    /// CAKE: COBALT's BLUE half, on a flow that kept overflowing the buffer.
    Blue = 12,
    /// CAKE over its buffer: the head of the fattest flow, of any tin.
    CakeOverflow = 13,
    /// CAKE's ACK filter: a pure TCP ACK that a later one in its flow's queue makes redundant.
    AckFilter = 14,
    /// DualPI2: a classic-queue packet dropped with probability p'^2 (not ECN-capable, or any
    /// packet while the queue is overloaded).
    DualPi2Classic = 15,
    /// DualPI2 overloaded (k * p' above 1) with drop_on_overload: an L-queue packet dropped
    /// with probability p'^2, as a classic one would be.
    DualPi2Overload = 16,
}

impl DropReason {
    pub const ALL: [DropReason; 16] = [
        DropReason::Loss,
        DropReason::QueueFull,
        DropReason::HeadDrop,
        DropReason::Oversize,
        DropReason::Runt,
        DropReason::RedEarly,
        DropReason::RedForced,
        DropReason::Codel,
        DropReason::PieEarly,
        DropReason::FqOverflow,
        DropReason::Cobalt,
        DropReason::Blue,
        DropReason::CakeOverflow,
        DropReason::AckFilter,
        DropReason::DualPi2Classic,
        DropReason::DualPi2Overload,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            DropReason::Loss => "loss",
            DropReason::QueueFull => "queue_full",
            DropReason::HeadDrop => "head_drop",
            DropReason::Oversize => "oversize",
            DropReason::Runt => "runt",
            DropReason::RedEarly => "red_early",
            DropReason::RedForced => "red_forced",
            DropReason::Codel => "codel",
            DropReason::PieEarly => "pie_early",
            DropReason::FqOverflow => "fq_overflow",
            DropReason::Cobalt => "cobalt",
            DropReason::Blue => "blue",
            DropReason::CakeOverflow => "cake_overflow",
            DropReason::AckFilter => "ack_filter",
            DropReason::DualPi2Classic => "dualpi2_classic",
            DropReason::DualPi2Overload => "dualpi2_overload",
        }
    }
    pub fn index(self) -> usize {
        self as usize - 1
    }
}

/// Why a packet was marked Congestion Experienced instead of dropped (it was ECN-capable).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkReason {
    RedEarly = 1,
    RedForced = 2,
    Codel = 3,
    Pie = 4,
    Cobalt = 5,
    /// DualPI2: an ECN-capable classic-queue packet, with probability p'^2.
    DualPi2Classic = 6,
    /// DualPI2: an L-queue packet, with the coupled probability min(k * p', 1).
    DualPi2Coupled = 7,
    /// DualPI2: an L-queue packet that waited longer than the step threshold.
    DualPi2Step = 8,
}

impl MarkReason {
    pub const ALL: [MarkReason; 8] = [
        MarkReason::RedEarly,
        MarkReason::RedForced,
        MarkReason::Codel,
        MarkReason::Pie,
        MarkReason::Cobalt,
        MarkReason::DualPi2Classic,
        MarkReason::DualPi2Coupled,
        MarkReason::DualPi2Step,
    ];
    pub const COUNT: usize = Self::ALL.len();
    pub fn name(self) -> &'static str {
        match self {
            MarkReason::RedEarly => "red_early",
            MarkReason::RedForced => "red_forced",
            MarkReason::Codel => "codel",
            MarkReason::Pie => "pie",
            MarkReason::Cobalt => "cobalt",
            MarkReason::DualPi2Classic => "dualpi2_classic",
            MarkReason::DualPi2Coupled => "dualpi2_coupled",
            MarkReason::DualPi2Step => "dualpi2_step",
        }
    }
    pub fn index(self) -> usize {
        self as usize - 1
    }
}

/// Why a packet was dropped or marked: the reasons are counted alike.
pub trait Reason: Copy + 'static {
    /// Every reason, in code order.
    const ALL: &'static [Self];
    fn name(self) -> &'static str;
    /// 0-based, below ALL.len().
    fn index(self) -> usize;
}

impl Reason for DropReason {
    const ALL: &'static [Self] = &DropReason::ALL;
    fn name(self) -> &'static str {
        DropReason::name(self)
    }
    fn index(self) -> usize {
        DropReason::index(self)
    }
}

impl Reason for MarkReason {
    const ALL: &'static [Self] = &MarkReason::ALL;
    fn name(self) -> &'static str {
        MarkReason::name(self)
    }
    fn index(self) -> usize {
        MarkReason::index(self)
    }
}
