//! Fitting a trace onto simulated devices: device ids onto 0..devices, offsets into the device.

use super::{FitPolicy, FitSummary, Trace, TraceError, distinct_devices};

/// Offsets keep their alignment up to this (a 4 KiB-aligned offset stays 4 KiB-aligned when moved).
const ALIGN_BYTES_MAX: u64 = 4096;

/// The largest power of two dividing `offset_bytes`, capped at [`ALIGN_BYTES_MAX`].
fn alignment(offset_bytes: u64) -> u64 {
    if offset_bytes == 0 {
        ALIGN_BYTES_MAX
    } else {
        (1u64 << offset_bytes.trailing_zeros()).min(ALIGN_BYTES_MAX)
    }
}

fn align_down(v: u64, align: u64) -> u64 {
    assert!(align.is_power_of_two());
    v & !(align - 1)
}

impl Trace {
    /// Maps the trace onto `devices` simulated devices of `device_size_bytes` each.
    ///
    /// Devices: the trace's distinct device ids, in ascending order, are numbered 0, 1, 2, ... and
    /// each goes to simulated device (number modulo `devices`). For ids that are already 0..k this
    /// is the id modulo `devices`; sparse ids (blkparse's major << 20 | minor, MSR disk numbers)
    /// still spread over all devices instead of piling onto one.
    ///
    /// Offsets: a request "out of range" ends beyond `device_size_bytes`. With
    /// - [`FitPolicy::Error`]: any out-of-range request fails, naming the first one's line;
    /// - [`FitPolicy::Wrap`]: each offset becomes offset modulo (size - length + 1), the room in
    ///   which the request fits, aligned down to the offset's own alignment (at most 4 KiB); offsets
    ///   already in range are unchanged;
    /// - [`FitPolicy::Scale`]: when the largest end exceeds the size, every offset is multiplied by
    ///   size / largest end (so the footprint keeps its shape and locality), pulled back if the
    ///   request would still overrun the end, and aligned down as for Wrap; traces that fit are
    ///   unchanged (Scale never stretches).
    ///
    /// Lengths never change: a request longer than the whole device is an error with any policy.
    /// Nothing is modified when an error is returned.
    pub fn fit(
        &mut self,
        device_size_bytes: u64,
        devices: u32,
        policy: FitPolicy,
    ) -> Result<FitSummary, TraceError> {
        if devices == 0 {
            return Err(TraceError::InvalidOption(
                "cannot fit a trace onto 0 devices; give at least 1".to_string(),
            ));
        }
        if device_size_bytes == 0 {
            return Err(TraceError::InvalidOption(
                "cannot fit a trace onto a device of 0 bytes; give the device size".to_string(),
            ));
        }
        let mut max_end_bytes = 0u64;
        let mut out_of_range = 0u64;
        let mut first_out: Option<usize> = None;
        for (i, r) in self.records.iter().enumerate() {
            if r.len_bytes > device_size_bytes {
                return Err(TraceError::RequestTooLarge {
                    at: self.location(i),
                    len_bytes: r.len_bytes,
                    device_size_bytes,
                });
            }
            let end = r.offset_bytes.checked_add(r.len_bytes).ok_or_else(|| {
                TraceError::InvalidOption(format!(
                    "{}: offset + length overflows 64 bits",
                    self.location(i)
                ))
            })?;
            max_end_bytes = max_end_bytes.max(end);
            if end > device_size_bytes {
                out_of_range += 1;
                first_out.get_or_insert(i);
            }
        }
        if policy == FitPolicy::Error
            && let Some(i) = first_out
        {
            let r = &self.records[i];
            return Err(TraceError::OutOfRange {
                at: self.location(i),
                offset_bytes: r.offset_bytes,
                len_bytes: r.len_bytes,
                end_bytes: r.end_bytes(),
                device_size_bytes,
                out_of_range,
                max_end_bytes,
            });
        }

        let ids = distinct_devices(&self.records);
        for r in &mut self.records {
            let rank = ids.binary_search(&r.device).expect("every id is listed");
            r.device = (rank as u64 % u64::from(devices)) as u32;
        }

        if out_of_range > 0 {
            for r in &mut self.records {
                let align = alignment(r.offset_bytes);
                let room = device_size_bytes - r.len_bytes;
                let moved = match policy {
                    FitPolicy::Error => unreachable!("returned above"),
                    FitPolicy::Wrap => r.offset_bytes % (room + 1),
                    FitPolicy::Scale => {
                        let scaled = (u128::from(r.offset_bytes) * u128::from(device_size_bytes)
                            / u128::from(max_end_bytes))
                            as u64;
                        scaled.min(room)
                    }
                };
                r.offset_bytes = align_down(moved, align);
                assert!(r.end_bytes() <= device_size_bytes);
            }
        }
        self.devices = distinct_devices(&self.records);
        Ok(FitSummary {
            out_of_range,
            max_end_bytes,
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_is_capped() {
        assert_eq!(alignment(0), 4096);
        assert_eq!(alignment(512), 512);
        assert_eq!(alignment(8192), 4096);
        assert_eq!(alignment(3), 1);
    }
}
