//! Reading the interval histograms of `nines profile --hdr-log` (an HdrHistogram interval log,
//! one tag `<device>.<read|write>` per device and direction) into per-device time series.

use std::collections::BTreeMap;

use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use nines_core::op::Op;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum IntervalError {
    #[error("interval log entry {line}: {what}; is this a `nines profile --hdr-log` file?")]
    Parse { line: usize, what: String },
}

/// One interval of one device and direction.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalPoint {
    /// Start and length of the interval, seconds since the log's base time.
    pub start_s: f64,
    pub duration_s: f64,
    pub ios: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// The intervals of one tag, in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalSeries {
    /// The device name as written in the tag.
    pub device: String,
    pub op: Op,
    pub points: Vec<IntervalPoint>,
}

/// Parses a whole interval log. Untagged histograms are kept under device "" and op read.
pub fn parse_interval_log(text: &[u8]) -> Result<Vec<IntervalSeries>, IntervalError> {
    let mut by_tag: BTreeMap<(String, usize), Vec<IntervalPoint>> = BTreeMap::new();
    for (idx, entry) in IntervalLogIterator::new(text).enumerate() {
        let entry = entry.map_err(|e| IntervalError::Parse {
            line: idx + 1,
            what: nines_core::hdrlog::describe_log_error(&e),
        })?;
        let LogEntry::Interval(h) = entry else {
            continue;
        };
        let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
        let (device, op) = match tag.rsplit_once('.') {
            Some((d, "write")) => (d.to_string(), Op::Write),
            Some((d, "read")) => (d.to_string(), Op::Read),
            _ => (tag.clone(), Op::Read),
        };
        let hist = nines_core::hdrlog::decode_histogram(h.encoded_histogram()).map_err(|what| {
            IntervalError::Parse {
                line: idx + 1,
                what,
            }
        })?;
        let ios = hist.len();
        let point = IntervalPoint {
            start_s: h.start_timestamp().as_secs_f64(),
            duration_s: h.duration().as_secs_f64(),
            ios,
            p50_ns: if ios > 0 {
                hist.value_at_quantile(0.5)
            } else {
                0
            },
            p99_ns: if ios > 0 {
                hist.value_at_quantile(0.99)
            } else {
                0
            },
            max_ns: if ios > 0 { hist.max() } else { 0 },
        };
        by_tag.entry((device, op.index())).or_default().push(point);
    }
    Ok(by_tag
        .into_iter()
        .map(|((device, op), mut points)| {
            points.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
            IntervalSeries {
                device,
                op: Op::ALL[op],
                points,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::V2DeflateSerializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use std::time::Duration;

    #[test]
    fn round_trip_through_the_hdrhistogram_writer() {
        let mut out = Vec::new();
        let mut ser = V2DeflateSerializer::new();
        {
            let mut w = IntervalLogWriterBuilder::new()
                .with_base_time(std::time::UNIX_EPOCH)
                .begin_log_with(&mut out, &mut ser)
                .unwrap();
            for i in 0..5u64 {
                for (tag, base) in [("zram0.read", 10_000u64), ("zram1.write", 50_000)] {
                    let mut h = nines_core::stats::new_latency_histogram();
                    for k in 0..100 * (i + 1) {
                        h.record(base + k).unwrap();
                    }
                    w.write_histogram(
                        &h,
                        Duration::from_secs(i),
                        Duration::from_secs(1),
                        Tag::new(tag),
                    )
                    .unwrap();
                }
            }
        }
        let series = parse_interval_log(&out).unwrap();
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].device, "zram0");
        assert_eq!(series[0].op, Op::Read);
        assert_eq!(series[1].device, "zram1");
        assert_eq!(series[1].op, Op::Write);
        let p = &series[0].points;
        assert_eq!(p.len(), 5);
        assert_eq!(p[2].ios, 300);
        assert!((p[2].start_s - 2.0).abs() < 1e-3);
        assert!((p[2].duration_s - 1.0).abs() < 1e-3);
        assert!(p[2].max_ns >= 10_299 && p[2].max_ns <= 10_310);
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let e = parse_interval_log(b"0.1,1.0,5.0,@@@notbase64\n").unwrap_err();
        assert!(e.to_string().contains("entry 1"), "{e}");
    }
}
