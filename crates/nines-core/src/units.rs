//! Parsers for the units users type: sizes, durations, CPU lists and percentile lists.
//!
//! Every parser takes the user's text and either returns the exact value or a [`ParseError`]
//! whose message names the text and says what would have been accepted. They never panic, on
//! any input (property-tested below).

use std::fmt::Write as _;

/// A value the user typed that does not parse. The message is one line and says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{input}': {reason}")]
pub struct ParseError {
    /// What kind of value was expected ("size", "duration", ...).
    pub what: &'static str,
    /// The text the user gave.
    pub input: String,
    /// Why it was refused and what is accepted.
    pub reason: String,
}

impl ParseError {
    pub fn new(what: &'static str, input: &str, reason: impl Into<String>) -> Self {
        ParseError {
            what,
            input: input.to_owned(),
            reason: reason.into(),
        }
    }
}

/// The percentiles reported when the user does not choose: the paper's six nines and the usual
/// lower ones.
pub const DEFAULT_PERCENTILES: [f64; 7] = [50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999];

/// Splits "128k" into ("128", "k"), the number and its suffix.
fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// Parses a size in bytes: `4096`, `4k`, `128K`, `1m`, `2g`, `1t`, `4KiB`, `1MB`.
///
/// Suffixes are powers of 1024 whatever their spelling (`k`, `kb`, `kib`), as in fio, because
/// block sizes and device regions are always binary. Fractions are allowed when the result is a
/// whole number of bytes (`1.5k` = 1536).
pub fn parse_size_bytes(s: &str) -> Result<u64, ParseError> {
    const WHAT: &str = "size";
    let t = s.trim();
    if t.is_empty() {
        return Err(ParseError::new(
            WHAT,
            s,
            "empty; give a number of bytes such as 4k, 128k, 1m or 4096",
        ));
    }
    let (num, suffix) = split_number(t);
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => {
            return Err(ParseError::new(
                WHAT,
                s,
                "unknown unit; use a number with an optional k, m, g, t or p suffix (powers of 1024)",
            ));
        }
    };
    if num.is_empty() {
        return Err(ParseError::new(WHAT, s, "no number before the unit"));
    }
    let multiplier = 1u128 << shift;
    let bytes = if let Some((whole, frac)) = num.split_once('.') {
        // Exact decimal arithmetic: whole * m + frac * m / 10^len(frac), which must be whole.
        if frac.contains('.') || frac.len() > 18 || whole.len() > 20 {
            return Err(ParseError::new(WHAT, s, "not a number"));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole
                .parse()
                .map_err(|_| ParseError::new(WHAT, s, "not a number"))?
        };
        let frac_value: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse()
                .map_err(|_| ParseError::new(WHAT, s, "not a number"))?
        };
        let scale = 10u128.pow(frac.len() as u32);
        let frac_bytes = frac_value * multiplier;
        if !frac_bytes.is_multiple_of(scale) {
            return Err(ParseError::new(WHAT, s, "is not a whole number of bytes"));
        }
        whole
            .checked_mul(multiplier)
            .and_then(|w| w.checked_add(frac_bytes / scale))
    } else {
        if num.len() > 39 {
            return Err(ParseError::new(WHAT, s, "too large"));
        }
        let n: u128 = num
            .parse()
            .map_err(|_| ParseError::new(WHAT, s, "not a number"))?;
        n.checked_mul(multiplier)
    };
    bytes
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| ParseError::new(WHAT, s, "too large (at most 16 EiB)"))
}

/// Parses a duration to nanoseconds: `10s`, `500ms`, `100us`, `250ns`, `2m`, `1h`, `1.5s`.
/// A bare number is seconds, as in fio's `runtime`.
pub fn parse_duration_ns(s: &str) -> Result<u64, ParseError> {
    const WHAT: &str = "duration";
    let t = s.trim();
    let (num, suffix) = split_number(t);
    if num.is_empty() {
        return Err(ParseError::new(
            WHAT,
            s,
            "give a number with a unit: ns, us, ms, s, m or h (e.g. 10s, 500ms)",
        ));
    }
    let unit_ns: u128 = match suffix.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(ParseError::new(
                WHAT,
                s,
                "unknown unit; use ns, us, ms, s, m or h (e.g. 10s, 500ms)",
            ));
        }
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.contains('.') || frac.len() > 18 || whole.len() > 20 {
        return Err(ParseError::new(WHAT, s, "not a number"));
    }
    let whole_v: u128 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| ParseError::new(WHAT, s, "not a number"))?
    };
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse()
            .map_err(|_| ParseError::new(WHAT, s, "not a number"))?
    };
    let scale = 10u128.pow(frac.len() as u32);
    let frac_ns = frac_v * unit_ns;
    if !frac_ns.is_multiple_of(scale) {
        return Err(ParseError::new(WHAT, s, "finer than one nanosecond"));
    }
    whole_v
        .checked_mul(unit_ns)
        .and_then(|w| w.checked_add(frac_ns / scale))
        .and_then(|ns| u64::try_from(ns).ok())
        .ok_or_else(|| ParseError::new(WHAT, s, "too long (at most 584 years)"))
}

/// Parses a think time to nanoseconds: a duration with its unit (`100us`, `2.56s`), or `0`.
///
/// A bare non-zero number is refused: fio's `thinktime=100` counts microseconds while every other
/// duration of nines (and fio's `runtime`) counts seconds, so `--thinktime 100` would mean 100 s to
/// one reader and 100 µs to another. fio job files, which mean microseconds, are converted by the
/// job-file reader before they get here.
pub fn parse_thinktime_ns(s: &str) -> Result<u64, ParseError> {
    let t = s.trim();
    let (num, suffix) = split_number(t);
    if !num.is_empty() && suffix.is_empty() && num.chars().any(|c| matches!(c, '1'..='9')) {
        return Err(ParseError::new(
            "think time",
            s,
            "a bare number is ambiguous (fio's thinktime counts microseconds, nines' durations \
             seconds); give a unit, e.g. 100us or 2.5ms",
        ));
    }
    parse_duration_ns(s)
}

/// A count with its noun in the right number, for messages: `counted(1, "read", "reads")` is
/// "1 read", `counted(2, "read", "reads")` "2 reads" ("waited 1 times" read as a bug).
pub fn counted(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The largest CPU number accepted in a list; Linux's NR_CPUS maximum is 8192.
pub const CPU_INDEX_MAX: usize = 8191;

/// Parses a CPU list in the kernel's format (`0-3,8,10-11`) into sorted, distinct CPU numbers.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, ParseError> {
    const WHAT: &str = "CPU list";
    let t = s.trim();
    if t.is_empty() {
        return Err(ParseError::new(
            WHAT,
            s,
            "empty; give CPUs like 0-3,8,10-11",
        ));
    }
    let mut cpus = Vec::new();
    for part in t.split(',') {
        let part = part.trim();
        let parse_one = |x: &str| -> Result<usize, ParseError> {
            let x = x.trim();
            // "1,000" is a thousands separator, not CPUs 1 and 0: a CPU number never has a
            // leading zero.
            if x.len() > 1 && x.starts_with('0') {
                return Err(ParseError::new(
                    WHAT,
                    s,
                    format!(
                        "'{x}' has a leading zero; CPU lists are comma-separated CPU numbers like 0-3,8 (no thousands separators)"
                    ),
                ));
            }
            let v: usize = x.parse().map_err(|_| {
                ParseError::new(
                    WHAT,
                    s,
                    format!("'{x}' is not a CPU number; give CPUs like 0-3,8,10-11"),
                )
            })?;
            if v > CPU_INDEX_MAX {
                return Err(ParseError::new(
                    WHAT,
                    s,
                    format!("CPU {v} is above the maximum {CPU_INDEX_MAX}"),
                ));
            }
            Ok(v)
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse_one(a)?, parse_one(b)?);
                if a > b {
                    return Err(ParseError::new(
                        WHAT,
                        s,
                        format!("range {a}-{b} runs backwards"),
                    ));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(parse_one(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPUs as the kernel does (`0-3,8`), the inverse of [`parse_cpu_list`].
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

/// Parses a comma-separated list of percentiles, each in (0, 100]. Order is kept; duplicates
/// are removed.
pub fn parse_percentiles(s: &str) -> Result<Vec<f64>, ParseError> {
    const WHAT: &str = "percentile list";
    let mut out: Vec<f64> = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let ok = !part.is_empty() && part.chars().all(|c| c.is_ascii_digit() || c == '.');
        let v: f64 = if ok {
            part.parse().unwrap_or(f64::NAN)
        } else {
            f64::NAN
        };
        if !(v > 0.0 && v <= 100.0) {
            return Err(ParseError::new(
                WHAT,
                s,
                format!("'{part}' is not a percentile in (0, 100]; give e.g. 50,99.9,99.9999"),
            ));
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The JSON key of a percentile: its plain decimal text (`50`, `99.9`, `99.9999`).
///
/// Rust's shortest round-trip formatting of f64 gives exactly the text a user would type for
/// the values users type.
pub fn percentile_key(p: f64) -> String {
    format!("{p}")
}

/// A latency in nanoseconds with a readable unit: "812 ns", "12.3 µs", "4.10 ms", "1.20 s".
pub fn format_ns(ns: f64) -> String {
    let (v, unit) = if ns.abs() < 1e3 {
        (ns, "ns")
    } else if ns.abs() < 1e6 {
        (ns / 1e3, "µs")
    } else if ns.abs() < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    format!("{} {unit}", sig3(v))
}

/// Three significant digits, trailing zeros dropped: "1.5", "12.3", "812".
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = v.abs().log10().floor() as i32;
    let decimals = (2 - digits).clamp(0, 6) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("4096"), Ok(4096));
        assert_eq!(parse_size_bytes("4k"), Ok(4096));
        assert_eq!(parse_size_bytes("4KiB"), Ok(4096));
        assert_eq!(parse_size_bytes("128K"), Ok(131072));
        assert_eq!(parse_size_bytes("1m"), Ok(1 << 20));
        assert_eq!(parse_size_bytes("2g"), Ok(2 << 30));
        assert_eq!(parse_size_bytes("1t"), Ok(1 << 40));
        assert_eq!(parse_size_bytes("1.5k"), Ok(1536));
        assert!(parse_size_bytes("1.1b").is_err());
        assert!(parse_size_bytes("").is_err());
        assert!(parse_size_bytes("k").is_err());
        assert!(parse_size_bytes("4x").is_err());
        assert!(parse_size_bytes("-4k").is_err());
        assert!(parse_size_bytes("99999999999p").is_err());
        let e = parse_size_bytes("4q").unwrap_err().to_string();
        assert!(e.contains("'4q'") && e.contains("suffix"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("10"), Ok(10_000_000_000));
        assert_eq!(parse_duration_ns("10s"), Ok(10_000_000_000));
        assert_eq!(parse_duration_ns("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration_ns("100us"), Ok(100_000));
        assert_eq!(parse_duration_ns("250ns"), Ok(250));
        assert_eq!(parse_duration_ns("2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration_ns("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration_ns("1.5s"), Ok(1_500_000_000));
        assert!(parse_duration_ns("1.5ns").is_err());
        assert!(parse_duration_ns("s").is_err());
        assert!(parse_duration_ns("10 parsecs").is_err());
    }

    #[test]
    fn cpu_lists() {
        // "1,000" is not CPUs 1 and 0 (issue 15): leading zeros are refused.
        let e = parse_cpu_list("1,000").unwrap_err().to_string();
        assert!(e.contains("leading zero"), "{e}");
        assert!(parse_cpu_list("0-07").is_err());
        assert_eq!(parse_cpu_list("0,10").unwrap(), vec![0, 10]);
        assert_eq!(parse_cpu_list("0"), Ok(vec![0]));
        assert_eq!(parse_cpu_list("4-6,1,5"), Ok(vec![1, 4, 5, 6]));
        assert_eq!(parse_cpu_list(" 0-1 , 3 "), Ok(vec![0, 1, 3]));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("1,,2").is_err());
        assert!(parse_cpu_list("99999").is_err());
        assert_eq!(format_cpu_list(&[4, 5, 6, 1, 8, 9]), "1,4-6,8-9");
    }

    #[test]
    fn percentiles() {
        assert_eq!(
            parse_percentiles("50,99.9,99.9999"),
            Ok(vec![50.0, 99.9, 99.9999])
        );
        assert_eq!(parse_percentiles("100"), Ok(vec![100.0]));
        assert!(parse_percentiles("0").is_err());
        assert!(parse_percentiles("100.1").is_err());
        assert!(parse_percentiles("nan").is_err());
        assert!(parse_percentiles("inf").is_err());
        assert!(parse_percentiles("").is_err());
        let keys: Vec<String> = DEFAULT_PERCENTILES
            .iter()
            .map(|&p| percentile_key(p))
            .collect();
        assert_eq!(
            keys,
            ["50", "90", "99", "99.9", "99.99", "99.999", "99.9999"]
        );
    }

    #[test]
    fn counts_take_their_noun_in_the_right_number() {
        assert_eq!(counted(0, "read", "reads"), "0 reads");
        assert_eq!(counted(1, "read", "reads"), "1 read");
        assert_eq!(counted(2, "flush", "flushes"), "2 flushes");
    }

    proptest! {
        /// A bare non-zero think time is refused whatever its digits; with a unit (or zero) it is
        /// exactly the duration parser's value.
        #[test]
        fn thinktime_needs_a_unit_unless_zero(n in 0u64..10_000_000, unit in 0usize..5) {
            let bare = parse_thinktime_ns(&n.to_string());
            if n == 0 {
                prop_assert_eq!(bare.unwrap(), 0);
            } else {
                let e = bare.unwrap_err().to_string();
                prop_assert!(e.contains("give a unit"), "{}", e);
            }
            let u = ["ns", "us", "ms", "s", "µs"][unit];
            let with_unit = format!("{n}{u}");
            prop_assert_eq!(
                parse_thinktime_ns(&with_unit).unwrap(),
                parse_duration_ns(&with_unit).unwrap()
            );
        }

        #[test]
        fn size_parser_never_panics(s in "\\PC{0,24}") {
            let _ = parse_size_bytes(&s);
        }

        #[test]
        fn duration_parser_never_panics(s in "\\PC{0,24}") {
            let _ = parse_duration_ns(&s);
        }

        #[test]
        fn cpu_parser_never_panics(s in "[0-9,\\- a]{0,24}") {
            let _ = parse_cpu_list(&s);
        }

        #[test]
        fn percentile_parser_never_panics(s in "\\PC{0,24}") {
            let _ = parse_percentiles(&s);
        }

        #[test]
        fn sizes_round_trip(n in 0u64..(1 << 40), unit in 0usize..5) {
            let (suffix, shift) = [("", 0), ("k", 10), ("m", 20), ("g", 30), ("t", 40)][unit];
            let n = n >> shift;
            prop_assert_eq!(parse_size_bytes(&format!("{n}{suffix}")), Ok(n << shift));
        }

        #[test]
        fn durations_round_trip(n in 0u64..1_000_000_000, unit in 0usize..4) {
            let (suffix, mult) = [("ns", 1u64), ("us", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000)][unit];
            prop_assert_eq!(parse_duration_ns(&format!("{n}{suffix}")), Ok(n * mult));
        }

        #[test]
        fn cpu_lists_round_trip(cpus in proptest::collection::vec(0usize..256, 1..40)) {
            let text = format_cpu_list(&cpus);
            let mut expected = cpus.clone();
            expected.sort_unstable();
            expected.dedup();
            prop_assert_eq!(parse_cpu_list(&text), Ok(expected));
        }

        #[test]
        fn percentile_keys_parse_back(p in 0.0001f64..100.0) {
            let key = percentile_key(p);
            prop_assert_eq!(key.parse::<f64>().unwrap(), p);
        }
    }
}
