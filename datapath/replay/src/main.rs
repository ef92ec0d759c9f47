//! bloatlab-replay: a queue discipline in virtual time over an arrival trace or a synthetic
//! arrival process; writes OUT/fates.csv and OUT/summary.json (docs/replay.md).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant as WallClock;

use bloatlab_config::{load_json, DirectionJson};
use bloatlab_replay::arrivals::{self, ecn_from_code, MAX_SIZE_BYTES, MIN_SIZE_BYTES};
use bloatlab_replay::fates::WriterThread;
use bloatlab_replay::{replay, Fate, FateSink, FatesCsv, FlowIds, Process, Synthetic, Tally};
use serde_json::{json, Value};

const USAGE: &str = "usage: bloatlab-replay --config FILE --out DIR (--arrivals FILE.csv | --synthetic constant|poisson|on-off \
(--arrival-bps N | --arrival-pps N) --size BYTES (--packets N | --duration-ns N) [--flows N] [--flow-ids round-robin|random] \
[--ecn 0-3] [--on-ns N --off-ns N]) [--progress]";

/// 1000 times the fastest link bloatlab takes (400 Gbit/s): the highest --load of the fastest rate.
const MAX_ARRIVAL_BPS: u64 = 400_000_000_000_000;
const MAX_ARRIVAL_PPS: u64 = 1_000_000_000;

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("bloatlab-replay: error: {msg}");
    std::process::exit(2);
}

#[derive(Default)]
struct Args {
    config: Option<String>,
    out: Option<PathBuf>,
    arrivals: Option<PathBuf>,
    synthetic: Option<String>,
    arrival_bps: Option<u64>,
    arrival_pps: Option<u64>,
    size: Option<u64>,
    flows: Option<u64>,
    flow_ids: Option<String>,
    ecn: Option<u64>,
    packets: Option<u64>,
    duration_ns: Option<u64>,
    on_ns: Option<u64>,
    off_ns: Option<u64>,
    progress: bool,
}

fn parse_args() -> Args {
    let mut a = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-V" || flag == "--version" {
            println!("bloatlab-replay {}", bloatlab_core::VERSION);
            std::process::exit(0);
        }
        if flag == "--progress" {
            a.progress = true;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}\n\nReplays the link direction FILE describes (the datapath's direction JSON) in virtual time.");
            std::process::exit(0);
        }
        let mut value = || it.next().unwrap_or_else(|| die(format!("{flag}: needs a value")));
        let mut num = |slot: &mut Option<u64>| {
            let v = value();
            *slot = Some(v.parse().unwrap_or_else(|_| die(format!("{flag}: {v:?} is not a whole number >= 0"))));
        };
        match flag.as_str() {
            "--config" => a.config = Some(value()),
            "--out" => a.out = Some(value().into()),
            "--arrivals" => a.arrivals = Some(value().into()),
            "--synthetic" => a.synthetic = Some(value()),
            "--flow-ids" => a.flow_ids = Some(value()),
            "--arrival-bps" => num(&mut a.arrival_bps),
            "--arrival-pps" => num(&mut a.arrival_pps),
            "--size" => num(&mut a.size),
            "--flows" => num(&mut a.flows),
            "--ecn" => num(&mut a.ecn),
            "--packets" => num(&mut a.packets),
            "--duration-ns" => num(&mut a.duration_ns),
            "--on-ns" => num(&mut a.on_ns),
            "--off-ns" => num(&mut a.off_ns),
            other => die(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    a
}

/// The synthetic process the flags describe, and its description for the summary.
fn synthetic(a: &Args, kind: &str, seed: u64) -> Result<(Synthetic, Value), String> {
    let size = a.size.ok_or("--size: give the packets' size in bytes")?;
    if !(MIN_SIZE_BYTES as u64..=MAX_SIZE_BYTES as u64).contains(&size) {
        return Err(format!("--size: {size} is not from {MIN_SIZE_BYTES} to {MAX_SIZE_BYTES} bytes"));
    }
    // The mean gap between packets as an exact fraction of ns.
    let (gap_num, gap_den) = match (a.arrival_bps, a.arrival_pps) {
        (Some(_), Some(_)) | (None, None) => return Err("--arrival-bps: give the arrival rate in bit/s or (--arrival-pps) in packets/s, one of them".into()),
        (Some(bps), _) if !(1..=MAX_ARRIVAL_BPS).contains(&bps) => {
            return Err(format!("--arrival-bps: {bps} is not from 1 to {MAX_ARRIVAL_BPS} bit/s"))
        }
        (_, Some(pps)) if !(1..=MAX_ARRIVAL_PPS).contains(&pps) => {
            return Err(format!("--arrival-pps: {pps} is not from 1 to {MAX_ARRIVAL_PPS} packets/s (one a nanosecond)"))
        }
        (Some(bps), None) => (size as u128 * 8 * 1_000_000_000, bps as u128),
        (None, Some(pps)) => (1_000_000_000, pps as u128),
    };
    let process = match kind {
        "constant" => Process::Constant,
        "poisson" => Process::Poisson,
        "on-off" => match (a.on_ns, a.off_ns) {
            (Some(0), _) => return Err("--on-ns: must be positive".into()),
            (Some(on_ns), Some(off_ns)) => Process::OnOff { on_ns, off_ns },
            _ => return Err("--on-ns: on-off arrivals need --on-ns and --off-ns".into()),
        },
        other => return Err(format!("--synthetic: {other:?} is not an arrival process (constant, poisson, on-off)")),
    };
    if !matches!(process, Process::OnOff { .. }) && (a.on_ns.is_some() || a.off_ns.is_some()) {
        return Err("--on-ns: only on-off arrivals have on and off periods".into());
    }
    if a.packets == Some(0) || a.duration_ns == Some(0) {
        return Err(format!("--{}: 0 replays nothing; give 1 or more", if a.packets == Some(0) { "packets" } else { "duration-ns" }));
    }
    if a.packets.is_none() && a.duration_ns.is_none() {
        return Err("--packets: give a packet count, a duration (--duration-ns), or both".into());
    }
    let flows = a.flows.unwrap_or(1);
    if !(1..=u32::MAX as u64).contains(&flows) {
        return Err(format!("--flows: {flows} is not from 1 to {}", u32::MAX));
    }
    let flow_ids = match a.flow_ids.as_deref().unwrap_or("round-robin") {
        "round-robin" => FlowIds::RoundRobin,
        "random" => FlowIds::Random,
        other => return Err(format!("--flow-ids: {other:?} is neither round-robin nor random")),
    };
    let ecn_code = a.ecn.unwrap_or(0);
    let ecn = ecn_from_code(ecn_code).ok_or_else(|| format!("--ecn: {ecn_code} is not an ECN codepoint (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE)"))?;
    let s = Synthetic { process, gap_num, gap_den, size_bytes: size as u32, flows: flows as u32, flow_ids, ecn, packets: a.packets, duration_ns: a.duration_ns, seed };
    let desc = json!({
        "synthetic": kind, "arrival_bps": a.arrival_bps, "arrival_pps": a.arrival_pps, "size_bytes": size,
        "flows": flows, "flow_ids": a.flow_ids.as_deref().unwrap_or("round-robin"), "ecn": ecn_code,
        "packets": a.packets, "duration_ns": a.duration_ns, "on_ns": a.on_ns, "off_ns": a.off_ns,
    });
    Ok((s, desc))
}

/// With --progress, tells the caller how far the replay has got: a line `progress FATES
/// VIRTUAL_NS` on stderr, at most every half second of wall time (the clock is read once in
/// 65536 fates).
struct Progress<'a, S> {
    inner: &'a mut S,
    fates: u64,
    last: WallClock,
    report: bool,
}

impl<S: FateSink> FateSink for Progress<'_, S> {
    fn fate(&mut self, f: &Fate) {
        self.inner.fate(f);
        self.fates += 1;
        if self.report && self.fates % 65536 == 0 && self.last.elapsed().as_millis() >= 500 {
            eprintln!("progress {} {}", self.fates, f.t_ns);
            self.last = WallClock::now();
        }
    }
}

fn main() {
    let a = parse_args();
    let config_path = a.config.clone().unwrap_or_else(|| die(format!("--config: required; {USAGE}")));
    let out = a.out.clone().unwrap_or_else(|| die(format!("--out: required; {USAGE}")));
    // The config's own field first, after the flag that named the file.
    let direction: DirectionJson = load_json(&config_path).unwrap_or_else(|e| die(format!("--config {config_path}: {e}")));
    let mut cfg = direction.resolve().unwrap_or_else(|e| die(format!("--config {config_path}: {e}"))).config;
    // A replay's packets are whatever the trace says, up to an IPv4 datagram.
    cfg.max_frame_bytes = MAX_SIZE_BYTES as usize;
    let config_echo: Value = load_json(&config_path).unwrap_or_else(|e| die(e));
    let discipline = config_echo["queue"]["discipline"].clone();

    enum Source {
        Trace(Vec<arrivals::Arrival>),
        Synthetic(Synthetic),
    }
    let (source, arrivals_desc) = match (&a.arrivals, &a.synthetic) {
        (Some(_), Some(_)) | (None, None) => die(format!("--arrivals: give an arrival trace or --synthetic PROCESS, one of them; {USAGE}")),
        (Some(path), None) => {
            if [a.arrival_bps, a.arrival_pps, a.size, a.flows, a.ecn, a.packets, a.duration_ns, a.on_ns, a.off_ns].iter().any(Option::is_some) || a.flow_ids.is_some() {
                die("--arrivals: a trace gives every packet; the synthetic flags do not apply");
            }
            let text = std::fs::read(path).unwrap_or_else(|e| die(format!("--arrivals {}: {e}", path.display())));
            let parsed = arrivals::parse_csv(&text).unwrap_or_else(|e| die(format!("--arrivals {}: {e}", path.display())));
            (Source::Trace(parsed), json!({"trace": path}))
        }
        (None, Some(kind)) => {
            let (s, desc) = synthetic(&a, kind, cfg.seed).unwrap_or_else(|e| die(e));
            (Source::Synthetic(s), desc)
        }
    };

    std::fs::create_dir_all(&out).unwrap_or_else(|e| die(format!("--out {}: {e}", out.display())));
    let fates_path = out.join("fates.csv");
    let file = File::create(&fates_path).unwrap_or_else(|e| die(format!("--out {}: {e}", fates_path.display())));
    let csv = WriterThread::new(FatesCsv::new(file), |csv| csv.finish().map(drop));
    let mut tally = Tally::new(csv);
    let started = WallClock::now();
    // What the whole replay is, so the caller can say how much is left: packets, or virtual time.
    match (a.progress, &source, a.packets, a.duration_ns) {
        (false, ..) => {}
        (true, Source::Trace(v), _, _) => eprintln!("total packets {}", v.len()),
        (true, _, Some(n), _) => eprintln!("total packets {n}"),
        (true, _, None, Some(ns)) => eprintln!("total ns {ns}"),
        _ => {}
    }
    let mut progress = Progress { inner: &mut tally, fates: 0, last: started, report: a.progress };
    let result = match source {
        Source::Trace(v) => replay(&cfg, v, &mut progress),
        Source::Synthetic(s) => replay(&cfg, s.iter(), &mut progress),
    };
    let packets = result.unwrap_or_else(|e| die(e));
    let mut summary = tally.summary();
    if let Err(e) = tally.inner.finish() {
        die(format!("--out {}: {e}", fates_path.display()));
    }
    let wall_s = started.elapsed().as_secs_f64();
    summary.insert("wall_time_s".into(), json!(wall_s));
    summary.insert("packets_per_s".into(), json!(if wall_s > 0.0 { packets as f64 / wall_s } else { 0.0 }));
    summary.insert("discipline".into(), discipline);
    summary.insert("arrivals".into(), arrivals_desc);
    summary.insert("config".into(), config_echo);
    summary.insert("max_frame_bytes".into(), json!(cfg.max_frame_bytes));
    summary.insert("version".into(), json!(bloatlab_core::VERSION));
    write_summary(&out.join("summary.json"), &Value::Object(summary));
}

fn write_summary(path: &Path, summary: &Value) {
    let text = serde_json::to_string_pretty(summary).expect("a JSON value serialises") + "\n";
    std::fs::write(path, text).unwrap_or_else(|e| die(format!("--out {}: {e}", path.display())));
}
