//! Fuzz target `replay_input`: what a user gives bloatlab-replay (docs/replay.md). The arrival
//! trace (arrivals.rs's parse_csv) over arbitrary bytes and over real traces cut, edited and
//! rearranged; the synthetic arrival processes (constant, Poisson, on-off) with any settings
//! bloatlab-replay's flags accept; and what a replay writes of them (fates.rs: fates.csv and the
//! summary's tally).
//!
//! A trace is refused with an error of one line, or it is accepted and replays: every packet
//! gets one fate, in a fates.csv whose every line reads back. A synthetic process gives times
//! that never go back, within its duration, of flows among its flows.

mod common;

use bloatlab_core::pipeline::DirectionConfig;
use bloatlab_core::qdisc::{CodelParams, Limit, PieParams, QueueConfig, RedParams};
use bloatlab_core::rate::Rate;
use bloatlab_core::wire::Ecn;
use bloatlab_core::Duration;
use bloatlab_fuzz::corpus;
use bloatlab_replay::arrivals::{parse_csv, Arrival, MAX_SIZE_BYTES, MIN_SIZE_BYTES};
use bloatlab_replay::fates::{put_u64, CSV_HEADER};
use bloatlab_replay::{replay, FatesCsv, FlowIds, Process, Synthetic, Tally};
use common::{apply, edit, fuzz, one_line, Edit};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The links the accepted traces replay through: a queue that overflows, CoDel's and PIE's
/// timers, RED's idle decay; a slow rate, delay and loss.
fn links() -> Vec<DirectionConfig> {
    let direction = |rate, delay_ms, loss, queue| DirectionConfig {
        rate,
        delay: Duration::from_millis(delay_ms),
        jitter: Duration::ZERO,
        loss,
        queue,
        seed: 7,
        max_frame_bytes: MAX_SIZE_BYTES as usize,
        ect1_rewrite: Vec::new(),
    };
    vec![
        direction(Rate::Constant { bps: 10_000_000 }, 5, 0.0, QueueConfig::DropTail(Limit::Packets(20))),
        direction(Rate::Constant { bps: 1_000_000 }, 0, 0.01, QueueConfig::Codel(Limit::Packets(100), CodelParams { ecn: true, ..CodelParams::default() })),
        direction(Rate::Constant { bps: 100_000_000 }, 20, 0.0, QueueConfig::Pie(Limit::Bytes(100_000), PieParams { ns3: true, ..PieParams::default() })),
        direction(Rate::Unlimited, 1, 0.1, QueueConfig::Red(Limit::Packets(100), RedParams { adaptive: true, ecn: true, ..RedParams::default() })),
    ]
}

/// Replays an accepted trace through `link`: one fate each, and a fates.csv that reads back.
fn check_replay(arrivals: &[Arrival], link: &DirectionConfig) -> Result<(), TestCaseError> {
    let mut tally = Tally::new(FatesCsv::new(Vec::new()));
    let n = match replay(link, arrivals.iter().copied(), &mut tally) {
        Ok(n) => n,
        Err(e) => {
            one_line("replay", &e)?;
            prop_assert!(!e.contains("internal error"), "the replay lost track: {}", e);
            return Ok(());
        }
    };
    prop_assert_eq!(n, arrivals.len() as u64);
    prop_assert_eq!(tally.packets, n, "one fate each");
    let summary = tally.summary();
    prop_assert_eq!(summary["packets"].as_u64(), Some(n));
    let csv = String::from_utf8(tally.inner.finish().unwrap()).unwrap();
    let mut lines = csv.lines();
    prop_assert_eq!(lines.next(), Some(CSV_HEADER.trim_end()));
    let mut ids = vec![false; arrivals.len()];
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        prop_assert_eq!(f.len(), 8, "a fates line of 8 fields: {:?}", line);
        let id: usize = f[0].parse().unwrap();
        let a = arrivals[id];
        prop_assert!(!std::mem::replace(&mut ids[id], true), "packet {} has two fates", id);
        prop_assert_eq!((f[1].parse::<u64>().unwrap(), f[2].parse::<u32>().unwrap(), f[3].parse::<u32>().unwrap()), (a.t_ns, a.size_bytes, a.flow));
        prop_assert!(f[4] == "departed" || f[4] == "dropped");
        let (t, sojourn) = (f[5].parse::<u64>().unwrap(), f[7].parse::<u64>().unwrap());
        prop_assert!(t >= a.t_ns && t - a.t_ns >= sojourn, "a fate before its arrival, or a sojourn past it");
    }
    prop_assert!(ids.iter().all(|&seen| seen), "a packet without a fate");
    Ok(())
}

/// Everything the parser promises of a trace it accepts, and its replay.
fn check_text(text: &[u8], link: &DirectionConfig) -> Result<(), TestCaseError> {
    let arrivals = match parse_csv(text) {
        Ok(a) => a,
        Err(e) => return one_line("parse_csv", &e),
    };
    prop_assert!(!arrivals.is_empty());
    prop_assert!(arrivals.len() <= text.iter().filter(|&&b| b == b'\n').count() + 1, "more arrivals than lines");
    for w in arrivals.windows(2) {
        prop_assert!(w[0].t_ns <= w[1].t_ns, "times go back");
    }
    for a in &arrivals {
        prop_assert!((MIN_SIZE_BYTES..=MAX_SIZE_BYTES).contains(&a.size_bytes));
    }
    check_replay(&arrivals, link)
}

#[test]
fn arbitrary_text() {
    let links = links();
    let text = || {
        (
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..300),
                "[0-9,\\n ]{0,300}".prop_map(String::into_bytes),
                // A valid header, then anything like its rows.
                "(t_ns,size_bytes,flow,ecn\\n)([0-9]{1,21},[0-9]{1,6},[0-9]{1,11},[0-9]{1,2}\\n){0,12}".prop_map(String::into_bytes),
            ],
            0..links.len(),
        )
    };
    fuzz("replay_input.arbitrary_text", 3_000, text, |(text, link)| check_text(&text, &links[link]));
}

/// A trace as a user writes one: columns in some order, times that never go back (or stand
/// still), sizes and flows in range; whitespace, blank lines, CRLF.
fn trace() -> impl Strategy<Value = (String, Vec<Edit>, u8)> {
    let order = Just([0usize, 1, 2, 3]).prop_shuffle();
    let rows = proptest::collection::vec(
        (
            prop_oneof![3 => 0..2_000_000u64, 1 => Just(0u64), 1 => 0..u64::MAX / 4],
            prop_oneof![MIN_SIZE_BYTES..1515u32, MIN_SIZE_BYTES..=MAX_SIZE_BYTES],
            prop_oneof![0..4u32, any::<u32>()],
            0..4u8,
        ),
        1..40,
    );
    (order, rows, proptest::collection::vec(edit(), 0..4), any::<u8>()).prop_map(|(order, rows, edits, style)| {
        let mut t = 0u64;
        let rows: Vec<(u64, u32, u32, u8)> = rows
            .into_iter()
            .map(|(gap, size, flow, ecn)| {
                t = t.saturating_add(gap);
                (t, size, flow, ecn)
            })
            .collect();
        let mut text = corpus::arrivals_csv(order, &rows);
        if style & 1 != 0 {
            text = text.replace('\n', "\r\n");
        }
        if style & 2 != 0 {
            text = text.replace(',', " , ");
        }
        if style & 4 != 0 {
            text = format!("\n  \n{text}\n\n");
        }
        (text, edits, style)
    })
}

#[test]
fn mutated_traces() {
    let links = links();
    fuzz("replay_input.mutated_traces", 2_000, trace, |(text, edits, style)| {
        let mut bytes = text.into_bytes();
        for e in &edits {
            apply(&mut bytes, e);
        }
        check_text(&bytes, &links[style as usize % links.len()])
    });
}

/// The settings bloatlab-replay's flags accept (main.rs's `synthetic`): a size from 42 to 65535
/// bytes, an arrival rate of 1 to 4 * 10^14 bit/s or 1 to 10^9 packets/s, on and off periods
/// (on above 0), 1 to 2^32 - 1 flows, a packet count or a duration above 0.
fn synthetic() -> impl Strategy<Value = Synthetic> {
    let rate = prop_oneof![
        (1..=400_000_000_000_000u64).prop_map(|bps| (Some(bps), None)),
        prop_oneof![1..=400_000_000_000_000u64, Just(1u64), Just(400_000_000_000_000)].prop_map(|bps| (Some(bps), None)),
        prop_oneof![1..=1_000_000_000u64, Just(1u64)].prop_map(|pps| (None, Some(pps))),
    ];
    let period = || prop_oneof![1..1_000_000_000u64, Just(1u64), any::<u64>().prop_map(|n| n.max(1)), Just(u64::MAX)];
    let process = prop_oneof![
        Just(Process::Constant),
        Just(Process::Poisson),
        (period(), prop_oneof![period(), Just(0u64)]).prop_map(|(on_ns, off_ns)| Process::OnOff { on_ns, off_ns }),
    ];
    let stop = prop_oneof![
        (1..100_000u64).prop_map(|n| (Some(n), None)),
        prop_oneof![1..10_000_000_000u64, any::<u64>().prop_map(|n| n.max(1))].prop_map(|d| (None, Some(d))),
        (any::<u64>(), any::<u64>()).prop_map(|(n, d)| (Some(n.max(1)), Some(d.max(1)))),
    ];
    (
        MIN_SIZE_BYTES..=MAX_SIZE_BYTES,
        rate,
        process,
        prop_oneof![Just(1u32), 1..16u32, Just(u32::MAX)],
        any::<bool>(),
        0..4u8,
        stop,
        any::<u64>(),
    )
        .prop_map(|(size, (bps, pps), process, flows, random, ecn, (packets, duration_ns), seed)| {
            // The mean gap as the exact fraction main.rs makes of the flags.
            let (gap_num, gap_den) = match (bps, pps) {
                (Some(bps), _) => (size as u128 * 8 * 1_000_000_000, bps as u128),
                (_, Some(pps)) => (1_000_000_000, pps as u128),
                _ => unreachable!(),
            };
            Synthetic {
                process,
                gap_num,
                gap_den,
                size_bytes: size,
                flows,
                flow_ids: if random { FlowIds::Random } else { FlowIds::RoundRobin },
                ecn: Ecn::from_bits(ecn),
                packets,
                duration_ns,
                seed,
            }
        })
}

#[test]
fn synthetic_processes() {
    fuzz("replay_input.synthetic", 3_000, synthetic, |s| {
        let mut last = 0u64;
        let mut n = 0u64;
        // The first arrivals, and some far along (the k-th time is computed, not summed).
        for a in s.iter().take(300) {
            prop_assert!(a.t_ns >= last, "time went back: {} after {}", a.t_ns, last);
            prop_assert!(s.duration_ns.map_or(true, |d| a.t_ns < d), "an arrival at {} past the duration", a.t_ns);
            prop_assert!(a.flow < s.flows);
            prop_assert_eq!((a.size_bytes, a.ecn), (s.size_bytes, s.ecn));
            last = a.t_ns;
            n += 1;
        }
        prop_assert!(s.packets.map_or(true, |p| n <= p));
        Ok(())
    });
}

/// fates.csv's integers, formatted two digits at a time, read back as they were.
#[test]
fn fates_integers() {
    fuzz("replay_input.put_u64", 5_000, || prop_oneof![any::<u64>(), 0..1000u64, Just(u64::MAX)], |v| {
        let mut buf = [0u8; 20];
        let mut pos = 0;
        put_u64(&mut buf, &mut pos, v);
        prop_assert_eq!(std::str::from_utf8(&buf[..pos]).unwrap(), v.to_string());
        Ok(())
    });
}
