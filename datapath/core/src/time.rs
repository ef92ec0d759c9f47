//! Integer-nanosecond time, so scripted tests are exact to the nanosecond.

use std::ops::{Add, AddAssign, Div, Sub};

/// A point in time: nanoseconds since an origin the caller chooses (the shell uses
/// CLOCK_MONOTONIC, a replay starts at zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);
    pub fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }
    pub fn from_micros(us: u64) -> Self {
        Instant(us * 1_000)
    }
    pub fn from_millis(ms: u64) -> Self {
        Instant(ms * 1_000_000)
    }
    pub fn nanos(self) -> u64 {
        self.0
    }
    /// Time since `earlier`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    pub const ZERO: Duration = Duration(0);
    pub fn from_nanos(ns: u64) -> Self {
        Duration(ns)
    }
    pub fn from_micros(us: u64) -> Self {
        Duration(us * 1_000)
    }
    pub fn from_millis(ms: u64) -> Self {
        Duration(ms * 1_000_000)
    }
    pub fn nanos(self) -> u64 {
        self.0
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0 + d.0)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        self.0 += d.0;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Panics in debug builds if `rhs` is later: time must not run backwards.
    fn sub(self, rhs: Instant) -> Duration {
        Duration(self.0 - rhs.0)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0 + d.0)
    }
}

impl Div<u64> for Duration {
    type Output = Duration;
    fn div(self, n: u64) -> Duration {
        Duration(self.0 / n)
    }
}
