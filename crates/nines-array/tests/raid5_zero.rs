//! Issue 38: raid5 answered WRITE_ZEROES and TRIM with EOPNOTSUPP. Both are now writes of
//! zeros with the parity kept: after them every byte reads back as a shadow copy says (zeros
//! in the ranges, the old data around them, at any alignment), and every row's parity is the
//! XOR of its data, whole, degraded, with the write-intent bitmap and with the D/ND write-back
//! buffer; the client's buffer and the scratch buffers hold garbage, so the zeros are the
//! policy's own.

use nines_array::api::{IoResult, VolIo, VolOp};
use nines_array::testing::SyncDriver;
use nines_array::{DndSpec, LayoutSpec, Volume, VolumeParams, build};

const N: u32 = 4;
const CHUNK: u64 = 4096;
const ROWS: u64 = 32;
const MEMBER_BYTES: u64 = ROWS * CHUNK + 8192;
const LEN_MAX: u32 = 64 << 10;

fn spec(failed: Option<u32>, dnd: bool, bitmap: bool) -> LayoutSpec {
    LayoutSpec::Raid5 {
        chunk_bytes: CHUNK,
        failed,
        dnd: dnd.then_some(DndSpec {
            window_ns: 1_000_000,
            write_back_bytes: 8 * u64::from(N) * CHUNK,
            plm: false,
        }),
        rebuild: None,
        fast_fail_ns: None,
        bitmap_region_rows: bitmap.then_some(4),
    }
}

fn op(d: &mut SyncDriver, op: VolOp, offset_bytes: u64, len_bytes: u32) {
    d.data_mut().client[0].fill(0xEE);
    let io = VolIo {
        tag: 0,
        op,
        offset_bytes,
        len_bytes,
        fua: false,
    };
    assert_eq!(d.run(&[io])[0].1, IoResult::Ok, "{op:?} at {offset_bytes}");
}

#[test]
fn write_zeroes_and_trim_read_back_zeros_with_the_parity_kept() {
    for (failed, dnd, bitmap) in [
        (None, false, false),
        (None, false, true),
        (Some(2), false, false),
        (None, true, false),
    ] {
        let what = format!("failed {failed:?}, dnd {dnd}, bitmap {bitmap}");
        let sizes = vec![MEMBER_BYTES; N as usize];
        let v = build(
            &spec(failed, dnd, bitmap),
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: 512,
                tags: 1,
                len_bytes_max: LEN_MAX,
            },
        )
        .unwrap();
        let size = v.size_bytes();
        let mut d = SyncDriver::new(v, &sizes, 1, LEN_MAX);
        for s in &mut d.data_mut().scratch {
            s.fill(0xEE);
        }
        // Old data everywhere.
        let mut shadow: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8 | 1).collect();
        for at in (0..size).step_by(LEN_MAX as usize) {
            let len = (size - at).min(u64::from(LEN_MAX)) as usize;
            d.write(at, &shadow[at as usize..at as usize + len])
                .unwrap();
        }
        // Zeros at every alignment: inside a chunk, across chunks, whole rows, the end.
        let row = CHUNK * u64::from(N - 1);
        for (k, (at, len)) in [
            (512u64, 1024u32),
            (CHUNK - 512, 2048),
            (2 * row, row as u32 * 2),
            (5 * row + 1536, row as u32 + 1024),
            (size - 4096, 4096),
        ]
        .into_iter()
        .enumerate()
        {
            let kind = if k % 2 == 0 {
                VolOp::WriteZeroes
            } else {
                VolOp::Trim
            };
            op(&mut d, kind, at, len);
            shadow[at as usize..at as usize + len as usize].fill(0);
        }
        d.flush().unwrap();
        // Let the write-back buffer's turns pass.
        let t = d.now_ns() + 100_000_000;
        d.advance_to(t);
        d.flush().unwrap();
        for at in (0..size).step_by(LEN_MAX as usize) {
            let len = (size - at).min(u64::from(LEN_MAX)) as u32;
            let got = d.read(at, len).unwrap();
            assert!(
                got == shadow[at as usize..(at + u64::from(len)) as usize],
                "{what}: the volume reads back wrong near {at}"
            );
        }
        if failed.is_none() {
            let m = d.members();
            for r in 0..ROWS {
                let off = r * CHUNK;
                for i in 0..CHUNK {
                    let x = (0..N).fold(0u8, |a, k| a ^ m.byte(k, off + i));
                    assert_eq!(x, 0, "{what}: row {r}'s parity disagrees at byte {i}");
                }
            }
        }
    }
}
