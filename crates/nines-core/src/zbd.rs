//! fio's `zonemode=zbd` as options (`nines profile --zonemode zbd`, job files' `zonemode=zbd`):
//! writes to a host-managed zoned device go at the write pointer of a zone the run chooses,
//! reads stay below the write pointers (docs/arch-zoned.md, "fio's zonemode=zbd"). The options
//! and their parsers live here, free of I/O, so the command line and the job file reader take
//! the same values; the policy is `nines_array::zbd`.

/// `zonemode`: how offsets relate to zones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneMode {
    /// Offsets as generated (fio's default).
    None,
    /// fio's `zbd`: each write at a zone's write pointer, reads below them.
    Zbd,
}

/// Why a zone option's value is refused: one line, saying what to give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZbdError {
    #[error(
        "zonemode {0:?}: nines runs none or zbd (fio's strided mode, a fixed number of bytes per \
         zone before skipping, is not built)"
    )]
    Mode(String),
    #[error("{what} {value:?}: give a number from 0 to 1 (e.g. 0.5)")]
    Ratio { what: &'static str, value: String },
    #[error("max_open_zones {0:?}: give a whole number of zones, 0 to {MAX_OPEN_ZONES_MAX}")]
    OpenZones(String),
}

/// The most open zones one may ask for (fio's `ZBD_MAX_WRITE_ZONES` is 4096 too).
pub const MAX_OPEN_ZONES_MAX: u32 = 4096;

/// The zone options of a run (fio's names): what a volume over a zoned device does with them is
/// `nines_array::zbd`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZbdOptions {
    /// Zones written at once at most (`max_open_zones`). None: the device's limit (its
    /// max_open_zones, else its max_active_zones, else no limit), as fio does; larger than the
    /// device's limit is refused, as fio does.
    pub max_open_zones: Option<u32>,
    /// `zone_reset_threshold` (0..=1): once the written bytes of the region's zones reach this
    /// share of the region, zones are reset as `zone_reset_frequency` says.
    pub zone_reset_threshold: f64,
    /// `zone_reset_frequency` (0..=1): past the threshold, the zone a write goes to is reset
    /// first once every `1 / frequency` writes (0: never; fio's garbage-collection simulation).
    pub zone_reset_frequency: f64,
    /// `read_beyond_wp`: reads go where generated, above a write pointer too (the device returns
    /// zeros there without reading flash; fio's default is false).
    pub read_beyond_wp: bool,
    /// `zonesize` as given: checked against the device's zone size (fio refuses a difference).
    pub zone_size_bytes: Option<u64>,
    /// `zonecapacity` as given: checked against the device's zone capacity.
    pub zone_capacity_bytes: Option<u64>,
}

/// `zonemode=` / `--zonemode`.
pub fn parse_zone_mode(s: &str) -> Result<ZoneMode, ZbdError> {
    match s.trim() {
        "none" => Ok(ZoneMode::None),
        "zbd" => Ok(ZoneMode::Zbd),
        other => Err(ZbdError::Mode(other.to_string())),
    }
}

/// A share from 0 to 1 (`zone_reset_threshold`, `zone_reset_frequency`): fio's float, also
/// written as a percentage (`50%`).
pub fn parse_ratio(what: &'static str, s: &str) -> Result<f64, ZbdError> {
    let bad = || ZbdError::Ratio {
        what,
        value: s.to_string(),
    };
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(p) => (p, 100.0),
        None => (t, 1.0),
    };
    if num.is_empty()
        || !num
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-')
    {
        return Err(bad());
    }
    let v = num.parse::<f64>().map_err(|_| bad())? / scale;
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(bad())
    }
}

/// `max_open_zones`: a count of zones. 0 means "no limit" in fio where the device has none;
/// nines takes it as "the device's limit" (None), which is the same on such a device.
pub fn parse_open_zones(s: &str) -> Result<Option<u32>, ZbdError> {
    let t = s.trim();
    let n = t
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= MAX_OPEN_ZONES_MAX && t.chars().all(|c| c.is_ascii_digit()))
        .ok_or_else(|| ZbdError::OpenZones(s.to_string()))?;
    Ok((n > 0).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values_as_fio_writes_them() {
        assert_eq!(parse_zone_mode("zbd"), Ok(ZoneMode::Zbd));
        assert_eq!(parse_zone_mode(" none "), Ok(ZoneMode::None));
        let e = parse_zone_mode("strided").unwrap_err().to_string();
        assert!(e.contains("strided") && e.contains("not built"), "{e}");
        assert_eq!(parse_ratio("zone_reset_threshold", "0.5"), Ok(0.5));
        assert_eq!(parse_ratio("zone_reset_threshold", "1"), Ok(1.0));
        assert_eq!(parse_ratio("zone_reset_frequency", "25%"), Ok(0.25));
        assert_eq!(parse_ratio("zone_reset_frequency", "0"), Ok(0.0));
        for bad in ["1.5", "-0.1", "", "nan", "inf", "x", "101%", "0.5.5"] {
            let e = parse_ratio("zone_reset_threshold", bad).unwrap_err();
            assert!(
                e.to_string().starts_with("zone_reset_threshold")
                    && e.to_string().contains("0 to 1"),
                "{bad}: {e}"
            );
        }
        assert_eq!(parse_open_zones("6"), Ok(Some(6)));
        assert_eq!(parse_open_zones("0"), Ok(None));
        assert_eq!(parse_open_zones("4096"), Ok(Some(4096)));
        for bad in ["4097", "-1", "+3", "", "2.5", "six"] {
            assert!(parse_open_zones(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_text_is_a_value_in_range_or_one_line(s in ".{0,24}") {
            match parse_ratio("zone_reset_frequency", &s) {
                Ok(v) => prop_assert!((0.0..=1.0).contains(&v)),
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
            match parse_open_zones(&s) {
                Ok(Some(n)) => prop_assert!((1..=MAX_OPEN_ZONES_MAX).contains(&n)),
                Ok(None) => prop_assert_eq!(s.trim().parse::<u32>().ok(), Some(0)),
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
            match parse_zone_mode(&s) {
                Ok(_) => prop_assert!(matches!(s.trim(), "none" | "zbd")),
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
        }

        #[test]
        fn ratios_round_trip(v in 0.0f64..=1.0) {
            let back = parse_ratio("zone_reset_threshold", &format!("{v}")).unwrap();
            prop_assert_eq!(back, v);
            let n = (v * 4096.0) as u32;
            prop_assert_eq!(parse_open_zones(&n.to_string()).unwrap(), (n > 0).then_some(n));
        }
    }
}
