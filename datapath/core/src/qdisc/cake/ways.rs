//! CAKE's 8-way set-associative tables, one of flow queues and one of host slots per tin: a
//! hash's home slot is hash mod 1024, and it may take any of the 8 ways of that slot's set,
//! so flows rarely share a queue, and a lookup costs at most 16 compares.

/// Flow queues (and host slots) per tin, and ways per set (Linux's CAKE_QUEUES, CAKE_SET_WAYS).
pub const QUEUES: usize = 1024;
pub const WAYS: usize = 8;

/// How a flow found its queue (the tin's way counters count the last three).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Its home slot, already its own.
    Home,
    /// A way of its set that it holds; `indirect` when not its home slot.
    Hit { indirect: bool },
    /// A free way of its set.
    Miss,
    /// Every way taken: its home slot, shared with whoever holds it.
    Collision,
}

/// The queue of `hash` among `tags`, where `taken(k)` says queue k holds packets or state.
pub fn place(tags: &[u32], hash: u32, taken: impl Fn(usize) -> bool) -> (usize, Placement) {
    let home = hash as usize % QUEUES;
    if tags[home] == hash && taken(home) {
        return (home, Placement::Home);
    }
    let set = set_of(home);
    if let Some((i, k)) = set.clone().enumerate().find(|&(_, k)| tags[k] == hash) {
        return (k, Placement::Hit { indirect: i > 0 });
    }
    match set.clone().find(|&k| !taken(k)) {
        Some(k) => (k, Placement::Miss),
        None => (home, Placement::Collision),
    }
}

/// The ways of `home`'s set, from `home` round.
fn set_of(home: usize) -> impl Iterator<Item = usize> + Clone {
    let (inner, outer) = (home % WAYS, home - home % WAYS);
    (0..WAYS).map(move |i| outer + (inner + i) % WAYS)
}

/// A host slot: its tags as a source and as a destination, and how many of its flows are bulk
/// in each role.
#[derive(Clone, Default)]
pub struct Host {
    pub src_tag: u32,
    pub dst_tag: u32,
    pub src_bulk: u32,
    pub dst_bulk: u32,
}

/// The host slot of `hash` as a source (`src`) or a destination: its own if tagged, else a
/// free one (no bulk flows), else its home slot, shared. The slot is tagged with it.
pub fn claim_host(hosts: &mut [Host], hash: u32, src: bool) -> usize {
    let home = hash as usize % QUEUES;
    let tag = |h: &Host| if src { h.src_tag } else { h.dst_tag };
    let bulk = |h: &Host| if src { h.src_bulk } else { h.dst_bulk };
    let k = set_of(home)
        .find(|&k| tag(&hosts[k]) == hash)
        .or_else(|| set_of(home).find(|&k| bulk(&hosts[k]) == 0))
        .unwrap_or(home);
    if src {
        hosts[k].src_tag = hash;
    } else {
        hosts[k].dst_tag = hash;
    }
    k
}
