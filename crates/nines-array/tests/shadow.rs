//! Every layout against a shadow copy: random writes, trims and reads of random sizes and
//! offsets through the synchronous in-memory driver must read back exactly what a flat byte
//! array would.

use nines_array::testing::SyncDriver;
use nines_array::{LayoutSpec, Volume, VolumeParams, build};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Write { off: u64, len: u32, seed: u8 },
    Read { off: u64, len: u32 },
}

fn steps(size: u64) -> impl Strategy<Value = Vec<Step>> {
    let blocks = size / 512;
    let step =
        (0..blocks, 1u32..64, any::<u8>(), any::<bool>()).prop_map(move |(b, n, seed, w)| {
            let n = n.min((blocks - b) as u32);
            if w {
                Step::Write {
                    off: b * 512,
                    len: n * 512,
                    seed,
                }
            } else {
                Step::Read {
                    off: b * 512,
                    len: n * 512,
                }
            }
        });
    prop::collection::vec(step, 1..40)
}

fn check(layout: LayoutSpec, sizes: &[u64], steps: &[Step]) -> Result<(), TestCaseError> {
    let len_max = 64 * 512;
    let v = build(
        &layout,
        &VolumeParams {
            member_sizes_bytes: sizes,
            block_bytes: 512,
            tags: 1,
            len_bytes_max: len_max,
        },
    )
    .unwrap();
    let size = v.size_bytes();
    let mut d = SyncDriver::new(v, sizes, 1, len_max);
    let mut shadow = vec![0u8; size as usize];
    for s in steps {
        match *s {
            Step::Write { off, len, seed } => {
                if off + u64::from(len) > size {
                    continue;
                }
                let bytes: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                    .collect();
                d.write(off, &bytes).unwrap();
                shadow[off as usize..(off + u64::from(len)) as usize].copy_from_slice(&bytes);
            }
            Step::Read { off, len } => {
                if off + u64::from(len) > size {
                    continue;
                }
                let got = d.read(off, len).unwrap();
                prop_assert_eq!(
                    &got[..],
                    &shadow[off as usize..(off + u64::from(len)) as usize]
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn raid0_matches_a_flat_array(s in steps(6 * 64 * 1024), stripe_kib in prop::sample::select(vec![4u64, 8, 16, 64])) {
        check(LayoutSpec::Raid0 { stripe_bytes: stripe_kib * 1024 }, &[128 * 1024, 128 * 1024, 160 * 1024], &s)?;
    }

    #[test]
    fn passthrough_matches_a_flat_array(s in steps(256 * 1024)) {
        check(LayoutSpec::Independent, &[256 * 1024], &s)?;
    }
}
