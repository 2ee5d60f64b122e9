//! raid5 D/ND's write-back buffer under concurrency, driven command by command: the test holds
//! every member command and completes them in an order it chooses, so a buffer flush can land
//! while another write is still reading its row (which the synchronous driver, executing each
//! command at once, never does).

use nines_array::api::{BufRef, CmdDone, CmdOp, CmdResult, DataPlane, Output, VolIo, VolOp};
use nines_array::testing::MemData;
use nines_array::{DndSpec, LayoutSpec, Volume, VolumeHost, VolumeParams, build};

const N: u32 = 3;
const CHUNK: u64 = 4096;
const MEMBER_BYTES: u64 = 64 * 1024;
const LEN_MAX: u32 = 8192;

/// A volume, its members' bytes, and the member commands it sent that are not complete yet.
struct Held {
    host: VolumeHost,
    data: MemData,
    members: Vec<Vec<u8>>,
    cmds: Vec<nines_array::api::MemberCmd>,
    /// Every member write sent: (member, id).
    writes: Vec<(u32, u32)>,
    done: Vec<u32>,
}

impl Held {
    fn new() -> Held {
        let sizes = vec![MEMBER_BYTES; N as usize];
        let v = build(
            &LayoutSpec::Raid5 {
                chunk_bytes: CHUNK,
                failed: None,
                dnd: Some(DndSpec {
                    window_ns: 10_000_000,
                    write_back_bytes: 4 * u64::from(N) * CHUNK,
                    plm: false,
                }),
                rebuild: None,
                fast_fail_ns: None,
                bitmap_region_rows: None,
            },
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: 512,
                tags: 2,
                len_bytes_max: LEN_MAX,
            },
        )
        .unwrap();
        let data = MemData::new(2, LEN_MAX, v.scratch());
        Held {
            host: VolumeHost::new(v, 0, false),
            data,
            members: vec![vec![0; MEMBER_BYTES as usize]; N as usize],
            cmds: Vec::new(),
            writes: Vec::new(),
            done: Vec::new(),
        }
    }

    /// Takes what the volume output: commands are held, completions noted.
    fn collect(&mut self) {
        while let Some(o) = self.host.pop() {
            match o {
                Output::Cmd(c) => {
                    self.host.sent(&c, 0);
                    if c.op.writes_data() {
                        self.writes.push((c.member, c.id));
                    }
                    self.cmds.push(c);
                }
                Output::Done(d) => {
                    assert_eq!(d.result, nines_array::api::IoResult::Ok);
                    self.done.push(d.tag);
                }
            }
        }
    }

    fn write(&mut self, tag: u32, offset_bytes: u64, bytes: &[u8]) {
        self.data
            .write_bytes(BufRef::Client { tag, offset: 0 }, bytes);
        let io = VolIo {
            tag,
            op: VolOp::Write,
            offset_bytes,
            len_bytes: bytes.len() as u32,
            fua: false,
        };
        self.host.submit(0, io, &mut self.data);
        self.collect();
    }

    /// Reads through the volume, completing its commands as they come.
    fn read(&mut self, tag: u32, offset_bytes: u64, len_bytes: u32) -> Vec<u8> {
        let io = VolIo {
            tag,
            op: VolOp::Read,
            offset_bytes,
            len_bytes,
            fua: false,
        };
        let before = self.done.len();
        self.host.submit(0, io, &mut self.data);
        self.collect();
        // Bounded: each pass completes what the volume sent.
        for _ in 0..8 {
            if self.done.len() > before {
                break;
            }
            self.complete(|_| true);
        }
        assert_eq!(self.done[before..], [tag], "the read completed");
        let mut out = vec![0u8; len_bytes as usize];
        self.data
            .read_bytes(BufRef::Client { tag, offset: 0 }, &mut out);
        out
    }

    /// Executes and completes the held commands `pick` chooses (in the order held).
    fn complete(&mut self, pick: impl Fn(&nines_array::api::MemberCmd) -> bool) -> usize {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.cmds)
            .into_iter()
            .partition(|c| pick(c));
        self.cmds = later;
        for c in &now {
            let (m, off, len) = (
                c.member as usize,
                c.offset_bytes as usize,
                c.len_bytes as usize,
            );
            match c.op {
                CmdOp::Read => {
                    let src = self.members[m][off..off + len].to_vec();
                    self.data.write_bytes(c.buf, &src);
                }
                op if op.writes_data() => {
                    let mut buf = vec![0u8; len];
                    self.data.read_bytes(c.buf, &mut buf);
                    self.members[m][off..off + len].copy_from_slice(&buf);
                }
                _ => {}
            }
            self.host.member_done(
                0,
                CmdDone {
                    id: c.id,
                    result: CmdResult::Ok,
                },
                &mut self.data,
            );
            self.collect();
        }
        now.len()
    }
}

/// A write that took a fresh buffer entry and is still reading its row keeps that entry when a
/// flush of another row lands meanwhile (the flush's completion releases clean entries): its
/// bytes go into the buffer and reach members only in their turns. Before, the entry was freed
/// under the write, which then found no entry for its row and wrote straight to every member
/// it touched, the turn's owner or not.
#[test]
fn a_write_reading_its_row_keeps_its_buffer_entry_when_another_rows_flush_lands() {
    let mut h = Held::new();
    // Row 0, data chunk 0: its reads (a read-modify-write) complete, its bytes go into the
    // buffer and it is done; the turn's owner gets its flush (held here).
    h.write(0, 0, &[0xaa; 4096]);
    assert_eq!(h.complete(|c| c.op == CmdOp::Read), 2);
    assert_eq!(h.done, vec![0]);
    let owner = h
        .writes
        .first()
        .map(|w| w.0)
        .expect("a flush to the turn's owner");
    assert!(
        h.writes.iter().all(|w| w.0 == owner),
        "flushes go to one member"
    );
    let flushes: Vec<u32> = h.writes.iter().map(|w| w.1).collect();
    // Row 1, part of a chunk: a read-modify-write, which takes a fresh entry and reads its
    // data chunk and the parity first (held).
    let row_bytes = CHUNK * u64::from(N - 1);
    h.write(1, row_bytes + 512, &[0x55; 1024]);
    assert!(h.done == vec![0], "the write waits for its reads");
    let reads = h.cmds.iter().filter(|c| c.op == CmdOp::Read).count();
    assert_eq!(reads, 2, "RMW: the data chunk and the parity");
    // The row-0 flush lands first, then the row-1 write's reads.
    assert_eq!(h.complete(|c| flushes.contains(&c.id)), flushes.len());
    assert_eq!(h.complete(|c| c.op == CmdOp::Read), 2);
    let stats = h.host.volume().stats();
    assert_eq!(
        stats["dnd"]["buffered_writes"].as_u64(),
        Some(2),
        "both writes were buffered: {stats}"
    );
    let strays: Vec<_> = h.writes.iter().filter(|w| w.0 != owner).collect();
    assert!(
        strays.is_empty(),
        "member writes outside the owner's turn (owner {owner}): {strays:?}"
    );
    assert_eq!(h.done, vec![0, 1], "the second write is acknowledged");
    // Everything still held completes; the data read back through the volume is what was
    // written (the members plus the buffer).
    for _ in 0..8 {
        if h.complete(|_| true) == 0 {
            break;
        }
    }
    assert!(h.cmds.is_empty());
    assert_eq!(h.read(0, 0, 4096), vec![0xaa; 4096]);
    assert_eq!(h.read(0, row_bytes + 512, 1024), vec![0x55; 1024]);
    assert_eq!(h.read(0, row_bytes, 512), vec![0; 512]);
}

/// A write whose reads fail on two members (more than the parity covers) fails, and the entry
/// it took is released: the buffer is as before it.
#[test]
fn a_failed_write_gives_back_the_buffer_entry_it_took() {
    let mut h = Held::new();
    h.write(0, 512, &[0x11; 1024]);
    let ids: Vec<u32> = h.cmds.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 2, "RMW reads");
    let used = |h: &Held| h.host.volume().stats()["dnd"]["entries_used"].as_u64();
    assert_eq!(used(&h), Some(1), "the write took an entry");
    for id in ids {
        h.host.member_done(
            0,
            CmdDone {
                id,
                result: CmdResult::Err(5),
            },
            &mut h.data,
        );
    }
    h.cmds.clear();
    let mut failed = Vec::new();
    while let Some(o) = h.host.pop() {
        if let Output::Done(d) = o {
            failed.push((d.tag, d.result));
        }
    }
    assert_eq!(failed, vec![(0, nines_array::api::IoResult::Err(5))]);
    assert_eq!(used(&h), Some(0), "its entry was released");
}
