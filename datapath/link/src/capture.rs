//! A link direction's captures: every departing frame to one pcapng file, every dropped frame
//! (its reason as the packet's comment) to another.
//!
//! The direction's thread only encodes blocks into a chunk in memory; a writer thread owns the
//! files. Chunks cross a bounded channel: when the disk falls that far behind, a chunk is
//! counted lost rather than waited for, so a capture never slows the link. Each file stops
//! whole at its size limit, and what did not fit is counted as cut.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bloatlab_config::CaptureJson;

use crate::pcapng::{self, PacketMeta};

/// A chunk goes to the writer once it holds this much (or at `tick`).
const CHUNK_BYTES: usize = 256 << 10;
/// Chunks in flight to the writer: 16 MiB, half a second of full frames at 250 Mbit/s.
const CHUNKS_IN_FLIGHT: usize = 64;

/// One file's counts: packets written, cut by the size limit, lost to a writer behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileCounts {
    pub written: u64,
    pub cut: u64,
    pub lost: u64,
    /// The file's size once the writer has caught up.
    pub bytes: u64,
}

/// Both files' counts, and the writer's error if it met one.
#[derive(Clone, Debug, Default)]
pub struct CaptureCounts {
    pub departures: FileCounts,
    pub drops: FileCounts,
    pub error: Option<String>,
}

struct Chunk {
    file: usize,
    bytes: Vec<u8>,
}

/// One file as the direction's thread sees it: the chunk being filled and the books.
struct Sink {
    file: usize,
    buf: Vec<u8>,
    /// Packets in `buf`.
    pending: u64,
    snaplen: u32,
    limit: u64,
    counts: FileCounts,
}

impl Sink {
    fn add(&mut self, frame: &[u8], meta: &PacketMeta, tx: &Option<SyncSender<Chunk>>) {
        let kept = frame.len().min(self.snaplen as usize);
        let len = pcapng::packet_block_len(kept, meta) as u64;
        // Once one packet is cut, all later ones are too: the file holds a whole beginning.
        if self.counts.cut > 0 || self.counts.bytes + len > self.limit {
            self.counts.cut += 1;
            return;
        }
        pcapng::packet(&mut self.buf, frame, self.snaplen, meta);
        self.counts.bytes += len;
        self.pending += 1;
        if self.buf.len() >= CHUNK_BYTES {
            self.flush(tx, false);
        }
    }

    fn flush(&mut self, tx: &Option<SyncSender<Chunk>>, wait: bool) {
        if self.pending == 0 {
            return;
        }
        let chunk = Chunk { file: self.file, bytes: std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES + 2048)) };
        let sent = match tx {
            Some(tx) if wait => tx.send(chunk).map_err(|e| e.0),
            Some(tx) => tx.try_send(chunk).map_err(|e| match e {
                TrySendError::Full(c) | TrySendError::Disconnected(c) => c,
            }),
            None => Err(chunk),
        };
        match sent {
            Ok(()) => self.counts.written += self.pending,
            Err(chunk) => {
                self.counts.lost += self.pending;
                self.counts.bytes -= chunk.bytes.len() as u64;
            }
        }
        self.pending = 0;
    }
}

pub struct Capture {
    departures: Sink,
    drops: Sink,
    tx: Option<SyncSender<Chunk>>,
    writer: Option<JoinHandle<()>>,
    error: Arc<Mutex<Option<String>>>,
}

fn create(path: &Path, header: &[u8]) -> Result<File, String> {
    let mut f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(header).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(f)
}

impl Capture {
    /// Creates both files with their headers and starts the writer; `link` says which link
    /// and direction, for the files' interface description.
    pub fn open(cfg: &CaptureJson, link: &str) -> Result<Capture, String> {
        cfg.validate()?;
        let app = format!("bloatlab-link {}", bloatlab_core::VERSION);
        let mut sinks = Vec::new();
        let mut files = Vec::new();
        for (file, (path, what)) in [(&cfg.departures_path, "departures"), (&cfg.drops_path, "drops")].into_iter().enumerate() {
            let mut header = Vec::new();
            pcapng::header(&mut header, &app, &cfg.name, &format!("bloatlab link {link}: {what}"), cfg.snaplen);
            files.push(create(path, &header).map_err(|e| format!("capture.{what}_path: {e}"))?);
            let counts = FileCounts { bytes: header.len() as u64, ..Default::default() };
            sinks.push(Sink { file, buf: Vec::with_capacity(CHUNK_BYTES + 2048), pending: 0, snaplen: cfg.snaplen, limit: cfg.limit_bytes, counts });
        }
        let (tx, rx) = sync_channel(CHUNKS_IN_FLIGHT);
        let error = Arc::new(Mutex::new(None));
        let writer = {
            let error = error.clone();
            std::thread::Builder::new()
                .name(format!("capture {link}"))
                .spawn(move || write_chunks(rx, files, &error))
                .map_err(|e| format!("capture: cannot start its writer: {e}"))?
        };
        let drops = sinks.pop().unwrap();
        let departures = sinks.pop().unwrap();
        Ok(Capture { departures, drops, tx: Some(tx), writer: Some(writer), error })
    }

    /// A frame that left at `t_ns` (since the Unix epoch).
    pub fn departure(&mut self, frame: &[u8], wire_len: u32, id: u64, t_ns: u64) {
        let meta = PacketMeta { t_ns, wire_len, flags: Some(pcapng::FLAG_OUTBOUND), packet_id: Some(id), comment: None };
        self.departures.add(frame, &meta, &self.tx);
    }

    /// A frame dropped at `t_ns`, for `reason` (a drop reason's name).
    pub fn dropped(&mut self, frame: &[u8], wire_len: u32, id: u64, t_ns: u64, reason: &str) {
        let comment = format!("drop reason: {reason}");
        let meta = PacketMeta { t_ns, wire_len, flags: None, packet_id: Some(id), comment: Some(&comment) };
        self.drops.add(frame, &meta, &self.tx);
    }

    /// Hands what is buffered to the writer, so the files grow while the link runs.
    pub fn tick(&mut self) {
        self.departures.flush(&self.tx, false);
        self.drops.flush(&self.tx, false);
    }

    pub fn counts(&self) -> CaptureCounts {
        CaptureCounts { departures: self.departures.counts, drops: self.drops.counts, error: self.error.lock().unwrap().clone() }
    }

    /// Writes the rest (waiting for the writer now: the link has stopped) and closes the files.
    pub fn finish(&mut self) -> CaptureCounts {
        self.departures.flush(&self.tx, true);
        self.drops.flush(&self.tx, true);
        self.tx = None; // the writer's channel ends
        if let Some(w) = self.writer.take() {
            if w.join().is_err() {
                self.error.lock().unwrap().get_or_insert_with(|| "capture: the writer panicked".into());
            }
        }
        self.counts()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.finish();
    }
}

fn write_chunks(rx: Receiver<Chunk>, mut files: Vec<File>, error: &Mutex<Option<String>>) {
    for chunk in rx {
        if let Err(e) = files[chunk.file].write_all(&chunk.bytes) {
            *error.lock().unwrap() = Some(format!("capture: {e}"));
            return; // the channel closes; later chunks count as lost
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn cfg(dir: &Path, limit: u64) -> CaptureJson {
        CaptureJson { name: "a->b".into(), departures_path: dir.join("d.pcapng"), drops_path: dir.join("x.pcapng"), snaplen: 64, limit_bytes: limit }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bloatlab-capture-test-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn files_hold_what_the_counts_say() {
        let dir = tmpdir("counts");
        let mut c = Capture::open(&cfg(&dir, 1 << 30), "a-b.forward").unwrap();
        let frame = vec![0x55u8; 1514];
        for i in 0..5000u64 {
            c.departure(&frame, 1514, i, 1_000 + i);
            if i % 10 == 0 {
                c.dropped(&frame[..100], 100, i, 1_000 + i, "codel");
            }
        }
        let n = c.finish();
        assert_eq!((n.departures.written, n.departures.cut, n.departures.lost), (5000, 0, 0));
        assert_eq!(n.drops.written, 500);
        assert_eq!(std::fs::metadata(dir.join("d.pcapng")).unwrap().len(), n.departures.bytes);
        assert_eq!(std::fs::metadata(dir.join("x.pcapng")).unwrap().len(), n.drops.bytes);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_limit_keeps_a_whole_beginning() {
        let dir = tmpdir("limit");
        let mut c = Capture::open(&cfg(&dir, 10_000), "a-b.forward").unwrap();
        for i in 0..1000u64 {
            c.departure(&[0u8; 1514], 1514, i, i);
        }
        let n = c.finish().departures;
        assert!(n.written > 50 && n.written + n.cut == 1000, "{n:?}");
        let size = std::fs::metadata(dir.join("d.pcapng")).unwrap().len();
        assert!(size <= 10_000 && size == n.bytes);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_settings_name_their_field() {
        let dir = tmpdir("bad");
        let mut c = cfg(&dir, 100);
        assert!(Capture::open(&c, "x").err().unwrap().starts_with("capture.limit_bytes"));
        c.limit_bytes = 1 << 20;
        c.snaplen = 4;
        assert!(Capture::open(&c, "x").err().unwrap().starts_with("capture.snaplen"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
