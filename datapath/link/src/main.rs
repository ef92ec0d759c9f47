//! bloatlab-link: emulates one or more links between veth ends (docs/datapath.md).
//! The I/O shell around bloatlab-core: sockets, the clock, threads, signals and reports.

mod clock;
mod direction;
mod sched;
mod socket;

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use bloatlab_core::qdisc::TinReport;
use bloatlab_core::stats::DropCounts;
use serde_json::{json, Value};

use bloatlab_link::capture::{Capture, CaptureCounts, FileCounts};
use bloatlab_link::config::Config;
use direction::{Direction, Snapshot};
use socket::{ifindex, PacketSocket, RxRing};

static STOP: AtomicBool = AtomicBool::new(false);
/// Link threads that have published their final figures. Their sockets close after that, and
/// a closing packet socket waits for RCU grace periods (20 ms for a ring): the final report
/// goes out before, so `down` can remove the namespaces while the sockets close.
static FINISHED: AtomicUsize = AtomicUsize::new(0);
static RT_GATE: sched::RtGate = sched::RtGate::new();

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
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
                println!("usage: bloatlab-link --config FILE [--detach]\n       bloatlab-link --timer NS COUNT [--rt]\n       bloatlab-link --describe\n       bloatlab-link --version\n\nEmulates the links FILE describes (JSON, see docs/datapath.md).\n--detach: keep running when the parent exits (for `bloatlab up`).\n--timer: sleep COUNT times for NS nanoseconds as a link thread does (ppoll, 1 ns timer slack) and print how late each woke (JSON: p50, p99, max in ns) and the CPU time each sleep took (cpu_ns): the machine's own timer, the baseline of departure lateness. --rt: sleep real-time, one step above the link threads' default priority (rt_priority: its value, or null where refused).\n--describe: print the disciplines the config takes, with their defaults, and the drop and mark reason codes (JSON).");
                std::process::exit(0);
            }
            other => die(2, format!("unknown argument {other:?}; usage: bloatlab-link --config FILE [--detach]")),
        }
    }
    Usage { config: config.unwrap_or_else(|| die(2, "--config FILE is required")), detach }
}

/// The machine's timer, as a link thread meets it: COUNT sleeps of NS each through ppoll with
/// 1 ns of slack, and how long after its due time each one ended. A departure can be no more
/// punctual than this, so it is the baseline `bloatlab bench machine` and each run judge by.
/// With `rt`, real-time one step above the link threads' default priority: under load, what
/// the machine gives a link thread, where a normal thread waits behind the hosts. Above them, so
/// that a running link thread (SCHED_FIFO does not preempt its own level) does not count as the
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
    // to arm the timer). A link thread waiting less than this between departures spends less
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

fn snapshot_json(s: &Snapshot) -> Value {
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
        "depart_error_ns": {"count": s.late_count, "p50": s.late_p50_ns, "p99": s.late_p99_ns, "max": s.late_max_ns},
        "batch_sleeps": s.batch_sleeps,
        "cpu": {"user_ns": s.cpu.user_ns, "kernel_ns": s.cpu.kernel_ns, "wall_ns": s.cpu.wall_ns},
    });
    if let Some(c) = &s.capture {
        v["capture"] = capture_json(c);
    }
    if !s.tins.is_empty() {
        v["tins"] = Value::Array(s.tins.iter().map(tin_json).collect());
    }
    v
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

/// Writes the stats file atomically (temp file + rename), so readers never see half of it.
/// The process's own scheduling, for the stats file: the PM QoS request and the batching.
fn sched_state(latency: &sched::CpuLatency, pressure: &sched::CpuPressure) -> Value {
    let (bound_us, held) = latency.state();
    json!({"cpu_latency": {"bound_us": bound_us, "held": held}, "batching": pressure.state()})
}

fn write_stats(path: &Path, links: &[(String, Arc<Mutex<Snapshot>>, Arc<Mutex<Snapshot>>)], running: bool, rt_offset: i64, sched: Value) -> std::io::Result<()> {
    let mut lj = serde_json::Map::new();
    for (name, f, r) in links {
        let (f, r) = (f.lock().unwrap().clone(), r.lock().unwrap().clone());
        lj.insert(name.clone(), json!({"forward": snapshot_json(&f), "reverse": snapshot_json(&r)}));
    }
    let doc = json!({"pid": std::process::id(), "running": running, "clock": "monotonic",
                     "realtime_offset_ns": rt_offset,
                     "cpu_latency": sched["cpu_latency"], "batching": sched["batching"], "links": lj});
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&doc).unwrap())?;
    std::fs::rename(&tmp, path)
}

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
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let cfg = Config::load(&usage.config).unwrap_or_else(|e| die(2, e));
    if let Some(ns) = &cfg.netns {
        enter_netns(ns).unwrap_or_else(|e| die(2, format!("netns: cannot enter {ns}: {e}")));
    }
    if let Some(dir) = &cfg.log_dir {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| die(2, format!("log_dir: {}: {e}", dir.display())));
    }

    // Open everything before the first report, so "stats file exists" means "ready".
    let ends: Vec<(u32, u32)> = cfg
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let a = ifindex(&l.a_iface).unwrap_or_else(|e| die(2, format!("links[{i}].a_iface: {e}")));
            let b = ifindex(&l.b_iface).unwrap_or_else(|e| die(2, format!("links[{i}].b_iface: {e}")));
            (a, b)
        })
        .collect();
    // The rings side by side: the kernel allocates and clears each one's 16 MiB, 15-20 ms apiece.
    let mut rings = std::thread::scope(|s| {
        let opening: Vec<_> = ends.iter().flat_map(|&(a, b)| [a, b]).map(|src| s.spawn(move || RxRing::open(src))).collect();
        opening.into_iter().map(|h| h.join().expect("opening a ring")).collect::<Vec<_>>()
    })
    .into_iter();
    let mut directions = Vec::new();
    let mut shared = Vec::new();
    for (i, (l, &(a, b))) in cfg.links.iter().zip(&ends).enumerate() {
        let mut pair = Vec::new();
        // Each direction reads the ring of its sender's end, opened above in this order.
        for (which, dst, dj) in [("forward", b, &l.forward), ("reverse", a, &l.reverse)] {
            let fail = |e: std::io::Error| -> ! { die(1, format!("links[{i}].{which}: {e}")) };
            let log = cfg.log_dir.as_ref().filter(|_| dj.qlog).map(|d| {
                let p = d.join(format!("{}.{which}.qlog", l.name));
                BufWriter::with_capacity(1 << 20, File::create(&p).unwrap_or_else(|e| die(1, format!("{}: {e}", p.display()))))
            });
            let capture = dj.capture.as_ref().map(|c| {
                Capture::open(c, &format!("{}.{which}", l.name)).unwrap_or_else(|e| die(2, format!("links[{i}].{which}.{e}")))
            });
            let snap = Arc::new(Mutex::new(Snapshot::default()));
            pair.push(snap.clone());
            directions.push((
                format!("{}.{which}", l.name),
                Direction { cfg: dj.resolve().unwrap(), rx: rings.next().expect("a ring per direction").unwrap_or_else(|e| fail(e)), tx: PacketSocket::open(dst).unwrap_or_else(|e| fail(e)), tx_batch: Default::default(), log, capture, shared: snap, spin_ns: cfg.spin_ns, rt_priority: cfg.rt_priority, batching: cfg.batching },
            ));
        }
        shared.push((l.name.clone(), pair[0].clone(), pair[1].clone()));
    }

    let rt_offset = clock::realtime_offset_ns();
    let stats_path = cfg.stats_path.clone();
    // The first report is the readiness signal: failing it is a config error.
    let mut latency = sched::CpuLatency::open(cfg.cpu_latency_us);
    let mut pressure = sched::CpuPressure::new(cfg.batching);
    write_stats(&stats_path, &shared, true, rt_offset, sched_state(&latency, &pressure)).unwrap_or_else(|e| die(2, format!("stats_path: {}: {e}", stats_path.display())));

    let handles: Vec<_> = directions
        .into_iter()
        .map(|(name, d)| {
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    let mut d = d;
                    let r = d.run(&STOP, &RT_GATE);
                    if let Err(e) = &r {
                        eprintln!("bloatlab-link: {name}: {e}");
                        STOP.store(true, Ordering::Relaxed);
                    }
                    // Its files whole (run returns early on an error), then its sockets after
                    // the final report can go out.
                    drop((d.log.take(), d.capture.take()));
                    FINISHED.fetch_add(1, Ordering::Release);
                    drop(d);
                    r.is_ok()
                })
                .unwrap()
        })
        .collect();

    let mut reported = false;
    let mut report = |running: bool, sched: Value| {
        if let Err(e) = write_stats(&stats_path, &shared, running, rt_offset, sched) {
            if !std::mem::replace(&mut reported, true) {
                eprintln!("bloatlab-link: cannot write {}: {e}", stats_path.display());
            }
        }
    };
    let mut cpu = sched::CpuShare::new();
    while !STOP.load(Ordering::Relaxed) {
        // Short enough that the first frames after an idle spell soon get fast wake-ups; a stop
        // is seen within 10 ms (`down` waits for it).
        for tick in 1..=20 {
            std::thread::sleep(StdDuration::from_millis(10));
            if STOP.load(Ordering::Relaxed) {
                break;
            }
            if tick % 5 == 0 {
                latency.update(clock::monotonic_now().nanos());
            }
        }
        cpu.review(&RT_GATE);
        pressure.review();
        report(true, sched_state(&latency, &pressure));
    }
    // (A thread that panicked never counts: then wait for all of them to end.)
    while FINISHED.load(Ordering::Acquire) < handles.len() && handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(StdDuration::from_millis(1));
    }
    report(false, sched_state(&latency, &pressure));
    let ok = handles.into_iter().map(|h| h.join().unwrap_or(false)).fold(true, |a, b| a && b);
    std::process::exit(if ok { 0 } else { 1 });
}
