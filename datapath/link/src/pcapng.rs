//! pcapng blocks, as Wireshark, tshark and tcpdump read them (the IETF draft
//! draft-ietf-opsawg-pcapng): one section header, one Ethernet interface with nanosecond
//! timestamps, then an Enhanced Packet Block per frame. Little-endian, every block and
//! option padded to 32 bits. Pure encoding into a byte buffer: no I/O here.

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 0x0000_0001;
const EPB: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const LINKTYPE_ETHERNET: u16 = 1;

const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;
const EPB_FLAGS: u16 = 2;
const EPB_PACKETID: u16 = 5;
/// epb_flags bits 0-1: the packet's direction; 2 is outbound.
pub const FLAG_OUTBOUND: u32 = 2;

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// As much of `s` as an option holds: its length is 16 bits, so a longer string (a name from
/// the config) is cut, at a character's boundary.
fn option_str(s: &str) -> &str {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Builds one block in place: type, length, body, options, length again.
struct Block<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    options: bool,
}

impl<'a> Block<'a> {
    fn new(out: &'a mut Vec<u8>, kind: u32) -> Self {
        let start = out.len();
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // the length, once known
        Block { out, start, options: false }
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn padded(&mut self, bytes: &[u8]) -> &mut Self {
        self.out.extend_from_slice(bytes);
        self.out.resize(self.out.len() + pad4(bytes.len()) - bytes.len(), 0);
        self
    }
    fn option(&mut self, code: u16, value: &[u8]) -> &mut Self {
        self.options = true;
        self.u16(code).u16(value.len() as u16).padded(value)
    }
    fn finish(&mut self) {
        if self.options {
            self.u16(OPT_END).u16(0);
        }
        let len = (self.out.len() - self.start + 4) as u32;
        self.u32(len);
        self.out[self.start + 4..self.start + 8].copy_from_slice(&len.to_le_bytes());
    }
}

/// The file's start: a section header naming the writer, and the one interface all packets
/// are on. `snaplen` is the most bytes kept of a frame.
pub fn header(out: &mut Vec<u8>, application: &str, if_name: &str, if_description: &str, snaplen: u32) {
    let mut shb = Block::new(out, SHB);
    shb.u32(BYTE_ORDER_MAGIC).u16(1).u16(0).u64(u64::MAX); // version 1.0; section length unknown
    shb.option(SHB_USERAPPL, option_str(application).as_bytes()).finish();
    let mut idb = Block::new(out, IDB);
    idb.u16(LINKTYPE_ETHERNET).u16(0).u32(snaplen);
    idb.option(IF_NAME, option_str(if_name).as_bytes()).option(IF_DESCRIPTION, option_str(if_description).as_bytes());
    idb.option(IF_TSRESOL, &[9]).finish(); // 10^-9 s: timestamps in nanoseconds
}

/// What a packet block says besides the frame.
#[derive(Clone, Copy, Default)]
pub struct PacketMeta<'a> {
    /// Nanoseconds since the Unix epoch.
    pub t_ns: u64,
    /// The frame's length on the wire; the block keeps at most `snaplen` bytes of `frame`.
    pub wire_len: u32,
    pub flags: Option<u32>,
    pub packet_id: Option<u64>,
    pub comment: Option<&'a str>,
}

/// How many bytes `packet` adds for a frame of which `captured` bytes are kept.
pub fn packet_block_len(captured: usize, meta: &PacketMeta) -> usize {
    let mut options = 0;
    if meta.flags.is_some() {
        options += 8;
    }
    if meta.packet_id.is_some() {
        options += 12;
    }
    if let Some(c) = meta.comment {
        options += 4 + pad4(option_str(c).len());
    }
    if options > 0 {
        options += 4;
    }
    32 + pad4(captured) + options
}

/// An Enhanced Packet Block on interface 0 holding the first `snaplen` bytes of `frame`.
pub fn packet(out: &mut Vec<u8>, frame: &[u8], snaplen: u32, meta: &PacketMeta) {
    let kept = &frame[..frame.len().min(snaplen as usize)];
    let mut epb = Block::new(out, EPB);
    epb.u32(0).u32((meta.t_ns >> 32) as u32).u32(meta.t_ns as u32);
    epb.u32(kept.len() as u32).u32(meta.wire_len.max(kept.len() as u32)).padded(kept);
    if let Some(f) = meta.flags {
        epb.option(EPB_FLAGS, &f.to_le_bytes());
    }
    if let Some(id) = meta.packet_id {
        epb.option(EPB_PACKETID, &id.to_le_bytes());
    }
    if let Some(c) = meta.comment {
        epb.option(OPT_COMMENT, option_str(c).as_bytes());
    }
    epb.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    /// Walks the blocks: each starts with its type and length and ends with the length again.
    fn blocks(b: &[u8]) -> Vec<(u32, &[u8])> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < b.len() {
            let len = u32_at(b, at + 4) as usize;
            assert_eq!(len % 4, 0, "blocks are 32-bit aligned");
            assert_eq!(u32_at(b, at + len - 4) as usize, len, "trailing length");
            out.push((u32_at(b, at), &b[at + 8..at + len - 4]));
            at += len;
        }
        assert_eq!(at, b.len());
        out
    }

    #[test]
    fn a_file_is_a_section_an_interface_and_packets() {
        let mut b = Vec::new();
        header(&mut b, "bloatlab-link test", "s0->h2", "departures", 128);
        let frame: Vec<u8> = (0..200u8).collect();
        let meta = PacketMeta { t_ns: 1_700_000_000_123_456_789, wire_len: 200, flags: Some(FLAG_OUTBOUND), packet_id: Some(7), comment: None };
        let before = b.len();
        packet(&mut b, &frame, 128, &meta);
        assert_eq!(b.len() - before, packet_block_len(128, &meta));
        let dropped = PacketMeta { comment: Some("drop reason: codel"), ..meta };
        let before = b.len();
        packet(&mut b, &frame[..61], 128, &dropped);
        assert_eq!(b.len() - before, packet_block_len(61, &dropped));

        let bl = blocks(&b);
        assert_eq!(bl.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![SHB, IDB, EPB, EPB]);
        assert_eq!(u32_at(bl[0].1, 0), BYTE_ORDER_MAGIC);
        assert_eq!((bl[1].1[0], u32_at(bl[1].1, 4)), (1, 128), "Ethernet, snaplen");
        let epb = bl[2].1;
        let t = (u32_at(epb, 4) as u64) << 32 | u32_at(epb, 8) as u64;
        assert_eq!(t, meta.t_ns);
        assert_eq!((u32_at(epb, 12), u32_at(epb, 16)), (128, 200), "captured, original");
        assert_eq!(&epb[20..148], &frame[..128]);
        let epb = bl[3].1;
        assert_eq!((u32_at(epb, 12), u32_at(epb, 16)), (61, 200));
        let comment_at = 20 + 64 + 8 + 12; // frame padded to 64, flags, packet id
        assert_eq!(u32_at(epb, comment_at) & 0xffff, OPT_COMMENT as u32);
        assert_eq!(&epb[comment_at + 4..comment_at + 4 + 18], b"drop reason: codel");
    }

    /// Found by the fuzz target `link`: a string longer than 65535 bytes (a direction's name
    /// from the config) had its length cut to 16 bits, so the option's length lied and the
    /// rest of the block (and readers' view of the file) was garbage. Such a string is cut to
    /// what an option holds, at a character's boundary.
    #[test]
    fn a_name_longer_than_an_option_holds_is_cut_whole() {
        let name = "é".repeat(40_000); // 80 000 bytes
        let mut b = Vec::new();
        header(&mut b, "app", &name, "d", 128);
        let meta = PacketMeta { comment: Some(&name), ..PacketMeta::default() };
        let before = b.len();
        packet(&mut b, &[1, 2, 3], 128, &meta);
        assert_eq!(b.len() - before, packet_block_len(3, &meta));
        let bl = blocks(&b);
        // The interface's first option: if_name, 65534 bytes (32767 whole characters).
        let idb = bl[1].1;
        assert_eq!((u32_at(idb, 8) & 0xffff, u32_at(idb, 8) >> 16), (IF_NAME as u32, 65_534));
        assert_eq!(&idb[12..12 + 65_534], &name.as_bytes()[..65_534]);
        let next = 12 + 65_536;
        assert_eq!(u32_at(idb, next) & 0xffff, IF_DESCRIPTION as u32, "the next option where the length says");
        let epb = bl[2].1;
        assert_eq!((u32_at(epb, 24) & 0xffff, u32_at(epb, 24) >> 16), (OPT_COMMENT as u32, 65_534), "after the frame, padded to 4");
    }
}
