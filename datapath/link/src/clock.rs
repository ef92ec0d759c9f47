//! The shell's clock: CLOCK_MONOTONIC, as the core's Instant.

use bloatlab_core::Instant;

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn monotonic_now() -> Instant {
    Instant(read(libc::CLOCK_MONOTONIC))
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, to put queue logs on the wall clock.
pub fn realtime_offset_ns() -> i64 {
    read(libc::CLOCK_REALTIME) as i64 - read(libc::CLOCK_MONOTONIC) as i64
}
