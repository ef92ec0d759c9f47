//! What a replay writes: every packet's fate as a CSV line, and the tally behind summary.json.

use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use bloatlab_core::{DropReason, MarkReason};
use serde_json::{json, Map, Value};

use crate::replay::{Fate, FateSink, Outcome};

pub const CSV_HEADER: &str = "id,t_arrival_ns,size_bytes,flow,fate,t_ns,reason,sojourn_ns\n";

/// "00" "01" .. "99": integers are formatted two digits at a time.
const DIGIT_PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Writes `v` in decimal at `buf[*pos..]` and moves `pos` past it; `buf` must have 20 bytes
/// there. fmt's machinery, or even a memcpy call per field, costs more than the rest of a line.
#[inline]
pub fn put_u64(buf: &mut [u8], pos: &mut usize, mut v: u64) {
    let digits = if v == 0 { 1 } else { v.ilog10() as usize + 1 };
    let out = &mut buf[*pos..*pos + digits];
    let mut i = digits;
    while v >= 100 {
        let r = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        out[i] = DIGIT_PAIRS[r];
        out[i + 1] = DIGIT_PAIRS[r + 1];
    }
    if v >= 10 {
        out[0] = DIGIT_PAIRS[v as usize * 2];
        out[1] = DIGIT_PAIRS[v as usize * 2 + 1];
    } else {
        out[0] = b'0' + v as u8;
    }
    *pos += digits;
}

#[inline]
fn put_bytes(buf: &mut [u8], pos: &mut usize, s: &[u8]) {
    buf[*pos..*pos + s.len()].copy_from_slice(s);
    *pos += s.len();
}

/// The longest line: six 20-digit numbers, the longest fate and reason, commas, newline.
const MAX_LINE: usize = 6 * 20 + 8 + 16 + 8;

const FLUSH_AT: usize = 1 << 20;

/// fates.csv, written through one large buffer; the first write error is kept for `finish`.
pub struct FatesCsv<W: Write> {
    out: W,
    /// Always FLUSH_AT + MAX_LINE long; `pos` bytes of it are written.
    buf: Vec<u8>,
    pos: usize,
    error: Option<io::Error>,
}

impl<W: Write> FatesCsv<W> {
    pub fn new(out: W) -> Self {
        let mut csv = FatesCsv { out, buf: vec![0; FLUSH_AT + MAX_LINE], pos: 0, error: None };
        put_bytes(&mut csv.buf, &mut csv.pos, CSV_HEADER.as_bytes());
        csv
    }
    fn flush_buf(&mut self) {
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(&self.buf[..self.pos]) {
                self.error = Some(e);
            }
        }
        self.pos = 0;
    }
    /// Writes what is buffered; the first error of the whole run, if any.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_buf();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> FateSink for FatesCsv<W> {
    fn fate(&mut self, f: &Fate) {
        let (b, pos) = (&mut self.buf[..], &mut self.pos);
        put_u64(b, pos, f.id);
        put_bytes(b, pos, b",");
        put_u64(b, pos, f.t_arrival_ns);
        put_bytes(b, pos, b",");
        put_u64(b, pos, f.size_bytes as u64);
        put_bytes(b, pos, b",");
        put_u64(b, pos, f.flow as u64);
        match f.outcome {
            Outcome::Departed(mark) => {
                put_bytes(b, pos, b",departed,");
                put_u64(b, pos, f.t_ns);
                put_bytes(b, pos, b",");
                if let Some(m) = mark {
                    put_bytes(b, pos, m.name().as_bytes());
                }
            }
            Outcome::Dropped(reason) => {
                put_bytes(b, pos, b",dropped,");
                put_u64(b, pos, f.t_ns);
                put_bytes(b, pos, b",");
                put_bytes(b, pos, reason.name().as_bytes());
            }
        }
        put_bytes(b, pos, b",");
        put_u64(b, pos, f.sojourn_ns);
        put_bytes(b, pos, b"\n");
        if self.pos >= FLUSH_AT {
            self.flush_buf();
        }
    }
}

/// Fates in a batch handed to the writer thread.
const BATCH: usize = 1 << 14;

/// A sink that formats and writes on a thread of its own, so the replay's thread only runs the
/// pipeline: formatting and the write calls cost as much again as the pipeline's work.
/// Batches go over a bounded channel and come back empty to be reused.
pub struct WriterThread {
    batch: Vec<Fate>,
    to_writer: Option<SyncSender<Vec<Fate>>>,
    empties: Receiver<Vec<Fate>>,
    writer: Option<JoinHandle<io::Result<()>>>,
}

impl WriterThread {
    pub fn new<S: FateSink + Send + 'static>(mut sink: S, finish: impl FnOnce(S) -> io::Result<()> + Send + 'static) -> Self {
        let (to_writer, batches) = sync_channel::<Vec<Fate>>(4);
        let (give_back, empties) = sync_channel::<Vec<Fate>>(8);
        let writer = std::thread::spawn(move || {
            for mut batch in batches {
                for f in &batch {
                    sink.fate(f);
                }
                batch.clear();
                let _ = give_back.try_send(batch);
            }
            finish(sink)
        });
        WriterThread { batch: Vec::with_capacity(BATCH), to_writer: Some(to_writer), empties, writer: Some(writer) }
    }

    fn send(&mut self) {
        let fresh = self.empties.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, fresh);
        if let Some(tx) = &self.to_writer {
            if tx.send(full).is_err() {
                self.to_writer = None; // the writer failed; `finish` reports why
            }
        }
    }

    /// Hands over the last batch and waits for the writer; its error, if any.
    pub fn finish(mut self) -> io::Result<()> {
        self.send();
        self.to_writer = None;
        match self.writer.take().expect("finish runs once").join() {
            Ok(result) => result,
            Err(_) => Err(io::Error::other("the fates writer thread panicked")),
        }
    }
}

impl FateSink for WriterThread {
    #[inline]
    fn fate(&mut self, f: &Fate) {
        self.batch.push(*f);
        if self.batch.len() >= BATCH {
            self.send();
        }
    }
}

/// Counts and sojourns for the summary, passing each fate on to `inner`.
pub struct Tally<S> {
    pub inner: S,
    pub packets: u64,
    pub bytes: u64,
    pub departed: u64,
    pub departed_bytes: u64,
    pub drops: [u64; DropReason::COUNT],
    pub marks: [u64; MarkReason::COUNT],
    /// Queue sojourns of the departed packets, for exact percentiles.
    pub sojourns_ns: Vec<u64>,
    pub first_arrival_ns: Option<u64>,
    pub last_fate_ns: u64,
}

impl<S> Tally<S> {
    pub fn new(inner: S) -> Self {
        Tally {
            inner,
            packets: 0,
            bytes: 0,
            departed: 0,
            departed_bytes: 0,
            drops: [0; DropReason::COUNT],
            marks: [0; MarkReason::COUNT],
            sojourns_ns: Vec::new(),
            first_arrival_ns: None,
            last_fate_ns: 0,
        }
    }

    /// summary.json's counts, sojourn percentiles and throughput (the caller adds the rest).
    pub fn summary(&mut self) -> Map<String, Value> {
        let first = self.first_arrival_ns.unwrap_or(0);
        let duration_ns = self.last_fate_ns.saturating_sub(first);
        let mut m = Map::new();
        m.insert("packets".into(), json!(self.packets));
        m.insert("bytes".into(), json!(self.bytes));
        m.insert("departed".into(), json!(self.departed));
        m.insert("departed_bytes".into(), json!(self.departed_bytes));
        let dropped: Map<String, Value> = DropReason::ALL.iter().map(|r| (r.name().to_string(), json!(self.drops[r.index()]))).collect();
        m.insert("dropped_total".into(), json!(self.drops.iter().sum::<u64>()));
        m.insert("dropped".into(), Value::Object(dropped));
        let marked: Map<String, Value> = MarkReason::ALL.iter().map(|r| (r.name().to_string(), json!(self.marks[r.index()]))).collect();
        m.insert("marked_total".into(), json!(self.marks.iter().sum::<u64>()));
        m.insert("marked".into(), Value::Object(marked));
        m.insert("sojourn_ns".into(), percentiles(&mut self.sojourns_ns));
        m.insert("first_arrival_ns".into(), json!(first));
        m.insert("virtual_duration_ns".into(), json!(duration_ns));
        let bps = if duration_ns > 0 { (self.departed_bytes as u128 * 8 * 1_000_000_000 / duration_ns as u128) as u64 } else { 0 };
        m.insert("throughput_bps".into(), json!(bps));
        m
    }
}

/// Nearest-rank percentiles (the smallest value with at least p% of values at or below it).
fn percentiles(v: &mut [u64]) -> Value {
    if v.is_empty() {
        return json!({"p50": null, "p95": null, "p99": null, "max": null});
    }
    let n = v.len();
    let mut at = |p: u64| {
        let rank = ((p as usize * n).div_ceil(100)).max(1) - 1;
        *v.select_nth_unstable(rank).1
    };
    let (p50, p95, p99, max) = (at(50), at(95), at(99), at(100));
    json!({"p50": p50, "p95": p95, "p99": p99, "max": max})
}

impl<S: FateSink> FateSink for Tally<S> {
    fn fate(&mut self, f: &Fate) {
        self.packets += 1;
        self.bytes += f.size_bytes as u64;
        if self.first_arrival_ns.map_or(true, |t| f.t_arrival_ns < t) {
            self.first_arrival_ns = Some(f.t_arrival_ns);
        }
        self.last_fate_ns = self.last_fate_ns.max(f.t_ns);
        match f.outcome {
            Outcome::Departed(mark) => {
                self.departed += 1;
                self.departed_bytes += f.size_bytes as u64;
                self.sojourns_ns.push(f.sojourn_ns);
                if let Some(m) = mark {
                    self.marks[m.index()] += 1;
                }
            }
            Outcome::Dropped(r) => self.drops[r.index()] += 1,
        }
        self.inner.fate(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_lines() {
        for v in [0, 7, 9, 10, 99, 100, 999, 1000, 12345, 1_000_000_007, u64::MAX] {
            let (mut b, mut pos) = ([b'x'; 24], 1);
            put_u64(&mut b, &mut pos, v);
            assert_eq!(String::from_utf8(b[1..pos].to_vec()).unwrap(), v.to_string());
            assert_eq!(b[pos], b'x', "nothing written past the number");
        }
        let mut csv = FatesCsv::new(Vec::new());
        let f = Fate { id: 3, t_arrival_ns: 10, size_bytes: 1500, flow: 2, outcome: Outcome::Departed(Some(MarkReason::Codel)), t_ns: 1_000_010, sojourn_ns: 5 };
        csv.fate(&f);
        csv.fate(&Fate { outcome: Outcome::Dropped(DropReason::QueueFull), t_ns: 10, sojourn_ns: 0, ..f });
        csv.fate(&Fate { outcome: Outcome::Departed(None), ..f });
        let text = String::from_utf8(csv.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            format!("{CSV_HEADER}3,10,1500,2,departed,1000010,codel,5\n3,10,1500,2,dropped,10,queue_full,0\n3,10,1500,2,departed,1000010,,5\n")
        );
    }

    #[test]
    fn the_writer_thread_writes_every_fate_in_order() {
        use std::sync::{Arc, Mutex};
        let got = Arc::new(Mutex::new(Vec::new()));
        let shared = got.clone();
        let mut w = WriterThread::new(Vec::new(), move |v: Vec<Fate>| {
            *shared.lock().unwrap() = v;
            Ok(())
        });
        let n = 3 * BATCH as u64 + 5;
        let f = Fate { id: 0, t_arrival_ns: 0, size_bytes: 64, flow: 0, outcome: Outcome::Departed(None), t_ns: 0, sojourn_ns: 0 };
        for id in 0..n {
            w.fate(&Fate { id, ..f });
        }
        w.finish().unwrap();
        let ids: Vec<u64> = got.lock().unwrap().iter().map(|f| f.id).collect();
        assert_eq!(ids, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=200).rev().collect();
        assert_eq!(percentiles(&mut v), json!({"p50": 100, "p95": 190, "p99": 198, "max": 200}));
        assert_eq!(percentiles(&mut [7]), json!({"p50": 7, "p95": 7, "p99": 7, "max": 7}));
    }
}
