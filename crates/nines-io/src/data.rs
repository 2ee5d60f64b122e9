//! Bytes on the real driver: the data plane volumes compute through (client buffers, one per
//! I/O slot, and each volume's scratch buffers, all owned by the worker), and the verification
//! pattern of `--verify`.
//!
//! With `--verify` every write carries a pattern that depends only on the volume offset of each
//! 8-byte word and the seed, so whichever write reached a block last, a later read of it must
//! return exactly that pattern: a read that does not is reported with its offset.

use nines_array::{BufRef, DataPlane};

/// Raw pointers into buffers the worker owns and keeps alive, unmoved, while it runs.
pub(crate) struct PtrData<'a> {
    /// Client buffer of each slot, and its length.
    pub client: &'a [(*mut u8, usize)],
    /// This volume's scratch buffers.
    pub scratch: &'a [(*mut u8, usize)],
}

impl PtrData<'_> {
    /// The bytes `r..r+len`. Panics (a policy bug) when outside the buffer.
    #[inline]
    fn slice(&mut self, r: BufRef, len: u32) -> &mut [u8] {
        let ((ptr, cap), off) = match r {
            BufRef::Client { tag, offset } => (self.client[tag as usize], offset),
            BufRef::Scratch { index, offset } => (self.scratch[index as usize], offset),
            BufRef::None => panic!("a data operation on BufRef::None"),
        };
        let (off, len) = (off as usize, len as usize);
        assert!(
            off + len <= cap,
            "buffer reference past its buffer: {off}+{len} of {cap} bytes"
        );
        // SAFETY: the worker allocated `cap` bytes at `ptr` and keeps them alive and unmoved for
        // the run; no engine holds this buffer while a volume computes on it (policies compute
        // on buffers of commands that completed or were not yet sent).
        unsafe { std::slice::from_raw_parts_mut(ptr.add(off), len) }
    }

    /// A pointer for an engine: the buffer must hold `len` bytes at `r`.
    #[inline]
    pub fn ptr(&mut self, r: BufRef, len: u32) -> *mut u8 {
        self.slice(r, len).as_mut_ptr()
    }
}

impl DataPlane for PtrData<'_> {
    fn has_data(&self) -> bool {
        true
    }
    fn copy(&mut self, dst: BufRef, src: BufRef, len: u32) {
        let s = self.slice(src, len).as_ptr();
        let d = self.slice(dst, len).as_mut_ptr();
        // SAFETY: both ranges are inside live buffers; `copy` allows overlap.
        unsafe { std::ptr::copy(s, d, len as usize) };
    }
    fn xor(&mut self, dst: BufRef, src: BufRef, len: u32) {
        let s = self.slice(src, len).as_ptr();
        let d = self.slice(dst, len);
        for (i, b) in d.iter_mut().enumerate() {
            // SAFETY: `s` is valid for `len` bytes (checked by `slice`).
            *b ^= unsafe { *s.add(i) };
        }
    }
    fn zero(&mut self, dst: BufRef, len: u32) {
        self.slice(dst, len).fill(0);
    }
    fn write_bytes(&mut self, dst: BufRef, bytes: &[u8]) {
        self.slice(dst, bytes.len() as u32).copy_from_slice(bytes);
    }
    fn read_bytes(&mut self, src: BufRef, out: &mut [u8]) {
        let n = out.len() as u32;
        out.copy_from_slice(self.slice(src, n));
    }
}

/// The verification word at volume byte offset `offset` (a multiple of 8).
#[inline]
fn word(seed: u64, offset: u64) -> u64 {
    let mut z = seed ^ offset.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern of volume offset `offset` (offsets and lengths are multiples of
/// 512, so words are whole).
pub fn fill_pattern(buf: &mut [u8], offset: u64, seed: u64) {
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(seed, offset + 8 * i as u64).to_le_bytes());
    }
}

/// The volume offset of the first word of `buf` that is not the pattern, if any.
pub fn check_pattern(buf: &[u8], offset: u64, seed: u64) -> Option<u64> {
    buf.chunks_exact(8).enumerate().find_map(|(i, chunk)| {
        let at = offset + 8 * i as u64;
        (chunk != word(seed, at).to_le_bytes()).then_some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_round_trips_and_finds_the_first_bad_word() {
        let mut b = vec![0u8; 4096];
        fill_pattern(&mut b, 8192, 7);
        assert_eq!(check_pattern(&b, 8192, 7), None);
        assert_eq!(check_pattern(&b, 8192, 8), Some(8192));
        assert_eq!(check_pattern(&b, 4096, 7), Some(4096));
        b[1000] ^= 1;
        assert_eq!(check_pattern(&b, 8192, 7), Some(8192 + 1000 / 8 * 8));
        // The pattern of a block does not depend on how a request was cut.
        let mut half = vec![0u8; 2048];
        fill_pattern(&mut half, 8192 + 2048, 7);
        assert_eq!(
            &half[..],
            &{
                let mut full = vec![0u8; 4096];
                fill_pattern(&mut full, 8192, 7);
                full
            }[2048..]
        );
    }
}
