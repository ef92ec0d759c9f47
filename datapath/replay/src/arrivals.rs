//! Where a replay's packets come from: an arrival trace (CSV) or a synthetic arrival process
//! (constant, Poisson, on-off), all in integer nanoseconds of virtual time.

use bloatlab_core::rng::Rng;
use bloatlab_core::wire::{Ecn, SYNTHETIC_HEADER_BYTES};

/// The largest packet a replay takes: an IPv4 total length's limit.
pub const MAX_SIZE_BYTES: u32 = 65535;
/// The smallest: the Ethernet, IPv4 and UDP headers the replay gives each packet.
pub const MIN_SIZE_BYTES: u32 = SYNTHETIC_HEADER_BYTES as u32;
/// The latest arrival a replay takes: 2^62 ns, 146 years of virtual time (a trace stamped with
/// CLOCK_REALTIME fits), and as many again before the link's own sums of times (delays,
/// transmission times, timers) could pass 2^64.
pub const MAX_T_NS: u64 = 1 << 62;

/// One packet offered to the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub t_ns: u64,
    /// Length on the wire, Ethernet header included.
    pub size_bytes: u32,
    pub flow: u32,
    pub ecn: Ecn,
}

pub fn ecn_from_code(code: u64) -> Option<Ecn> {
    Some(match code {
        0 => Ecn::NotEct,
        1 => Ecn::Ect1,
        2 => Ecn::Ect0,
        3 => Ecn::Ce,
        _ => return None,
    })
}

const COLUMNS: [&str; 4] = ["t_ns", "size_bytes", "flow", "ecn"];

fn parse_uint(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((b - b'0') as u64)?;
    }
    Some(v)
}

/// Parses an arrival trace: a header naming the columns t_ns, size_bytes, flow and ecn (in any
/// order), then one packet per line. Errors name the 1-based line and the column, on one line.
pub fn parse_csv(text: &[u8]) -> Result<Vec<Arrival>, String> {
    let mut lines = text.split(|&b| b == b'\n').enumerate();
    let header = loop {
        match lines.next() {
            None => return Err("line 1: the file is empty; it needs the header t_ns,size_bytes,flow,ecn".into()),
            Some((_, l)) if trim(l).is_empty() => continue,
            Some((i, l)) => break (i, l),
        }
    };
    let names: Vec<String> = trim(header.1).split(|&b| b == b',').map(|f| String::from_utf8_lossy(trim(f)).into_owned()).collect();
    let line_no = header.0 + 1;
    // Column index of each of COLUMNS.
    let mut at = [usize::MAX; 4];
    for (i, name) in names.iter().enumerate() {
        match COLUMNS.iter().position(|c| c == name) {
            Some(k) if at[k] != usize::MAX => return Err(format!("line {line_no}, column {name}: named twice")),
            Some(k) => at[k] = i,
            None => return Err(format!("line {line_no}, column {name:?}: unknown column; the columns are t_ns,size_bytes,flow,ecn")),
        }
    }
    if let Some(k) = at.iter().position(|&i| i == usize::MAX) {
        return Err(format!("line {line_no}, column {}: missing column; the header must name t_ns,size_bytes,flow,ecn", COLUMNS[k]));
    }
    let n_cols = names.len();
    let mut out = Vec::with_capacity(text.len() / 24);
    let mut last_t = 0u64;
    let mut fields: Vec<&[u8]> = Vec::with_capacity(n_cols);
    for (i, line) in lines {
        let line = trim(line);
        if line.is_empty() {
            continue;
        }
        let line_no = i + 1;
        fields.clear();
        fields.extend(line.split(|&b| b == b','));
        if fields.len() != n_cols {
            return Err(format!("line {line_no}: {} fields, the header names {n_cols}", fields.len()));
        }
        let get = |k: usize| -> Result<u64, String> {
            let f = trim(fields[at[k]]);
            parse_uint(f).ok_or_else(|| format!("line {line_no}, column {}: {:?} is not a whole number >= 0", COLUMNS[k], String::from_utf8_lossy(f)))
        };
        let t_ns = get(0)?;
        if t_ns > MAX_T_NS {
            return Err(format!("line {line_no}, column t_ns: {t_ns} is above {MAX_T_NS} (2^62 ns, 146 years)"));
        }
        if t_ns < last_t {
            return Err(format!("line {line_no}, column t_ns: {t_ns} comes before the previous line's {last_t}; times must not decrease"));
        }
        last_t = t_ns;
        let size = get(1)?;
        if !(MIN_SIZE_BYTES as u64..=MAX_SIZE_BYTES as u64).contains(&size) {
            return Err(format!("line {line_no}, column size_bytes: {size} is not from {MIN_SIZE_BYTES} to {MAX_SIZE_BYTES} bytes"));
        }
        let flow = get(2)?;
        if flow > u32::MAX as u64 {
            return Err(format!("line {line_no}, column flow: {flow} is above {}", u32::MAX));
        }
        let ecn_code = get(3)?;
        let ecn = ecn_from_code(ecn_code)
            .ok_or_else(|| format!("line {line_no}, column ecn: {ecn_code} is not an ECN codepoint (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE)"))?;
        out.push(Arrival { t_ns, size_bytes: size as u32, flow: flow as u32, ecn });
    }
    if out.is_empty() {
        return Err(format!("line {line_no}: the header is all there is; the trace needs one arrival per line after it"));
    }
    Ok(out)
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end]
}

/// How packets are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    /// Evenly, one every mean gap.
    Constant,
    /// Exponential gaps with the mean gap (memoryless arrivals).
    Poisson,
    /// Constant spacing for `on_ns`, then silence for `off_ns`, repeating.
    OnOff { on_ns: u64, off_ns: u64 },
}

/// Which flow each packet belongs to, among `flows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowIds {
    RoundRobin,
    Random,
}

/// A synthetic arrival process. The mean gap is the exact fraction `gap_num / gap_den` ns
/// (e.g. size * 8e9 / bps), so constant arrivals never drift by rounding.
#[derive(Clone, Debug)]
pub struct Synthetic {
    pub process: Process,
    pub gap_num: u128,
    pub gap_den: u128,
    pub size_bytes: u32,
    pub flows: u32,
    pub flow_ids: FlowIds,
    pub ecn: Ecn,
    /// Stop after this many packets, or at this virtual time, whichever comes first.
    pub packets: Option<u64>,
    pub duration_ns: Option<u64>,
    pub seed: u64,
}

/// Separates the arrival process's random stream from the link's (which also uses the seed).
const ARRIVAL_STREAM: u64 = 0xA77C_1E55_0F1A_2B3C;

impl Synthetic {
    pub fn iter(&self) -> SyntheticIter {
        let mean_gap_ns = self.gap_num as f64 / self.gap_den as f64;
        SyntheticIter { s: self.clone(), k: 0, t_poisson: 0.0, mean_gap_ns, rng: Rng::new(self.seed ^ ARRIVAL_STREAM) }
    }
}

pub struct SyntheticIter {
    s: Synthetic,
    k: u64,
    t_poisson: f64,
    mean_gap_ns: f64,
    rng: Rng,
}

impl Iterator for SyntheticIter {
    type Item = Arrival;
    fn next(&mut self) -> Option<Arrival> {
        let s = &self.s;
        if s.packets.is_some_and(|n| self.k >= n) {
            return None;
        }
        let k = self.k as u128;
        // In 128 bits: the times of a long process at a low rate pass 2^64 ns.
        let t_ns: u128 = match s.process {
            // The k-th packet at floor(k * gap): exact, whatever the number of packets.
            Process::Constant => k * s.gap_num / s.gap_den,
            Process::Poisson => {
                let t = self.t_poisson as u128;
                // Inverse transform: -ln(U) is Exp(1) for U uniform in (0, 1].
                let u = 1.0 - self.rng.next_f64();
                self.t_poisson += -u.ln() * self.mean_gap_ns;
                t
            }
            Process::OnOff { on_ns, off_ns } => {
                // Constant spacing on a clock that only runs while on, mapped onto real time.
                let on_clock = k * s.gap_num / s.gap_den;
                let (on, off) = (on_ns as u128, off_ns as u128);
                (on_clock / on) * (on + off) + on_clock % on
            }
        };
        // The process ends where the replay's time does, if it has not ended before.
        if t_ns > MAX_T_NS as u128 || s.duration_ns.is_some_and(|d| t_ns >= d as u128) {
            return None;
        }
        let t_ns = t_ns as u64;
        let flow = match s.flow_ids {
            FlowIds::RoundRobin => (self.k % s.flows as u64) as u32,
            FlowIds::Random => self.rng.below_incl(s.flows as u64 - 1) as u32,
        };
        self.k += 1;
        Some(Arrival { t_ns, size_bytes: s.size_bytes, flow, ecn: s.ecn })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_columns_in_any_order_and_errors_name_line_and_column() {
        let a = parse_csv(b"flow,ecn,t_ns,size_bytes\n3,2,100,1500\n\n4,0,100,64\n").unwrap();
        assert_eq!(a[0], Arrival { t_ns: 100, size_bytes: 1500, flow: 3, ecn: Ecn::Ect0 });
        assert_eq!(a[1].flow, 4);
        let err = |t: &str| parse_csv(t.as_bytes()).unwrap_err();
        assert!(err("t_ns,size_bytes,flow,ecn\n200,100,1,0\n100,100,1,0\n").starts_with("line 3, column t_ns:"));
        assert!(err("t_ns,size_bytes,flow\n").starts_with("line 1, column ecn: missing column"));
        assert!(err("t_ns,size_bytes,flow,ecn\n1,41,1,0\n").starts_with("line 2, column size_bytes:"));
        assert!(err("t_ns,size_bytes,flow,ecn\n1,65536,1,0\n").starts_with("line 2, column size_bytes:"));
        assert!(err("t_ns,size_bytes,flow,ecn\n1,100,1,4\n").starts_with("line 2, column ecn:"));
        assert!(err("t_ns,size_bytes,flow,ecn\n-1,100,1,0\n").starts_with("line 2, column t_ns:"));
        assert!(err("t_ns,size_bytes,flow,ecn\n1,100,1\n").starts_with("line 2: 3 fields"));
        assert!(err("t_ns,size_bytes,flow,ecn\n\n").starts_with("line 1: the header is all there is"));
        assert!(err("").starts_with("line 1: the file is empty"));
    }

    fn synth(process: Process, gap_num: u128, gap_den: u128) -> Synthetic {
        Synthetic {
            process,
            gap_num,
            gap_den,
            size_bytes: 1500,
            flows: 3,
            flow_ids: FlowIds::RoundRobin,
            ecn: Ecn::NotEct,
            packets: Some(1000),
            duration_ns: None,
            seed: 1,
        }
    }

    #[test]
    fn constant_is_exact_and_round_robin() {
        // 1500 bytes at 7 Mbit/s: a gap of 12e12/7e6 ns = 1714.28... us, never drifting.
        let a: Vec<_> = synth(Process::Constant, 1500 * 8 * 1_000_000_000, 7_000_000).iter().collect();
        assert_eq!(a.len(), 1000);
        assert_eq!(a[7].t_ns, 12_000_000, "7 gaps of 12/7 ms");
        assert_eq!(a[999].t_ns, (999u128 * 12_000_000_000_000 / 7_000_000) as u64);
        assert_eq!((a[0].flow, a[1].flow, a[2].flow, a[3].flow), (0, 1, 2, 0));
    }

    /// Found by the fuzz target `replay_input`: a time near 2^64 ns was accepted, and the link
    /// then overflowed adding its delay or a transmission time to it (a panic in a debug build,
    /// times that wrap in a release one).
    #[test]
    fn a_time_past_the_replays_is_refused() {
        assert!(parse_csv(b"t_ns,size_bytes,flow,ecn\n4611686018427387904,100,1,0\n").is_ok(), "2^62 ns, the latest");
        let e = parse_csv(b"t_ns,size_bytes,flow,ecn\n4611686018427387905,100,1,0\n").unwrap_err();
        assert_eq!(e, "line 2, column t_ns: 4611686018427387905 is above 4611686018427387904 (2^62 ns, 146 years)");
        assert!(parse_csv(b"t_ns,size_bytes,flow,ecn\n18446744073709551615,100,1,0\n").unwrap_err().starts_with("line 2, column t_ns:"));
    }

    /// Found by the fuzz target `replay_input`: on-off arrivals mapped the on clock onto real
    /// time in 64 bits, and constant arrivals cut their 128-bit time to 64: a long off period
    /// or a low rate overflowed (a panic in a debug build) or wrapped round to times that went
    /// back. Times are exact in 128 bits now, and a process ends where the replay's time does.
    #[test]
    fn times_past_2_to_the_64_end_the_process_rather_than_wrap() {
        let mut s = synth(Process::OnOff { on_ns: 1, off_ns: 183_615 }, 336_000_000_000, 1);
        s.packets = Some(300);
        let a: Vec<_> = s.iter().collect();
        // Each packet fills a whole on period of 1 ns and the off period after it.
        assert_eq!(a[1].t_ns, 336_000_000_000 * 183_616);
        assert!(a.windows(2).all(|w| w[0].t_ns < w[1].t_ns) && a.last().unwrap().t_ns <= MAX_T_NS);
        assert_eq!(a.len() as u64, MAX_T_NS / (336_000_000_000 * 183_616) + 1);
        // 65535 bytes at 1 bit/s: 5.2 * 10^14 ns apart.
        let mut s = synth(Process::Constant, 65_535 * 8 * 1_000_000_000, 1);
        s.packets = Some(100_000);
        let a: Vec<_> = s.iter().collect();
        assert!(a.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
        assert_eq!(a.len() as u64, MAX_T_NS / (65_535 * 8 * 1_000_000_000) + 1);
    }

    #[test]
    fn poisson_mean_gap_and_on_off_silence() {
        let mut s = synth(Process::Poisson, 1_000_000, 1);
        s.packets = Some(100_000);
        let a: Vec<_> = s.iter().collect();
        let mean = a.last().unwrap().t_ns as f64 / (a.len() - 1) as f64;
        assert!((mean - 1e6).abs() < 1e4, "mean gap {mean}");
        let b: Vec<_> = synth(Process::OnOff { on_ns: 10_000, off_ns: 90_000 }, 1_000, 1).iter().take(25).collect();
        assert_eq!(b[9].t_ns, 9_000);
        assert_eq!(b[10].t_ns, 100_000, "the 11th packet waits out the off period");
        assert_eq!(b[21].t_ns, 201_000);
        let mut d = synth(Process::Constant, 1_000, 1);
        d.duration_ns = Some(5_000);
        assert_eq!(d.iter().count(), 5, "arrivals at 0..4 us, none at the duration itself");
    }
}
