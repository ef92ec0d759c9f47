//! Fuzzing of bloatlab's datapath with proptest: its targets are the tests in `tests/`, one file
//! each (wire: frames; disciplines: queue disciplines and the pipeline; config: the direction
//! JSON; replay_input: arrival traces and processes; link: the process's config, its plan, its
//! switches and its pcapng captures). This library is their seed corpus: frames as Linux sends
//! them, configs as the Python control plane writes them, traces as docs/replay.md shows them.
//!
//! Each target runs its own number of cases, sized so that `cargo test --workspace` stays quick
//! (a debug build, as CI's): `FUZZ_SCALE=N` multiplies them all, `PROPTEST_CASES=N` sets them
//! all to N. A long campaign runs a release build with overflow checks kept on:
//!
//! ```text
//! CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true CARGO_TARGET_DIR=target/fuzz \
//!     FUZZ_SCALE=100 cargo test --release -p bloatlab-fuzz -- --nocapture
//! ```
//!
//! A failure is shrunk and its seed kept in `proptest-regressions/TARGET.txt`, beside this
//! crate's Cargo.toml, which every later run replays first: commit those files. A case that runs
//! for five minutes is a hang: the target says so and exits (FUZZ_SHOW_HANG=1 prints the case).

pub mod corpus;
