//! What every target shares: how many cases it runs, where failures are kept, and the line that
//! reports its figures.

#![allow(dead_code)] // each target uses its own share of these

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngAlgorithm, TestCaseError, TestRunner};

const STACK_BYTES: usize = 256 << 20;

/// A case running longer than this is a hang (a loop without bound in the code under test):
/// the target says so, with the case when FUZZ_SHOW_HANG is set, and the process exits, where
/// it would otherwise run until the CI's time is up.
const HANG_S: u64 = 300;

/// Runs `test` over `default_cases` inputs (times FUZZ_SCALE; PROPTEST_CASES, when set, for
/// every target) drawn from the strategy `strategy` makes, then prints `fuzz NAME: N cases in
/// S s`. A failure is shrunk, kept in proptest-regressions/NAME.txt (in this crate's directory),
/// and fails the test; every later run replays the kept ones first.
pub fn fuzz<S, T>(name: &'static str, default_cases: u32, strategy: impl FnOnce() -> S + Send, test: T)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
    T: Fn(S::Value) -> Result<(), TestCaseError> + Send,
{
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        // FUZZ_SCALE multiplies every target's own count: a long campaign, kept in proportion.
        let scale: u32 = std::env::var("FUZZ_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
        config.cases = default_cases.saturating_mul(scale);
    }
    // ChaCha, proptest's default generator, unoptimised in a debug build, took half the time of
    // a case; XorShift is cheap (PROPTEST_RNG_ALGORITHM=cc brings ChaCha back).
    if std::env::var_os("PROPTEST_RNG_ALGORITHM").is_none() {
        config.rng_algorithm = RngAlgorithm::XorShift;
    }
    // A regression file per target, named after it, in this crate whatever the working directory
    // (leaked once per target: proptest wants a &'static path).
    let path: &'static str = Box::leak(format!("{}/proptest-regressions/{name}.txt", env!("CARGO_MANIFEST_DIR")).into_boxed_str());
    config.failure_persistence = Some(Box::new(FileFailurePersistence::Direct(path)));
    let cases = AtomicU64::new(0);
    let started = Instant::now();
    let counted = &cases;
    // The running case's start (ms since `started`; u64::MAX between cases) and, with
    // FUZZ_SHOW_HANG, its value.
    let case_started = AtomicU64::new(u64::MAX);
    let show = std::env::var_os("FUZZ_SHOW_HANG").is_some();
    let current: Mutex<String> = Mutex::new(String::new());
    let done = AtomicBool::new(false);
    let (case_started, current, done) = (&case_started, &current, &done);
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let at = case_started.load(Ordering::Relaxed);
                let now = started.elapsed().as_millis() as u64;
                if at != u64::MAX && now.saturating_sub(at) > HANG_S * 1000 {
                    eprintln!("fuzz {name}: a case has run for {HANG_S} s: a hang. {}", current.lock().unwrap());
                    std::process::exit(101);
                }
            }
        });
        // proptest's value trees of a large case nest deeply: more stack than a test thread's
        // 2 MiB in a debug build.
        let joined = std::thread::Builder::new()
            .name(name.into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(s, move || {
                TestRunner::new(config)
                    .run(&strategy(), |value| {
                        counted.fetch_add(1, Ordering::Relaxed);
                        if show {
                            *current.lock().unwrap() = format!("The case: {value:?}");
                        }
                        case_started.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                        let result = test(value);
                        case_started.store(u64::MAX, Ordering::Relaxed);
                        result
                    })
                    .map_err(|e| e.to_string())
            })
            .expect("a thread for the target")
            .join();
        done.store(true, Ordering::Relaxed);
        joined.unwrap_or_else(|_| Err("a panic outside the test (in making a case)".into()))
    });
    let n = cases.load(Ordering::Relaxed);
    println!("fuzz {name}: {n} cases in {:.1} s", started.elapsed().as_secs_f64());
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
}

/// An error message as bloatlab's parsers promise it: one line, not empty.
pub fn one_line(what: &str, e: &str) -> Result<(), TestCaseError> {
    prop_assert!(!e.trim().is_empty(), "{what}: an empty error");
    prop_assert!(!e.contains('\n') && !e.contains('\r'), "{what}: an error of several lines: {e:?}");
    Ok(())
}

/// One edit of a byte string, as a mutation fuzzer makes them.
#[derive(Clone, Debug)]
pub enum Edit {
    /// Sets the byte at (index modulo the length) to the value.
    Set(usize, u8),
    /// Flips one bit of that byte.
    Flip(usize, u8),
    /// Inserts bytes there.
    Insert(usize, Vec<u8>),
    /// Removes up to n bytes from there.
    Remove(usize, usize),
    /// Cuts the input to (index modulo length + 1) bytes.
    Truncate(usize),
    /// Copies a run of the input over another place (repeats of structure).
    Splice { from: usize, to: usize, len: usize },
}

pub fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        4 => (any::<usize>(), 0..8u8).prop_map(|(i, bit)| Edit::Flip(i, bit)),
        2 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(i, b)| Edit::Insert(i, b)),
        2 => (any::<usize>(), 1..16usize).prop_map(|(i, n)| Edit::Remove(i, n)),
        1 => any::<usize>().prop_map(Edit::Truncate),
        1 => (any::<usize>(), any::<usize>(), 1..32usize).prop_map(|(from, to, len)| Edit::Splice { from, to, len }),
    ]
}

pub fn apply(input: &mut Vec<u8>, edit: &Edit) {
    let n = input.len();
    match edit {
        Edit::Insert(i, bytes) => {
            let at = i % (n + 1);
            input.splice(at..at, bytes.iter().copied());
        }
        _ if n == 0 => {}
        Edit::Set(i, b) => input[i % n] = *b,
        Edit::Flip(i, bit) => input[i % n] ^= 1 << bit,
        Edit::Remove(i, len) => {
            let at = i % n;
            input.drain(at..(at + len).min(n));
        }
        Edit::Truncate(i) => input.truncate(i % n + 1),
        Edit::Splice { from, to, len } => {
            let (from, to) = (from % n, to % n);
            let len = (*len).min(n - from).min(n - to);
            let run = input[from..from + len].to_vec();
            input[to..to + len].copy_from_slice(&run);
        }
    }
}

/// PIE's and DualPI2's controllers cost one update per tupdate of virtual time, as a timer's
/// would: while the probability is moving none can be skipped, so a tupdate of nanoseconds over
/// seconds of virtual time is billions of updates. A case spanning `span_ns` gets a tupdate of at
/// least span / MAX_UPDATES, which leaves every other parameter as drawn.
pub fn bound_updates(q: &mut bloatlab_core::qdisc::QueueConfig, span_ns: u64) {
    use bloatlab_core::qdisc::QueueConfig;
    const MAX_UPDATES: u64 = 50_000;
    let least = bloatlab_core::Duration(span_ns / MAX_UPDATES);
    match q {
        QueueConfig::Pie(_, p) => p.tupdate = p.tupdate.max(least),
        QueueConfig::DualPi2(_, p) => p.tupdate = p.tupdate.max(least),
        _ => {}
    }
}

/// How many cases got how far (refused by the parser, refused later, accepted): a target that
/// only ever meets its parser's first check fuzzes nothing behind it.
#[derive(Default)]
pub struct Outcomes {
    pub parsed: AtomicU64,
    pub accepted: AtomicU64,
}

impl Outcomes {
    pub const fn new() -> Self {
        Outcomes { parsed: AtomicU64::new(0), accepted: AtomicU64::new(0) }
    }
    pub fn report(&self, name: &str, parsed: &str, accepted: &str) {
        println!(
            "fuzz {name}: {} {parsed}, {} {accepted}",
            self.parsed.swap(0, Ordering::Relaxed),
            self.accepted.swap(0, Ordering::Relaxed)
        );
    }
}
