//! Fuzz target `link`: what bloatlab-link makes of its input besides a direction's JSON (the
//! `config` target's). Its process config (config.rs's Config::load) over arbitrary topologies
//! and mutations of the one the Python side writes for cs244; the plan laid out from it
//! (plan.rs); the switches built from the plan (core's fabric.rs) routing arbitrary frames; and
//! the pcapng files it writes of user-named directions (pcapng.rs, capture.rs), read back.
//!
//! A config is refused with an error of one line, or it is accepted and planned (or refused
//! by the plan in one line); a plan gives every direction a worker and every switch port a
//! direction; a switch never sends a frame back out of the port it came by; and every pcapng
//! file walks from block to block, each option within its block, its strings as they were given.

mod common;

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use bloatlab_core::fabric::{Fabric, Peer, RouteKind};
use bloatlab_fuzz::corpus;
use bloatlab_link::capture::Capture;
use bloatlab_link::config::Config;
use bloatlab_link::pcapng::{self, PacketMeta};
use bloatlab_link::plan::{End, Plan};
use common::{apply, edit, fuzz, one_line, Edit, Outcomes};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

/// A scratch directory of this process, removed when the target ends, failed or not.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("bloatlab-fuzz-{}-link-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An end of a link: an interface or a switch, by a name from a small pool (so that names
/// repeat), or something else.
#[derive(Clone, Debug)]
enum EndSpec {
    Iface(u8),
    Switch(u8),
    Both(u8),
    Neither,
    EmptySwitch,
}

fn end() -> impl Strategy<Value = EndSpec> {
    prop_oneof![
        20 => (0..16u8).prop_map(EndSpec::Iface),
        20 => (0..4u8).prop_map(EndSpec::Switch),
        1 => (0..4u8).prop_map(EndSpec::Both),
        1 => Just(EndSpec::Neither),
        1 => Just(EndSpec::EmptySwitch),
    ]
}

/// A topology: links between ends, with process settings drawn within and around their bounds.
fn topology() -> impl Strategy<Value = Value> {
    // Names unique but now and then (a repeat is refused); settings mostly within bounds.
    let link = (end(), end(), proptest::option::weighted(0.05, 0..4u8));
    let settings = (
        proptest::option::weighted(0.1, prop_oneof![8 => 1..4usize, 1 => Just(0usize), 1 => 250..300usize]),
        proptest::option::weighted(0.1, prop_oneof![8 => 0.5..=1.0f64, 1 => 0.4..0.5f64, 1 => 1.0..1.1f64]),
        proptest::option::weighted(0.1, prop_oneof![8 => 0..20_000_000u64, 1 => 20_000_001..30_000_000u64]),
        proptest::option::weighted(
            0.1,
            prop_oneof![Just(json!(null)), Just(json!({})), Just(json!({"enter_pressure": 0.9, "exit_pressure": 0.95})), Just(json!({"sleep_ns": 0}))],
        ),
    );
    (proptest::collection::vec(link, 0..10), settings).prop_map(|(links, (workers, quantile, lead, batching))| {
        let dir = json!({"rate_bps": 10000000, "delay_ns": 1000000, "queue": {"discipline": "droptail", "packets": 10}});
        let links: Vec<Value> = links
            .into_iter()
            .enumerate()
            .map(|(i, (a, b, repeat))| {
                let mut l = json!({"name": format!("l{}", repeat.map_or(i, usize::from)), "forward": dir, "reverse": dir});
                for (side, e) in [("a", a), ("b", b)] {
                    let o = l.as_object_mut().unwrap();
                    match e {
                        EndSpec::Iface(i) => o.insert(format!("{side}_iface"), json!(format!("v{i}"))),
                        EndSpec::Switch(s) => o.insert(format!("{side}_switch"), json!(format!("s{s}"))),
                        EndSpec::Both(s) => {
                            o.insert(format!("{side}_iface"), json!(format!("v{s}")));
                            o.insert(format!("{side}_switch"), json!(format!("s{s}")))
                        }
                        EndSpec::EmptySwitch => o.insert(format!("{side}_switch"), json!("")),
                        EndSpec::Neither => None,
                    };
                }
                l
            })
            .collect();
        let mut cfg = json!({"stats_path": "/run/x/stats.json", "links": links});
        let o = cfg.as_object_mut().unwrap();
        if let Some(w) = workers {
            o.insert("workers".into(), json!(w));
        }
        if let Some(q) = quantile {
            o.insert("lead_quantile".into(), json!(q));
        }
        if let Some(l) = lead {
            o.insert("max_lead_ns".into(), json!(l));
        }
        if let Some(b) = batching {
            o.insert("batching".into(), b);
        }
        cfg
    })
}

/// The config as bloatlab-link reads it, planned for `cores`, its switches routing `frames`.
fn check_config(path: &std::path::Path, text: &[u8], cores: usize, frames: &[(usize, Vec<u8>)], outcomes: &Outcomes) -> Result<(), TestCaseError> {
    std::fs::write(path, text).unwrap();
    let cfg = match Config::load(path.to_str().unwrap()) {
        Ok(c) => c,
        Err(e) => return one_line("Config::load", &e),
    };
    outcomes.parsed.fetch_add(1, Ordering::Relaxed);
    prop_assert_eq!(cfg.directions.len(), 2 * cfg.links.len());
    let plan = match Plan::new(&cfg, cores) {
        Ok(p) => p,
        Err(e) => return one_line("Plan::new", &e),
    };
    outcomes.accepted.fetch_add(1, Ordering::Relaxed);
    prop_assert_eq!(plan.dirs.len(), 2 * cfg.links.len());
    prop_assert!(plan.workers >= 1 && plan.workers <= plan.dirs.len().max(1));
    for (i, d) in plan.dirs.iter().enumerate() {
        prop_assert_eq!(d.id, i);
        prop_assert!(d.worker < plan.workers, "direction {} on worker {} of {}", i, d.worker, plan.workers);
        // A direction out of a switch (its input a port) is that port's `out`; a direction into
        // one (its output a port) is the other direction of that port's link.
        if let End::Port { switch, port } = d.input {
            prop_assert_eq!(plan.switch_ports[switch][port].out, i);
        }
        if let End::Port { switch, port } = d.output {
            prop_assert_eq!(plan.switch_ports[switch][port].out, i ^ 1);
        }
    }
    for ports in &plan.switch_ports {
        for p in ports {
            prop_assert!(p.out < plan.dirs.len());
            if let Peer::Switch { switch, link } = p.peer {
                prop_assert!(switch < plan.switch_ports.len() && link < cfg.links.len());
            }
        }
    }
    // The switches: a frame in by any port goes out by others only, and never by a blocked one.
    let fabric = Fabric::new(plan.switch_ports.clone());
    let mut out = Vec::new();
    for (k, frame) in frames {
        if plan.switch_ports.is_empty() {
            break;
        }
        let switch = k % plan.switch_ports.len();
        let ports = &plan.switch_ports[switch];
        let port = (k / 7) % ports.len();
        out.clear();
        let kind = fabric.route(switch, port, frame, &mut out);
        let own = ports[port].out;
        prop_assert!(!out.contains(&own), "a frame sent back out of the port it came in by");
        for d in &out {
            let p = ports.iter().position(|p| p.out == *d).expect("out by a port of the switch");
            prop_assert!(!fabric.blocked(switch, p), "out by a blocked port");
        }
        match kind {
            RouteKind::Forwarded => prop_assert_eq!(out.len(), 1),
            RouteKind::Filtered | RouteKind::Blocked => prop_assert!(out.is_empty()),
            RouteKind::Flooded => prop_assert_eq!(out.len(), (0..ports.len()).filter(|&p| p != port && !fabric.blocked(switch, p)).count()),
        }
        if fabric.blocked(switch, port) {
            prop_assert_eq!(kind, RouteKind::Blocked);
        }
    }
    Ok(())
}

/// Frames for the switches: real ones with their addresses changed, and arbitrary bytes.
fn frames() -> impl Strategy<Value = Vec<(usize, Vec<u8>)>> {
    let seeds = corpus::frames();
    let n = seeds.len();
    let frame = prop_oneof![
        4 => (0..n, 0..6u8, 0..6u8, any::<bool>()).prop_map(move |(k, dst, src, multicast)| {
            let mut f = seeds[k].1.clone();
            f[5] = dst;
            f[11] = src;
            if multicast {
                f[0] |= 1;
            }
            f
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..20),
    ];
    proptest::collection::vec((any::<usize>(), frame), 0..24)
}

#[test]
fn topologies() {
    let dir = Scratch::new("topologies");
    let path = dir.0.join("config.json");
    let outcomes = Outcomes::new();
    fuzz("link.topologies", 1_000, || (topology(), 1..5usize, frames()), |(cfg, cores, frames)| {
        check_config(&path, cfg.to_string().as_bytes(), cores, &frames, &outcomes)
    });
    outcomes.report("link.topologies", "loaded", "planned and switched");
}

#[test]
fn mutated_configs() {
    let dir = Scratch::new("mutated");
    let path = dir.0.join("config.json");
    let outcomes = Outcomes::new();
    let n = corpus::DIRECTIONS.len();
    // Whole-text edits of the config as write_config writes it: cuts, flips, splices.
    let edits = || prop_oneof![1 => Just(vec![]), 2 => proptest::collection::vec(edit(), 1..4)];
    let strategy = || (0..n, 0..n, edits(), 1..5usize, frames());
    fuzz("link.mutated_configs", 1_500, strategy, |(f, r, edits, cores, frames): (usize, usize, Vec<Edit>, usize, _)| {
        let mut text = corpus::link_config(corpus::DIRECTIONS[f], corpus::DIRECTIONS[r]).into_bytes();
        for e in &edits {
            apply(&mut text, e);
        }
        check_config(&path, &text, cores, &frames, &outcomes)
    });
    outcomes.report("link.mutated_configs", "loaded", "planned and switched");
}

/// A pcapng file, read strictly: its blocks, each with its options; (block type, body, options).
type Block = (u32, Vec<u8>, Vec<(u16, Vec<u8>)>);

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// The blocks of a file, or what is wrong with it (each block type's fixed part, then options).
fn read_pcapng(b: &[u8]) -> Result<Vec<Block>, String> {
    let mut at = 0;
    let mut blocks = Vec::new();
    while at < b.len() {
        if b.len() < at + 12 {
            return Err(format!("a block at {at} cut short"));
        }
        let (kind, len) = (u32_at(b, at), u32_at(b, at + 4) as usize);
        if len % 4 != 0 || len < 12 || at + len > b.len() {
            return Err(format!("block at {at}: length {len}"));
        }
        if u32_at(b, at + len - 4) as usize != len {
            return Err(format!("block at {at}: trailing length"));
        }
        let body = &b[at + 8..at + len - 4];
        let fixed = match kind {
            0x0A0D_0D0A => 16,
            0x0000_0001 => 8,
            0x0000_0006 if body.len() >= 20 => 20 + (u32_at(body, 12) as usize).div_ceil(4) * 4,
            0x0000_0006 => return Err(format!("block at {at}: a packet block of {} bytes", body.len())),
            other => return Err(format!("block type {other:#x}")),
        };
        if fixed > body.len() {
            return Err(format!("block at {at}: its fixed part ({fixed}) past its body ({})", body.len()));
        }
        let mut options = Vec::new();
        let mut o = fixed;
        while o < body.len() {
            if o + 4 > body.len() {
                return Err(format!("block at {at}: an option cut short"));
            }
            let (code, olen) = (u16_at(body, o), u16_at(body, o + 2) as usize);
            if code == 0 {
                if olen != 0 || o + 4 != body.len() {
                    return Err(format!("block at {at}: opt_endofopt not last"));
                }
                break;
            }
            let end = o + 4 + olen.div_ceil(4) * 4;
            if end > body.len() {
                return Err(format!("block at {at}: option {code} of {olen} bytes runs past the block"));
            }
            options.push((code, body[o + 4..o + 4 + olen].to_vec()));
            o = end;
            if o == body.len() {
                return Err(format!("block at {at}: options without opt_endofopt"));
            }
        }
        blocks.push((kind, body[..fixed].to_vec(), options));
        at += len;
    }
    Ok(blocks)
}

/// Strings as a user may name a direction: short, Unicode, empty, or past an option's 64 KiB.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "\\PC{0,24}",
        1 => Just(String::new()),
        1 => (65_530..70_000usize, any::<char>()).prop_map(|(n, c)| c.to_string().repeat(n / c.len_utf8())),
    ]
}

fn meta() -> impl Strategy<Value = (u64, u32, Option<u32>, Option<u64>, Option<String>)> {
    (any::<u64>(), any::<u32>(), proptest::option::of(any::<u32>()), proptest::option::of(any::<u64>()), proptest::option::of(name()))
}

#[test]
fn pcapng_blocks() {
    let packets = proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..200), meta()), 0..8);
    let strategy = || (name(), name(), name(), prop_oneof![14..300u32, Just(262_144u32), any::<u32>()], packets);
    fuzz("link.pcapng", 1_000, strategy, |(app, if_name, if_description, snaplen, packets)| {
        let mut b = Vec::new();
        pcapng::header(&mut b, &app, &if_name, &if_description, snaplen);
        let mut want_packets = Vec::new();
        for (frame, (t_ns, wire_len, flags, packet_id, comment)) in &packets {
            let meta = PacketMeta { t_ns: *t_ns, wire_len: *wire_len, flags: *flags, packet_id: *packet_id, comment: comment.as_deref() };
            let before = b.len();
            pcapng::packet(&mut b, frame, snaplen, &meta);
            prop_assert_eq!(b.len() - before, pcapng::packet_block_len(frame.len().min(snaplen as usize), &meta), "packet_block_len");
            want_packets.push((frame, meta));
        }
        let blocks = read_pcapng(&b).map_err(|e| TestCaseError::fail(format!("an unreadable file: {e}")))?;
        prop_assert_eq!(blocks.len(), 2 + packets.len());
        let string = |opts: &[(u16, Vec<u8>)], code: u16| opts.iter().find(|o| o.0 == code).map(|o| o.1.clone());
        // Strings longer than an option holds are cut, at a character's boundary.
        let kept = |s: &str, got: Option<Vec<u8>>| -> Result<(), TestCaseError> {
            let got = got.unwrap_or_default();
            let got = std::str::from_utf8(&got).map_err(|_| TestCaseError::fail("a string option that is not UTF-8"))?;
            prop_assert!(s.starts_with(got) && (got.len() == s.len() || s.len() > 65_535), "a string option changed");
            Ok(())
        };
        kept(&app, string(&blocks[0].2, 4))?;
        kept(&if_name, string(&blocks[1].2, 2))?;
        kept(&if_description, string(&blocks[1].2, 3))?;
        prop_assert_eq!(u32_at(&blocks[1].1, 4), snaplen);
        for ((frame, meta), block) in want_packets.iter().zip(&blocks[2..]) {
            let body = &block.1;
            let kept_len = frame.len().min(snaplen as usize);
            prop_assert_eq!(((u32_at(body, 4) as u64) << 32) | u32_at(body, 8) as u64, meta.t_ns);
            prop_assert_eq!(u32_at(body, 12) as usize, kept_len);
            prop_assert_eq!(u32_at(body, 16), meta.wire_len.max(kept_len as u32));
            prop_assert_eq!(&body[20..20 + kept_len], &frame[..kept_len]);
            if let Some(c) = meta.comment {
                kept(c, string(&block.2, 1))?;
            }
        }
        Ok(())
    });
}

#[test]
fn captures() {
    let scratch = Scratch::new("captures");
    let dir = &scratch.0;
    let frame = prop_oneof![proptest::collection::vec(any::<u8>(), 0..100), proptest::collection::vec(any::<u8>(), 1400..1600)];
    let offers = proptest::collection::vec((any::<bool>(), frame), 0..60);
    let strategy = || (prop_oneof![14..200u32, 1400..=262_144u32], prop_oneof![4096..20_000u64, 20_000..1_000_000u64], name(), offers);
    let case = std::sync::atomic::AtomicU64::new(0);
    fuzz("link.captures", 200, strategy, |(snaplen, limit_bytes, if_name, offers)| {
        let k = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cfg = bloatlab_config::CaptureJson {
            name: if_name,
            departures_path: dir.join(format!("{k}.pcapng")),
            drops_path: dir.join(format!("{k}.drops.pcapng")),
            snaplen,
            limit_bytes,
        };
        let mut c = match Capture::open(&cfg, "l0.forward") {
            Ok(c) => c,
            Err(e) => return one_line("Capture::open", &e),
        };
        let (mut departures, mut drops) = (0u64, 0u64);
        for (i, (dropped, frame)) in offers.iter().enumerate() {
            if *dropped {
                c.dropped(frame, frame.len() as u32, i as u64, i as u64, "queue_full");
                drops += 1;
            } else {
                c.departure(frame, frame.len() as u32, i as u64, i as u64);
                departures += 1;
            }
            if i % 16 == 15 {
                c.tick();
            }
        }
        let n = c.finish();
        prop_assert!(n.error.is_none(), "{:?}", n.error);
        for (path, counts, offered) in [(&cfg.departures_path, n.departures, departures), (&cfg.drops_path, n.drops, drops)] {
            let file = std::fs::read(path).unwrap();
            let blocks = read_pcapng(&file).map_err(|e| TestCaseError::fail(format!("{}: {e}", path.display())))?;
            prop_assert_eq!(counts.written + counts.cut + counts.lost, offered);
            prop_assert_eq!(blocks.len() as u64 - 2, counts.written, "the file holds what the counts say");
            prop_assert_eq!(file.len() as u64, counts.bytes);
            if counts.written > 0 {
                prop_assert!(counts.bytes <= limit_bytes, "{} bytes, the limit is {}", counts.bytes, limit_bytes);
            }
            std::fs::remove_file(path).unwrap();
        }
        Ok(())
    });
}
