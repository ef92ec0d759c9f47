//! A worker: one thread serving a set of link directions, by default one worker per core.
//!
//! Frames come in through the rings of the veth ends the worker reads, and from switches: a
//! direction whose far end is a switch inside the datapath hands its departures to the switch,
//! which gives them to the directions leaving it, on this worker (directly) or on another one
//! (a lock-free queue). Within a worker every hand-off arrives at its exact virtual time: the
//! directions fed by switches are advanced in time order, merged with the frames handed to
//! them. A worker sleeps until the earliest departure of its directions less its learnt lead,
//! then spins; with nothing in flight it sleeps until a frame comes, costing nothing.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::io::Write;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bloatlab_core::fabric::{DirId, Fabric, SwitchCounts};
use bloatlab_core::pipeline::Departure;
use bloatlab_core::Instant;

use bloatlab_link::config::Batching;

use crate::clock::{monotonic_now, realtime_offset_ns, WakeupLead};
use crate::direction::{arrival_time, listens, recycle, Dir, LatenessHistogram, LatenessSummary, Output};
use crate::handoff::{Handoff, Inbox};
use crate::sched::{mark_arrival, RtGate, ThreadPriority, BATCHING, LAST_SLEEP_NS};
use crate::socket::RxRing;
use crate::wake::{sleep_ns, Epoll};

/// Frames taken from a ring per turn of the loop: a backlog is then sent on in batches that
/// stay in the cache, rather than copied whole into buffers and only then sent.
const RX_BATCH: usize = 64;
/// Longest timed sleep while frames are in flight (an idle worker sleeps until a frame comes).
const MAX_WAIT_NS: u64 = 10_000_000;
const PUBLISH_EVERY_NS: u64 = 100_000_000;
/// A transmit path idle this long is walked once (PacketSocket::warm) before the next send,
/// if that is due no sooner than the walk itself takes on a cold path.
const WARM_AFTER_IDLE_NS: u64 = 500_000;
const WARM_TAKES_NS: u64 = 15_000;
/// How often a worker with arrivals refreshes sched::LAST_ARRIVAL_NS; far below the second
/// the CPU latency request is held for.
const MARK_ARRIVAL_NS: u64 = 10_000_000;
/// A worker with at most this many rings reads every one on every turn. One with more reads
/// only those of directions in flight and those epoll found readable, and looks for readable
/// ones this often while it does not sleep (a frame is taken at its kernel stamp, so a look
/// this late costs it nothing where delay lies ahead).
const ALWAYS_READ_RINGS: usize = 8;
const LOOK_EVERY_NS: u64 = 20_000;

/// Tokens of the worker's epoll set beside its rings' indexes.
const TOKEN_INBOX: u64 = u64::MAX;
const TOKEN_STOP: u64 = u64::MAX - 1;

/// How a worker behaves (the config's settings).
#[derive(Clone, Copy)]
pub struct Settings {
    /// The least lead before a departure; 0 sleeps only.
    pub spin_ns: u64,
    pub max_lead_ns: u64,
    /// The share of recent wake-ups the lead covers.
    pub lead_quantile: f64,
    /// The share of each 10 ms it may spin (batching's, while batching).
    pub spin_share: f64,
    pub rt_priority: i32,
    pub batching: Option<Batching>,
}

impl Settings {
    /// A direction's (or the worker's) learnt lead, within the settings' bounds.
    pub fn wakeup_lead(&self) -> WakeupLead {
        WakeupLead::covering(self.spin_ns, self.max_lead_ns.max(self.spin_ns), self.lead_quantile)
    }
}

/// A ring a worker reads, and the direction its frames enter.
pub struct Ring {
    pub rx: RxRing,
    pub dir: usize,
    hot: bool,
}

impl Ring {
    pub fn new(rx: RxRing, dir: usize) -> Self {
        Ring { rx, dir, hot: true }
    }
}

/// A worker thread's CPU time since it started: in its own code and in the kernel (where the
/// frames are copied in and out, and the receiving host's stack runs: a veth delivers inline).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadCpu {
    pub user_ns: u64,
    pub kernel_ns: u64,
}

impl ThreadCpu {
    /// The calling thread's.
    fn now() -> Self {
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        ThreadCpu { user_ns: ns(u.ru_utime), kernel_ns: ns(u.ru_stime) }
    }
}

/// What the main thread reports for a worker.
#[derive(Clone, Default)]
pub struct WorkerReport {
    pub cpu: ThreadCpu,
    /// Sleeps past the spin share while batching (sched::CpuPressure).
    pub batch_sleeps: u64,
    /// How late its timed sleeps ended: the machine's wake-ups as this worker met them.
    pub wakeups: LatenessSummary,
    /// Frames handed to other workers, and those lost because one's queue was full.
    pub handed_on: u64,
    pub handoffs_lost: u64,
    /// What the switches did with the frames this worker forwarded, by switch.
    pub switches: Vec<SwitchCounts>,
}

pub struct Worker {
    pub id: usize,
    pub dirs: Vec<Dir>,
    pub rings: Vec<Ring>,
    pub fabric: Arc<Fabric>,
    /// Every direction's worker and index there, by DirId.
    pub place: Arc<Vec<(usize, usize)>>,
    pub inboxes: Arc<Vec<Inbox>>,
    pub report: Arc<Mutex<WorkerReport>>,
    pub settings: Settings,
    /// The process's stop bell (rung by the signal handler).
    pub stop_bell: RawFd,
}

/// A frame due to arrive at one of the worker's directions, in time order (ties: as handed).
struct Pending {
    at: Instant,
    seq: u64,
    dir: usize,
    data: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Caps the share of time a worker spends spinning (the config's spin_share, or Batching's
/// smaller one), so that at high packet rates (where a departure is always near) the datapath does not
/// take a whole core from the hosts' stacks; past the cap it sleeps and departures are a little
/// late instead.
#[derive(Default)]
struct SpinBudget {
    window_start: u64,
    spun_ns: u64,
    /// When the worker last chose to spin on, while it has not slept since.
    spinning_since: Option<u64>,
}

impl SpinBudget {
    const WINDOW_NS: u64 = 10_000_000;
    fn allows(&mut self, now: u64, share: f64) -> bool {
        if now - self.window_start >= Self::WINDOW_NS {
            self.window_start = now;
            self.spun_ns = 0;
        }
        (self.spun_ns as f64) < share * Self::WINDOW_NS as f64
    }
    /// The worker spins on at `now`: all the time since its previous choice to spin counts,
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

/// The working state of a run: what is in flight between the directions, and scratch space.
struct Flight {
    /// Frames handed to directions fed by switches, not yet arrived.
    pending: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    /// The next departure of each direction fed by switches, earliest first; an entry that no
    /// longer matches `scheduled` is stale and skipped.
    deadlines: BinaryHeap<Reverse<(Instant, usize)>>,
    scheduled: Vec<Option<Instant>>,
    out: Vec<Departure>,
    targets: Vec<DirId>,
    spare: Vec<Vec<u8>>,
    /// Directions with frames to send, and those whose logs have something new.
    to_send: Vec<usize>,
    sending: Vec<bool>,
    touched: Vec<usize>,
    is_touched: Vec<bool>,
    report: WorkerReport,
}

impl Flight {
    fn touch(&mut self, d: usize) {
        if !std::mem::replace(&mut self.is_touched[d], true) {
            self.touched.push(d);
        }
    }
}

impl Worker {
    pub fn run(&mut self, stop: &AtomicBool, gate: &RtGate) -> std::io::Result<()> {
        let s = self.settings;
        let mut priority = ThreadPriority::new(s.rt_priority);
        priority.update(gate, false, monotonic_now().nanos());
        let mut epoll = Epoll::new()?;
        for (i, r) in self.rings.iter().enumerate() {
            epoll.add(r.rx.socket().fd(), i as u64)?;
        }
        epoll.add(self.inboxes[self.id].bell.fd(), TOKEN_INBOX)?;
        epoll.add(self.stop_bell, TOKEN_STOP)?;
        let read_all = self.rings.len() <= ALWAYS_READ_RINGS;
        let inboxes = self.inboxes.clone();
        let inbox = &inboxes[self.id];
        // The shortest delay of any direction: a sleep within it need not wake for arrivals.
        let shortest_delay_ns = self.dirs.iter().map(|d| d.pipe.shortest_delay().nanos()).min().unwrap_or(0);
        let n = self.dirs.len();
        let mut f = Flight {
            pending: BinaryHeap::new(),
            seq: 0,
            deadlines: BinaryHeap::new(),
            scheduled: vec![None; n],
            out: Vec::with_capacity(256),
            targets: Vec::new(),
            spare: Vec::new(),
            to_send: Vec::new(),
            sending: vec![false; n],
            touched: Vec::new(),
            is_touched: vec![false; n],
            report: WorkerReport { switches: vec![SwitchCounts::default(); self.fabric.len()], ..Default::default() },
        };
        let mut wakeups = LatenessHistogram::new();
        let mut spin = SpinBudget::default();
        // Each direction learns the lead of its own departures; this one, of frames handed on by
        // another worker and not yet due (their arrival is what the worker wakes for).
        let mut wakeup = s.wakeup_lead();
        let mut rt_offset = realtime_offset_ns();
        let mut last_publish = 0u64;
        let mut last_marked_ns = 0u64;
        let mut last_look = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let read_at = monotonic_now();
            if !read_all && read_at.nanos() - last_look >= LOOK_EVERY_NS {
                self.look(&mut epoll, Some(0));
                last_look = read_at.nanos();
            }
            // Arrivals from the veth ends first, each at the time the kernel received it rather
            // than when this worker woke: with delay ahead, a late wake-up then costs the frame
            // nothing. Each such direction is then advanced to its ring's next frame (or now),
            // so nothing leaves ahead of what that frame would change.
            let mut backlogged = false;
            let mut took = false;
            // How far every direction fed by a ring has been taken: to when its ring was read,
            // or, with frames still waiting there, to the first of them. Directions fed by
            // switches go no further this turn, so that whatever those hand on later arrives
            // in time order.
            let mut frontier: Option<Instant> = None;
            for r in 0..self.rings.len() {
                if !(read_all || self.rings[r].hot) {
                    continue;
                }
                let d = self.rings[r].dir;
                let dir = &mut self.dirs[d];
                let ring = &mut self.rings[r];
                let taken = ring.rx.recv(RX_BATCH, &mut f.spare, |frame, stamp| {
                    let t = arrival_time(stamp, rt_offset, dir.pipe.last_time(), read_at);
                    dir.pipe.arrive(t, frame)
                });
                let now = monotonic_now();
                let backlog = ring.rx.peek_stamp().map(|st| arrival_time(st, rt_offset, dir.pipe.last_time(), now));
                let until = backlog.unwrap_or(now);
                if taken > 0 || dir.pipe.next_departure().is_some_and(|t| t <= until) {
                    dir.poll(until, &mut f.out, rt_offset);
                    self.dispatch(d, &mut f);
                    f.touch(d);
                }
                took |= taken > 0;
                backlogged |= backlog.is_some();
                frontier = Some(frontier.map_or(until, |f| f.min(until)));
                let dir = &self.dirs[d];
                self.rings[r].hot = backlog.is_some() || dir.pipe.next_deadline().is_some();
            }
            if took && read_at.nanos() - last_marked_ns >= MARK_ARRIVAL_NS {
                mark_arrival(read_at.nanos());
                last_marked_ns = read_at.nanos();
            }
            // Then the directions fed by switches, in time order with the frames handed to them.
            while let Some(h) = inbox.take() {
                f.pending.push(Reverse(Pending { at: h.at, seq: f.seq, dir: h.dir, data: h.data }));
                f.seq += 1;
            }
            let now = monotonic_now();
            let until = frontier.map_or(now, |f| f.min(now));
            loop {
                let handed = f.pending.peek().map(|p| p.0.at);
                let due = self.next_deadline(&mut f);
                match (handed, due) {
                    (Some(at), d) if at <= until && d.map_or(true, |(t, _)| at <= t) => {
                        let Reverse(p) = f.pending.pop().unwrap();
                        self.dirs[p.dir].arrive_at(p.at, p.data);
                        self.reschedule(p.dir, &mut f);
                        f.touch(p.dir);
                    }
                    (_, Some((t, d))) if t <= until => {
                        f.deadlines.pop();
                        f.scheduled[d] = None;
                        self.dirs[d].poll(t, &mut f.out, rt_offset);
                        self.dispatch(d, &mut f);
                        self.reschedule(d, &mut f);
                        f.touch(d);
                    }
                    _ => break,
                }
            }
            for d in f.to_send.drain(..) {
                f.sending[d] = false;
                self.dirs[d].send(&mut f.spare);
            }
            for d in f.touched.drain(..) {
                f.is_touched[d] = false;
                self.dirs[d].write_logs(rt_offset, &mut f.spare)?;
            }
            if now.nanos() - last_publish >= PUBLISH_EVERY_NS {
                rt_offset = realtime_offset_ns(); // follows NTP adjustments of the wall clock
                self.publish(&mut f, &wakeups);
                last_publish = now.nanos();
            }
            priority.update(gate, backlogged, now.nanos());
            if backlogged {
                spin.sleeps();
                continue;
            }

            // Timer wake-ups run tens of microseconds late on a VM, later after long sleeps:
            // sleep until the learnt lead (at least `spin_ns`) before the next departure, then
            // spin (still taking arrivals) for the rest. Other deadlines (a frame done
            // serialising with delay still ahead) wake nobody: `poll` catches virtual time up
            // exactly whenever it runs. With spin_ns 0 the worker only sleeps.
            let now = monotonic_now().nanos();
            let Some((next, next_dir)) = self.next_departure(&mut f) else {
                // Nothing in flight: publish, then sleep until a frame or a stop comes.
                self.publish(&mut f, &wakeups);
                last_publish = now;
                spin.sleeps();
                if inbox.going_to_sleep() {
                    LAST_SLEEP_NS.store(0, Ordering::Relaxed);
                    self.look(&mut epoll, None);
                    inbox.woke();
                }
                continue;
            };
            let to_departure = next.nanos().saturating_sub(now);
            let learnt = match next_dir {
                Some(d) => &mut self.dirs[d].lead,
                None => &mut wakeup,
            };
            let lead = if s.spin_ns == 0 { 0 } else { learnt.lead_ns(to_departure, now) };
            // While the hosts wait for CPU (sched::CpuPressure), a worker past a smaller spin
            // share sleeps at least `sleep_ns`, deaf, and sends what fell due meanwhile at once.
            let batching = s.batching.filter(|_| BATCHING.load(Ordering::Relaxed));
            let sleep = if to_departure > lead {
                to_departure - lead
            } else if spin.allows(now, batching.map_or(s.spin_share, |b| b.spin_share)) {
                if let Some(d) = next_dir {
                    let dir = &mut self.dirs[d];
                    if let Output::Socket { tx, .. } = &dir.output {
                        if now.saturating_sub(dir.last_tx_ns) >= WARM_AFTER_IDLE_NS && to_departure >= WARM_TAKES_NS {
                            tx.warm();
                            dir.last_tx_ns = now;
                        }
                    }
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
            f.report.batch_sleeps += batch_sleep as u64;
            let listen = listens(sleep, shortest_delay_ns) && !(batch_sleep && sleep <= bloatlab_link::config::MAX_DEAF_NS);
            LAST_SLEEP_NS.store(sleep, Ordering::Relaxed);
            let interrupted = if listen {
                let slept = inbox.going_to_sleep() && !self.look(&mut epoll, Some(sleep));
                inbox.woke();
                !slept
            } else {
                sleep_ns(sleep);
                false
            };
            if !interrupted {
                // Woken by the timer, not by a frame: how late it came, for the lead of
                // departures as far ahead as this one (or of sleeps this long).
                let ahead = if sleep + lead == to_departure { to_departure } else { sleep };
                let woke = monotonic_now().nanos();
                let late = woke.saturating_sub(now + sleep);
                match next_dir {
                    Some(d) => self.dirs[d].lead.record(ahead, late, woke),
                    None => wakeup.record(ahead, late, woke),
                }
                wakeups.add(late);
            }
        }
        for r in &self.rings {
            let overruns = r.rx.socket().take_overruns();
            self.dirs[r.dir].rx_overrun += overruns;
        }
        let mut first_error = Ok(());
        for dir in &mut self.dirs {
            if let Err(e) = dir.finish(rt_offset) {
                eprintln!("bloatlab-link: {}: {e}", dir.name);
                first_error = first_error.and(Err(e));
            }
        }
        f.report.cpu = ThreadCpu::now();
        f.report.wakeups = wakeups.summary();
        *self.report.lock().unwrap() = f.report.clone();
        first_error
    }

    /// Closes its sockets, a few per thread at once: each packet socket's close waits for an RCU
    /// grace period (10-20 ms), so a worker of a hundred links closing them one after another
    /// took two seconds, where closes side by side share their grace periods.
    pub fn close(self) {
        const PER_THREAD: usize = 4;
        let mut sockets: Vec<Box<dyn Send>> = Vec::new();
        sockets.extend(self.rings.into_iter().map(|r| Box::new(r) as Box<dyn Send>));
        sockets.extend(self.dirs.into_iter().map(|d| Box::new(d) as Box<dyn Send>));
        std::thread::scope(|s| {
            while !sockets.is_empty() {
                let chunk: Vec<Box<dyn Send>> = sockets.drain(..sockets.len().min(PER_THREAD)).collect();
                s.spawn(move || drop(chunk));
            }
        });
    }

    /// Waits on the epoll set (Some(0): only looks): rings found readable are read from now on,
    /// the inbox's bell is silenced. Returns whether anything woke it.
    fn look(&mut self, epoll: &mut Epoll, timeout_ns: Option<u64>) -> bool {
        let (rings, inbox) = (&mut self.rings, &self.inboxes[self.id]);
        epoll.wait(timeout_ns, |token| match token {
            TOKEN_INBOX => inbox.bell.clear(),
            TOKEN_STOP => {}
            i => rings[i as usize].hot = true,
        })
    }

    /// The earliest valid entry of the deadlines of directions fed by switches.
    fn next_deadline(&self, f: &mut Flight) -> Option<(Instant, usize)> {
        while let Some(&Reverse((t, d))) = f.deadlines.peek() {
            if f.scheduled[d] == Some(t) {
                return Some((t, d));
            }
            f.deadlines.pop();
        }
        None
    }

    /// Puts a direction fed by switches back among the deadlines, at its next departure.
    fn reschedule(&self, d: usize, f: &mut Flight) {
        let next = self.dirs[d].pipe.next_departure();
        if next != f.scheduled[d] {
            f.scheduled[d] = next;
            if let Some(t) = next {
                f.deadlines.push(Reverse((t, d)));
            }
        }
    }

    /// What the worker must next wake for: the earliest departure of any direction in flight,
    /// or a frame handed on from another worker not yet due; with the direction it is for.
    fn next_departure(&self, f: &mut Flight) -> Option<(Instant, Option<usize>)> {
        let mut next: Option<(Instant, Option<usize>)> = None;
        let mut consider = |t: Instant, d: Option<usize>| {
            if next.map_or(true, |(n, _)| t < n) {
                next = Some((t, d));
            }
        };
        for r in self.rings.iter().filter(|r| r.hot) {
            if let Some(t) = self.dirs[r.dir].pipe.next_departure() {
                consider(t, Some(r.dir));
            }
        }
        if let Some((t, d)) = self.next_deadline(f) {
            consider(t, Some(d));
        }
        if let Some(p) = f.pending.peek() {
            consider(p.0.at, None);
        }
        next
    }

    /// Where direction `d`'s departures in `f.out` go: out of its veth end (sent at the end of
    /// the turn), or through a switch to the directions leaving it, here or on another worker.
    fn dispatch(&mut self, d: usize, f: &mut Flight) {
        if f.out.is_empty() {
            return;
        }
        let dir = &mut self.dirs[d];
        match &mut dir.output {
            Output::Socket { due, .. } => {
                due.append(&mut f.out);
                if !std::mem::replace(&mut f.sending[d], true) {
                    f.to_send.push(d);
                }
            }
            &mut Output::Switch { switch, port } => {
                for dep in f.out.drain(..) {
                    f.targets.clear();
                    let kind = self.fabric.route(switch, port, &dep.packet.data, &mut f.targets);
                    f.report.switches[switch].add(kind);
                    let mut data = Some(dep.packet.data);
                    let last = f.targets.len().saturating_sub(1);
                    for (k, &target) in f.targets.iter().enumerate() {
                        // A flood copies the frame for every port but the last.
                        let buf = if k == last { data.take().unwrap() } else { data.as_ref().unwrap().clone() };
                        let (w, local) = self.place[target];
                        if w == self.id {
                            f.pending.push(Reverse(Pending { at: dep.at, seq: f.seq, dir: local, data: buf }));
                            f.seq += 1;
                        } else if let Err(h) = self.inboxes[w].send(Handoff { at: dep.at, dir: local, data: buf }) {
                            // That worker is far behind: lost outside the emulated link.
                            dir.tx_error += 1;
                            f.report.handoffs_lost += 1;
                            recycle(&mut f.spare, h.data);
                        } else {
                            f.report.handed_on += 1;
                        }
                    }
                    if let Some(buf) = data {
                        recycle(&mut f.spare, buf); // filtered, blocked, or nowhere to go
                    }
                }
            }
        }
    }

    /// Every changed direction's figures, and the worker's own.
    fn publish(&mut self, f: &mut Flight, wakeups: &LatenessHistogram) {
        for r in &self.rings {
            let overruns = r.rx.socket().take_overruns();
            if overruns > 0 {
                self.dirs[r.dir].rx_overrun += overruns;
                self.dirs[r.dir].dirty = true;
            }
        }
        for dir in self.dirs.iter_mut().filter(|d| d.dirty) {
            if let Some(c) = dir.capture.as_mut() {
                c.tick();
            }
            if let Some(w) = dir.log.as_mut() {
                // A reader follows the queue log as it grows (bloatlab view): its events reach the
                // file within one publish; an error here shows again at the final flush.
                let _ = w.flush();
            }
            dir.publish();
        }
        f.report.cpu = ThreadCpu::now();
        f.report.wakeups = wakeups.summary();
        *self.report.lock().unwrap() = f.report.clone();
    }
}
