//! How fast a link direction serves its queue: unlimited, a constant bit rate, or a
//! Mahimahi delivery trace.

use crate::time::{Duration, Instant};

/// Bytes one Mahimahi delivery opportunity carries (an MTU-sized packet in its accounting).
pub const TRACE_OPPORTUNITY_BYTES: u64 = 1504;

#[derive(Clone, Debug)]
pub enum Rate {
    /// No serialiser: a packet leaves the queue as soon as it arrives.
    Unlimited,
    /// Bits per second; a frame of B bytes occupies the link for B*8/rate seconds.
    Constant { bps: u64 },
    /// Delivery opportunities from a trace, replayed from the pipeline's origin.
    Trace(Trace),
}

impl Rate {
    /// Transmission time of `bytes` at a constant rate, rounded up to the nanosecond.
    pub fn tx_time(bps: u64, bytes: u64) -> Duration {
        let bits_ns = bytes as u128 * 8 * 1_000_000_000;
        Duration(bits_ns.div_ceil(bps as u128) as u64)
    }
}

/// A Mahimahi trace: one line per 1504-byte delivery opportunity, at a millisecond timestamp;
/// it repeats with a period of its last timestamp.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// Opportunity times in ms, non-decreasing (a repeated time is several opportunities).
    times_ms: Vec<u64>,
}

impl Trace {
    /// Parses trace text; errors name the 1-based line.
    pub fn parse(text: &str) -> Result<Trace, String> {
        let mut times_ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let t: u64 = line
                .parse()
                .map_err(|_| format!("line {}: {:?} is not a whole number of milliseconds", i + 1, line))?;
            if let Some(&prev) = times_ms.last() {
                if t < prev {
                    return Err(format!("line {}: {} ms comes after {} ms; timestamps must not decrease", i + 1, t, prev));
                }
            }
            times_ms.push(t);
        }
        match times_ms.last() {
            None => Err("the trace is empty; it needs one millisecond timestamp per line".into()),
            Some(0) => Err("the last timestamp is 0 ms; the trace needs a positive period".into()),
            Some(_) => Ok(Trace { times_ms }),
        }
    }

    pub fn period(&self) -> Duration {
        Duration::from_millis(*self.times_ms.last().unwrap())
    }

    /// Number of opportunities per period.
    pub fn len(&self) -> usize {
        self.times_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times_ms.is_empty()
    }

    /// Time of opportunity `k` (counted over all periods) for a trace started at `origin`.
    pub fn time_of(&self, origin: Instant, k: u64) -> Instant {
        let n = self.times_ms.len() as u64;
        let (cycle, i) = (k / n, (k % n) as usize);
        origin + Duration(cycle * self.period().nanos() + self.times_ms[i] * 1_000_000)
    }

    /// The first opportunity at or after `t`, for a trace started at `origin`.
    pub fn first_at_or_after(&self, origin: Instant, t: Instant) -> u64 {
        let n = self.times_ms.len() as u64;
        let since = t.saturating_since(origin).nanos();
        let cycle = since / self.period().nanos();
        let offset = since % self.period().nanos();
        // First entry whose time within the cycle is >= offset; none left means next cycle.
        let i = self.times_ms.partition_point(|&ms| ms * 1_000_000 < offset) as u64;
        let mut k = cycle * n + i;
        // The last entry of a cycle falls on the next cycle's origin: step back onto it.
        while k > 0 && self.time_of(origin, k - 1) >= t {
            k -= 1;
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_time_is_exact_to_the_nanosecond() {
        // 1514 bytes at 10 Mbit/s: 12112 bits / 1e7 = 1.2112 ms
        assert_eq!(Rate::tx_time(10_000_000, 1514), Duration(1_211_200));
        // 1 Gbit/s: 8 ns per byte
        assert_eq!(Rate::tx_time(1_000_000_000, 1500), Duration(12_000));
        // rounds up: 1 byte at 3 bit/s = 2.666.. s
        assert_eq!(Rate::tx_time(3, 1), Duration(2_666_666_667));
    }

    #[test]
    fn trace_parses_and_wraps() {
        let t = Trace::parse("1\n1\n3\n\n").unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.period(), Duration::from_millis(3));
        let o = Instant::from_millis(100);
        let times: Vec<u64> = (0..6).map(|k| (t.time_of(o, k).nanos() - o.nanos()) / 1_000_000).collect();
        assert_eq!(times, vec![1, 1, 3, 4, 4, 6]);
        assert_eq!(t.first_at_or_after(o, o), 0);
        assert_eq!(t.first_at_or_after(o, Instant::from_millis(102)), 2);
        assert_eq!(t.first_at_or_after(o, Instant::from_millis(103)), 2);
        assert_eq!(t.first_at_or_after(o, Instant(103_000_001)), 3);
        assert_eq!(t.first_at_or_after(o, Instant::from_millis(105)), 5);
    }

    #[test]
    fn bad_traces_name_the_line() {
        assert!(Trace::parse("").unwrap_err().contains("empty"));
        assert!(Trace::parse("5\n3\n").unwrap_err().starts_with("line 2"));
        assert!(Trace::parse("1\nx\n").unwrap_err().starts_with("line 2"));
        assert!(Trace::parse("-1\n").unwrap_err().starts_with("line 1"));
        assert!(Trace::parse("0\n0\n").unwrap_err().contains("period"));
    }
}
