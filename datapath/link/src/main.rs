//! bloatlab-link: emulates the links and switches of a network between veth ends
//! (docs/datapath.md). The I/O shell around bloatlab-core: sockets, the clock, the workers,
//! signals and reports.

mod clock;
mod direction;
mod handoff;
mod sched;
mod sentinel;
mod socket;
mod wake;
mod worker;

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bloatlab_core::fabric::{Fabric, SwitchCounts};
use bloatlab_core::qdisc::{DualPi2Stats, TinReport};
use bloatlab_core::rate::Rate;
use bloatlab_core::stats::DropCounts;
use bloatlab_core::wire::Ecn;
use bloatlab_core::Pipeline;
use serde_json::{json, Value};

use bloatlab_link::capture::{Capture, CaptureCounts, FileCounts};
use bloatlab_link::config::Config;
use bloatlab_link::plan::{End, Plan};
use direction::{Dir, LatenessSummary, Output, Snapshot};
use handoff::Inbox;
use sentinel::Watch;
use socket::{ifindex, PacketSocket, RxRing, TxBatch};
use wake::{Epoll, EventFd};
use worker::{Ring, Settings, Worker, WorkerReport};

static STOP: AtomicBool = AtomicBool::new(false);
/// The stop bell's descriptor, for the signal handler: workers and the main thread sleep on it.
static STOP_BELL: AtomicI32 = AtomicI32::new(-1);
/// Workers that have published their final figures. Their sockets close after that, and a
/// closing packet socket waits for RCU grace periods (20 ms for a ring): the final report goes
/// out before, so `down` can remove the namespaces while the sockets close.
static FINISHED: AtomicUsize = AtomicUsize::new(0);
static RT_GATE: sched::RtGate = sched::RtGate::new();

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
    let fd = STOP_BELL.load(Ordering::Relaxed);
    if fd >= 0 {
        wake::ring_fd(fd);
    }
}

fn die(status: i32, msg: impl std::fmt::Display) -> ! {
    eprintln!("bloatlab-link: error: {msg}");
    std::process::exit(status);
}

struct Usage {
    config: String,
    detach: bool,
}

fn parse_args() -> Usage {
    let mut config = None;
    let mut detach = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" => config = args.next(),
            "--detach" => detach = true,
            "--version" | "-V" => {
                println!("bloatlab-link {}", bloatlab_core::VERSION);
                std::process::exit(0);
            }
            "--timer" => {
                let num = |v: Option<String>, what: &str, max: u64| -> u64 {
                    match v.as_deref().map(str::parse::<u64>) {
                        Some(Ok(n)) if (1..=max).contains(&n) => n,
                        _ => die(2, format!("--timer: {what} must be a whole number from 1 to {max}; usage: bloatlab-link --timer NS COUNT")),
                    }
                };
                let ns = num(args.next(), "NS", 1_000_000_000);
                let count = num(args.next(), "COUNT", 1_000_000);
                let rest: Vec<String> = args.by_ref().collect();
                let rt = match rest.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                    [] => false,
                    ["--rt"] => true,
                    _ => die(2, format!("--timer: unexpected {:?}; usage: bloatlab-link --timer NS COUNT [--rt]", rest.join(" "))),
                };
                println!("{}", timer_overshoot(ns, count, rt));
                std::process::exit(0);
            }
            "--describe" => {
                println!("{}", serde_json::to_string_pretty(&bloatlab_link::config::describe()).expect("JSON"));
                std::process::exit(0);
            }
            "-h" | "--help" => {
                println!("usage: bloatlab-link --config FILE [--detach]\n       bloatlab-link --timer NS COUNT [--rt]\n       bloatlab-link --describe\n       bloatlab-link --version\n\nEmulates the links and switches FILE describes (JSON, see docs/datapath.md).\n--detach: keep running when the parent exits (for `bloatlab up`).\n--timer: sleep COUNT times for NS nanoseconds as a worker does (ppoll, 1 ns timer slack) and print how late each woke (JSON: p50, p99, max in ns) and the CPU time each sleep took (cpu_ns): the machine's own timer, the baseline of departure lateness. --rt: sleep real-time, one step above the workers' default priority (rt_priority: its value, or null where refused).\n--describe: print the disciplines the config takes, with their defaults, and the drop and mark reason codes (JSON).");
                std::process::exit(0);
            }
            other => die(2, format!("unknown argument {other:?}; usage: bloatlab-link --config FILE [--detach]")),
        }
    }
    Usage { config: config.unwrap_or_else(|| die(2, "--config FILE is required")), detach }
}

/// The machine's timer, as a worker meets it: COUNT sleeps of NS each through ppoll with
/// 1 ns of slack, and how long after its due time each one ended. A departure can be no more
/// punctual than this, so it is the baseline `bloatlab bench machine` and each run judge by.
/// With `rt`, real-time one step above the workers' default priority: under load, what
/// the machine gives a worker, where a normal thread waits behind the hosts. Above them, so
/// that a running worker (SCHED_FIFO does not preempt its own level) does not count as the
/// machine's.
fn timer_overshoot(ns: u64, count: u64, rt: bool) -> Value {
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1) };
    let rt_priority = rt.then_some(bloatlab_link::config::DEFAULT_RT_PRIORITY + 1).filter(|&prio| {
        let p = libc::sched_param { sched_priority: prio };
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
    });
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 };
    let mut late: Vec<u64> = Vec::with_capacity(count as usize);
    let cpu0 = clock::read(libc::CLOCK_THREAD_CPUTIME_ID);
    for _ in 0..count {
        let t0 = clock::monotonic_now().nanos();
        unsafe { libc::ppoll(std::ptr::null_mut(), 0, &ts, std::ptr::null()) };
        late.push((clock::monotonic_now().nanos() - t0).saturating_sub(ns));
    }
    // What a sleep costs the sleeper: entering and leaving it (on a VM, exits to the hypervisor
    // to arm the timer). A worker waiting less than this between departures spends less
    // by spinning.
    let cpu_ns = (clock::read(libc::CLOCK_THREAD_CPUTIME_ID) - cpu0) / count;
    late.sort_unstable();
    let at = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
    json!({"sleep_ns": ns, "count": count, "p50_ns": at(0.5), "p99_ns": at(0.99), "max_ns": at(1.0), "cpu_ns": cpu_ns, "rt_priority": rt_priority})
}

fn enter_netns(name: &str) -> std::io::Result<()> {
    let f = File::open(Path::new("/run/netns").join(name))?;
    use std::os::fd::AsRawFd;
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn drops_json(pre_queue: &DropCounts, queue: &DropCounts, rx_overrun: u64, tx_error: u64) -> Value {
    let mut m = serde_json::Map::new();
    for ((name, a), (_, b)) in pre_queue.iter().zip(queue.iter()) {
        m.insert(name.into(), json!(a + b));
    }
    m.insert("rx_overrun".into(), json!(rx_overrun));
    m.insert("tx_error".into(), json!(tx_error));
    Value::Object(m)
}

fn capture_json(c: &CaptureCounts) -> Value {
    let file = |f: &FileCounts| json!({"written": f.written, "cut": f.cut, "lost": f.lost, "bytes": f.bytes});
    json!({"departures": file(&c.departures), "drops": file(&c.drops), "error": c.error})
}

fn lateness_json(l: &LatenessSummary) -> Value {
    json!({"count": l.count, "p50": l.p50_ns, "p99": l.p99_ns, "max": l.max_ns})
}

fn snapshot_json(s: &Snapshot, worker: usize) -> Value {
    let q = &s.queue;
    let mut v = json!({
        "arrivals": s.dir.arrivals, "departures": s.dir.departures,
        "bytes_in": s.dir.bytes_in, "bytes_out": s.dir.bytes_out,
        "enqueued": q.enqueued, "dequeued": q.dequeued,
        "backlog_pkts": q.backlog_pkts, "backlog_bytes": q.backlog_bytes,
        "max_backlog_pkts": q.max_backlog_pkts, "max_backlog_bytes": q.max_backlog_bytes,
        "drops": drops_json(&s.dir.drops, &q.drops, s.rx_overrun, s.tx_error),
        "marks": q.marks.iter().map(|(name, n)| (name.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        // Only the codepoints seen, by number ("46": EF).
        "departures_by_dscp": s.dir.departures_by_dscp.iter().enumerate().filter(|(_, &n)| n > 0)
            .map(|(c, &n)| (c.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        // Every codepoint, by name ("not_ect", "ect1", "ect0", "ce").
        "departures_by_ecn": Ecn::ALL.iter().map(|&e| (e.name().to_string(), json!(s.dir.departures_by_ecn[e as usize])))
            .collect::<serde_json::Map<_, _>>(),
        "ect1_rewritten": s.dir.ect1_rewritten,
        "depart_error_ns": lateness_json(&s.late),
        "late_arrivals": {"count": s.late_arrivals, "max_ns": s.late_arrival_max_ns},
        "worker": worker,
    });
    if let Some(c) = &s.capture {
        v["capture"] = capture_json(c);
    }
    if !s.tins.is_empty() {
        v["tins"] = Value::Array(s.tins.iter().map(tin_json).collect());
    }
    if let Some(d) = &s.dualpi2 {
        v["dualpi2"] = dualpi2_json(d);
    }
    v
}

/// DualPI2's figures as `tc -s qdisc` shows them: p', the queues' head delays (us), packets
/// into each queue, the most queued, marks, the scheduler's credit, memory.
fn dualpi2_json(d: &DualPi2Stats) -> Value {
    let us = |d: bloatlab_core::Duration| d.nanos() / 1000;
    json!({"prob": d.prob, "delay_c_us": us(d.delay_c), "delay_l_us": us(d.delay_l), "pkts_in_c": d.pkts_in_c,
           "pkts_in_l": d.pkts_in_l, "maxq": d.maxq, "ecn_mark": d.ecn_mark, "step_mark": d.step_mark,
           "credit": d.credit, "memory_used_bytes": d.memory_used_bytes, "max_memory_used_bytes": d.max_memory_used_bytes,
           "memory_limit_bytes": d.memory_limit_bytes})
}

/// One of CAKE's tins as `tc -s qdisc` shows it: threshold, target and interval, counters,
/// delays (us) and flows.
fn tin_json(t: &TinReport) -> Value {
    let s = &t.stats;
    let us = |d: bloatlab_core::Duration| d.nanos() / 1000;
    json!({"name": t.name, "threshold_bps": t.threshold_bps, "target_us": us(t.target), "interval_us": us(t.interval),
           "flow_quantum": t.flow_quantum, "packets": s.packets, "bytes": s.bytes, "backlog_bytes": s.backlog_bytes,
           "drops": s.drops, "ack_drops": s.ack_drops, "marks": s.marks, "way_indirect_hits": s.way_indirect_hits,
           "way_misses": s.way_misses, "way_collisions": s.way_collisions, "peak_delay_us": us(s.peak_delay),
           "avg_delay_us": us(s.avg_delay), "base_delay_us": us(s.base_delay), "sparse_flows": s.sparse_flows,
           "bulk_flows": s.bulk_flows, "unresponsive_flows": s.unresponsive_flows, "max_len": s.max_len})
}

/// The process's own scheduling, for the stats file: the PM QoS request and the batching.
fn sched_state(latency: &sched::CpuLatency, pressure: &sched::CpuPressure) -> Value {
    let (bound_us, held) = latency.state();
    json!({"cpu_latency": {"bound_us": bound_us, "held": held}, "batching": pressure.state()})
}

/// A direction's snapshot, and the index of its worker.
type DirReport = (Arc<Mutex<Snapshot>>, usize);
/// A worker's name, thread id, directions, and report.
type WorkerEntry = (String, i32, Vec<String>, Arc<Mutex<WorkerReport>>);

/// Everything the stats file reports, shared with the threads that fill it in.
struct Reports {
    /// Per link: its name and its two directions'.
    links: Vec<(String, [DirReport; 2])>,
    workers: Vec<WorkerEntry>,
    switch_names: Vec<String>,
    sentinel: Option<Arc<Mutex<Watch>>>,
    started_ns: u64,
}

impl Reports {
    fn json(&self, running: bool, rt_offset: i64, sched: Value) -> Value {
        let mut lj = serde_json::Map::new();
        for (name, [(f, fw), (r, rw)]) in &self.links {
            let (f, r) = (f.lock().unwrap().clone(), r.lock().unwrap().clone());
            lj.insert(name.clone(), json!({"forward": snapshot_json(&f, *fw), "reverse": snapshot_json(&r, *rw)}));
        }
        let wall_ns = clock::monotonic_now().nanos() - self.started_ns;
        let mut switches = vec![SwitchCounts::default(); self.switch_names.len()];
        let workers: Vec<Value> = self
            .workers
            .iter()
            .map(|(name, tid, dirs, report)| {
                let w = report.lock().unwrap().clone();
                for (total, c) in switches.iter_mut().zip(&w.switches) {
                    total.merge(c);
                }
                json!({"name": name, "tid": tid, "directions": dirs,
                       "cpu": {"user_ns": w.cpu.user_ns, "kernel_ns": w.cpu.kernel_ns, "wall_ns": wall_ns},
                       "wakeups_late_ns": lateness_json(&w.wakeups), "batch_sleeps": w.batch_sleeps,
                       "handed_on": w.handed_on, "handoffs_lost": w.handoffs_lost})
            })
            .collect();
        let switches: serde_json::Map<String, Value> = self
            .switch_names
            .iter()
            .zip(&switches)
            .map(|(name, c)| (name.clone(), json!({"forwarded": c.forwarded, "flooded": c.flooded, "filtered": c.filtered, "blocked": c.blocked})))
            .collect();
        let sentinel = self.sentinel.as_ref().map_or(Value::Null, |s| {
            let s = s.lock().unwrap().report();
            json!({"late_ns": lateness_json(&s.late), "late_at_random_ns": {"p50": s.at_random_p50_ns, "p99": s.at_random_p99_ns},
                   "span_ns": s.span_ns, "sleep_p50_ns": s.sleep_p50_ns, "cpu_ns": s.cpu_ns, "rt_priority": s.rt_priority,
                   "sentinels": s.sentinels})
        });
        json!({"pid": std::process::id(), "running": running, "clock": "monotonic",
               "realtime_offset_ns": rt_offset,
               "cpu_latency": sched["cpu_latency"], "batching": sched["batching"],
               "workers": workers, "sentinel": sentinel, "switches": switches, "links": lj})
    }
}

/// Writes the stats file atomically (temp file + rename), so readers never see half of it.
fn write_stats(path: &Path, doc: &Value) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(doc).unwrap())?;
    std::fs::rename(&tmp, path)
}

/// How often the main thread reports, reviews the workers' scheduling and the CPU pressure,
/// while frames flow (with none it sleeps until they come back, or a stop).
const REPORT_EVERY_NS: u64 = 200_000_000;

fn main() {
    let usage = parse_args();
    unsafe {
        if !usage.detach {
            // Die with the parent, so a killed experiment never leaves a datapath behind.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() == 1 {
                die(1, "parent already gone");
            }
        }
        // Default slack is 50 us: far too coarse for departure times. Threads inherit it.
        libc::prctl(libc::PR_SET_TIMERSLACK, 1);
    }
    let stop_bell = EventFd::new().unwrap_or_else(|e| die(1, format!("eventfd: {e}")));
    STOP_BELL.store(stop_bell.fd(), Ordering::Relaxed);
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let cfg = Config::load(&usage.config).unwrap_or_else(|e| die(2, e));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sentinel_cpus = sentinel::cpus();
    let plan = Plan::new(&cfg, cores).unwrap_or_else(|e| die(2, e));
    if let Some(ns) = &cfg.netns {
        enter_netns(ns).unwrap_or_else(|e| die(2, format!("netns: cannot enter {ns}: {e}")));
    }
    if let Some(dir) = &cfg.log_dir {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| die(2, format!("log_dir: {}: {e}", dir.display())));
    }

    // Open everything before the first report, so "stats file exists" means "ready".
    let iface_index = |d: usize, end: &End, field: &str| -> Option<u32> {
        let End::Iface(name) = end else { return None };
        let link = plan.dirs[d].link;
        Some(ifindex(name).unwrap_or_else(|e| die(2, format!("links[{link}].{field}: {e}"))))
    };
    let side = |d: usize, input: bool| if (plan.dirs[d].which == "forward") == input { "a_iface" } else { "b_iface" };
    let inputs: Vec<Option<u32>> = plan.dirs.iter().map(|d| iface_index(d.id, &d.input, side(d.id, true))).collect();
    let outputs: Vec<Option<u32>> = plan.dirs.iter().map(|d| iface_index(d.id, &d.output, side(d.id, false))).collect();
    // The rings side by side: the kernel allocates and clears each one's 16 MiB, 15-20 ms apiece.
    let ring_sizes: Vec<usize> = plan.dirs.iter().map(|d| {
        socket::ring_blocks(match cfg.directions[d.id].config.rate { Rate::Constant { bps } => Some(bps), _ => None })
    }).collect();
    let mut rings: Vec<Option<std::io::Result<RxRing>>> = std::thread::scope(|s| {
        let opening: Vec<_> = inputs.iter().zip(&ring_sizes).map(|(src, &blocks)| src.map(|i| s.spawn(move || RxRing::open(i, blocks)))).collect();
        opening.into_iter().map(|h| h.map(|h| h.join().expect("opening a ring"))).collect()
    });

    let fabric = Arc::new(Fabric::new(plan.switch_ports.clone()));
    let mut place = vec![(0, 0); plan.dirs.len()];
    let mut counts = vec![0; plan.workers];
    for d in &plan.dirs {
        place[d.id] = (d.worker, counts[d.worker]);
        counts[d.worker] += 1;
    }
    let place = Arc::new(place);
    let inboxes: Arc<Vec<Inbox>> = Arc::new((0..plan.workers).map(|_| Inbox::new().unwrap_or_else(|e| die(1, format!("eventfd: {e}")))).collect());
    let settings = Settings {
        spin_ns: cfg.spin_ns,
        max_lead_ns: cfg.max_lead_ns,
        lead_quantile: cfg.lead_quantile,
        spin_share: cfg.spin_share,
        rt_priority: cfg.rt_priority,
        batching: cfg.batching,
    };
    let mut workers: Vec<Worker> = (0..plan.workers)
        .map(|id| Worker {
            id,
            dirs: Vec::new(),
            rings: Vec::new(),
            fabric: fabric.clone(),
            place: place.clone(),
            inboxes: inboxes.clone(),
            report: Arc::new(Mutex::new(WorkerReport::default())),
            settings,
            stop_bell: stop_bell.fd(),
        })
        .collect();
    let mut snapshots = Vec::new();
    let now = clock::monotonic_now();
    for d in &plan.dirs {
        let (direction, which) = (&cfg.directions[d.id], d.which);
        let name = d.name(&cfg);
        let fail = |e: std::io::Error| -> ! { die(1, format!("links[{}].{which}: {e}", d.link)) };
        let log = cfg.log_dir.as_ref().filter(|_| direction.qlog).map(|dir| {
            let p = dir.join(format!("{name}.qlog"));
            BufWriter::with_capacity(1 << 20, File::create(&p).unwrap_or_else(|e| die(1, format!("{}: {e}", p.display()))))
        });
        let capture = direction.capture.as_ref().map(|c| Capture::open(c, &name).unwrap_or_else(|e| die(2, format!("links[{}].{which}.{e}", d.link))));
        let output = match (&d.output, outputs[d.id]) {
            (_, Some(i)) => Output::Socket { tx: PacketSocket::open(i).unwrap_or_else(|e| fail(e)), batch: TxBatch::default(), due: Vec::new() },
            (End::Port { switch, port }, None) => Output::Switch { switch: *switch, port: *port },
            (End::Iface(_), None) => unreachable!("every interface has an index"),
        };
        let mut pipe = Pipeline::new(&direction.config, now);
        pipe.record_events(log.is_some());
        pipe.record_drops(capture.is_some());
        let snap = Arc::new(Mutex::new(Snapshot::default()));
        snapshots.push(snap.clone());
        let w = &mut workers[d.worker];
        let mut dir = Dir::new(name, pipe, output, log, capture, snap, settings.wakeup_lead());
        if let Some(ring) = rings[d.id].take() {
            dir.ring = Some(w.rings.len());
            w.rings.push(Ring::new(ring.unwrap_or_else(|e| fail(e)), w.dirs.len()));
        }
        w.dirs.push(dir);
    }
    let reports = Reports {
        links: cfg.links.iter().enumerate().map(|(i, l)| (l.name.clone(), [(snapshots[2 * i].clone(), plan.dirs[2 * i].worker), (snapshots[2 * i + 1].clone(), plan.dirs[2 * i + 1].worker)])).collect(),
        workers: Vec::new(),
        switch_names: plan.switch_names.clone(),
        sentinel: cfg.sentinel.then(|| Arc::new(Mutex::new(Watch::new(sentinel_cpus.len())))),
        started_ns: now.nanos(),
    };

    let rt_offset = clock::realtime_offset_ns();
    let stats_path = cfg.stats_path.clone();
    let mut latency = sched::CpuLatency::open(cfg.cpu_latency_us);
    let mut pressure = sched::CpuPressure::new(cfg.batching);
    let activity = EventFd::new().unwrap_or_else(|e| die(1, format!("eventfd: {e}")));
    sched::ACTIVITY_BELL.store(activity.fd(), Ordering::Relaxed);
    let sentinel_bells: Vec<Arc<EventFd>> = sentinel_cpus
        .iter()
        .map(|_| Arc::new(EventFd::new().unwrap_or_else(|e| die(1, format!("eventfd: {e}")))))
        .collect();

    let mut reports = reports;
    let mut handles = Vec::new();
    let (tids_tx, tids_rx) = std::sync::mpsc::channel();
    for (id, mut w) in workers.into_iter().enumerate() {
        let names: Vec<String> = w.dirs.iter().map(|d| d.name.clone()).collect();
        reports.workers.push((format!("worker{id}"), 0, names, w.report.clone()));
        let tids_tx = tids_tx.clone();
        let h = std::thread::Builder::new()
            .name(format!("worker{id}"))
            .spawn(move || {
                tids_tx.send((id, unsafe { libc::gettid() })).ok();
                drop(tids_tx);
                let r = w.run(&STOP, &RT_GATE);
                if let Err(e) = &r {
                    eprintln!("bloatlab-link: worker{id}: {e}");
                    STOP.store(true, Ordering::Relaxed);
                    wake::ring_fd(STOP_BELL.load(Ordering::Relaxed));
                }
                FINISHED.fetch_add(1, Ordering::Release);
                // Its sockets close after the final report can go out.
                w.close();
                r.is_ok()
            })
            .unwrap();
        handles.push(h);
    }
    drop(tids_tx);
    for (id, tid) in tids_rx.iter().take(plan.workers) {
        reports.workers[id].1 = tid;
    }
    // The first report is the readiness signal: failing it is a config error.
    write_stats(&stats_path, &reports.json(true, rt_offset, sched_state(&latency, &pressure)))
        .unwrap_or_else(|e| die(2, format!("stats_path: {}: {e}", stats_path.display())));
    let sentinels: Vec<_> = reports.sentinel.iter().flat_map(|watch| {
        sentinel_cpus.iter().zip(&sentinel_bells).enumerate().map(|(index, (&cpu, bell))| {
            let (watch, bell, stop_fd, prio) = (watch.clone(), bell.clone(), stop_bell.fd(), cfg.rt_priority);
            std::thread::Builder::new()
                .name(format!("sentinel{cpu}"))
                .spawn(move || sentinel::run(index, cpu, &STOP, &bell, stop_fd, prio, watch))
                .unwrap()
        })
    }).collect();

    let mut reported = false;
    let mut report = |running: bool, sched: Value| {
        if let Err(e) = write_stats(&stats_path, &reports.json(running, rt_offset, sched)) {
            if !std::mem::replace(&mut reported, true) {
                eprintln!("bloatlab-link: cannot write {}: {e}", stats_path.display());
            }
        }
    };
    let mut bells = Epoll::new().unwrap_or_else(|e| die(1, format!("epoll: {e}")));
    bells.add(stop_bell.fd(), 0).and(bells.add(activity.fd(), 1)).unwrap_or_else(|e| die(1, format!("epoll: {e}")));
    let mut cpu = sched::CpuShare::new();
    let mut flowing = false;
    while !STOP.load(Ordering::Relaxed) {
        if !flowing {
            sched::BATCHING.store(false, Ordering::Relaxed);
            sched::IDLE.store(true, Ordering::SeqCst);
            if sched::frames_flow(clock::monotonic_now().nanos(), sched::LAST_ARRIVAL_NS.load(Ordering::SeqCst)) {
                sched::IDLE.store(false, Ordering::Relaxed);
                flowing = true;
            }
        }
        // While frames flow, a report every period; with none, nothing until they come back.
        bells.wait(flowing.then_some(REPORT_EVERY_NS), |_| {});
        activity.clear();
        if STOP.load(Ordering::Relaxed) {
            break;
        }
        let now = clock::monotonic_now().nanos();
        latency.update(now);
        cpu.review(&RT_GATE);
        pressure.review();
        report(true, sched_state(&latency, &pressure));
        flowing = sched::frames_flow(now, sched::LAST_ARRIVAL_NS.load(Ordering::Relaxed)) || latency.state().1;
        if flowing && sentinel::WAITING.load(Ordering::SeqCst) > 0 {
            sentinel_bells.iter().for_each(|bell| bell.ring());
        }
    }
    // (A worker that panicked never counts: then wait for all of them to end.)
    while FINISHED.load(Ordering::Acquire) < handles.len() && handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for h in sentinels {
        h.join().ok();
    }
    report(false, sched_state(&latency, &pressure));
    let ok = handles.into_iter().map(|h| h.join().unwrap_or(false)).fold(true, |a, b| a && b);
    std::process::exit(if ok { 0 } else { 1 });
}
