//! The HdrHistogram interval log both drivers write (`--hdr-log`): one histogram per target and
//! direction per interval, tagged `<target>.<read|write>` ([`crate::stats::hdr_tag`]), V2 deflate,
//! timestamps in seconds since the run's time origin. One writer, so a simulated run's log and a
//! real one's read the same everywhere.
//!
//! The layout is the reference (Java) `HistogramLogWriter`'s, so HdrHistogram's
//! `HistogramLogProcessor`, the Python `hdrh` reader and the Rust crate read it without caveats:
//!
//! ```text
//! #<comment>
//! #[Histogram log format version 1.3]
//! #[StartTime: 1700000000.000 (seconds since epoch)]
//! #[BaseTime: 1700000000.000 (seconds since epoch)]
//! #[MaxValueDivisor: 1000000.000]
//! "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//! Tag=nvme0n1.read,0.000,1.000,0.812,HISTFAAAA...
//! ```
//!
//! Values are nanoseconds; `Interval_Max` is divided by 10^6 (milliseconds), as the reference
//! writer's default `maxValueUnitRatio` does (its readers scale by the same ratio). A histogram
//! with no I/O is not written, and an interval shorter than half the longest one seen for its tag
//! (the sliver between the last boundary and the end of the run) is merged into the interval
//! before it, so no entry's rate rests on a few I/Os and a length rounded to milliseconds.
//!
//! To merge a sliver, each tag's latest interval is held back, as its finished text line, until
//! the next one arrives: the writer keeps one short line per tag, not a histogram.

use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};

use crate::op::Op;
use crate::stats::{DeviceRecorder, hdr_tag};

/// The reference writer's `maxValueUnitRatio`: interval maxima in milliseconds of ns values.
pub const MAX_VALUE_DIVISOR: f64 = 1_000_000.0;
/// The format version line of the reference writer.
pub const FORMAT_VERSION_LINE: &str = "#[Histogram log format version 1.3]";
/// The legend line of the reference writer.
pub const LEGEND_LINE: &str =
    "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"";

/// One tag's held-back interval.
struct Held {
    start_ns: u64,
    len_ns: u64,
    line: Vec<u8>,
}

/// An interval log being written.
pub struct IntervalLog<W: Write> {
    out: W,
    serializer: V2DeflateSerializer,
    tags: Vec<[String; 2]>,
    ops: Vec<Op>,
    /// Per target and direction: the interval held back, and the longest interval seen.
    held: Vec<[Option<Held>; 2]>,
    len_ns_max: Vec<[u64; 2]>,
}

impl<W: Write> IntervalLog<W> {
    /// Writes the log's header: `comment`, the format version, the start and base time
    /// `start_unix_ns` (0 for a simulated run, whose times are virtual), the max divisor and the
    /// legend. `names` are the targets; `ops` the directions the run does (only those get a
    /// histogram).
    pub fn start(
        mut out: W,
        comment: &str,
        start_unix_ns: u64,
        names: &[String],
        ops: &[Op],
    ) -> io::Result<Self> {
        let mut serializer = V2DeflateSerializer::new();
        let start = UNIX_EPOCH + Duration::from_nanos(start_unix_ns);
        IntervalLogWriterBuilder::new()
            .add_comment(comment)
            .add_comment(&FORMAT_VERSION_LINE[1..])
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(MAX_VALUE_DIVISOR)
            .begin_log_with(&mut out, &mut serializer)?;
        writeln!(out, "{LEGEND_LINE}")?;
        let tags: Vec<[String; 2]> = names
            .iter()
            .map(|n| [hdr_tag(n, Op::Read), hdr_tag(n, Op::Write)])
            .collect();
        Ok(IntervalLog {
            out,
            serializer,
            held: tags.iter().map(|_| [None, None]).collect(),
            len_ns_max: vec![[0; 2]; tags.len()],
            tags,
            ops: ops.to_vec(),
        })
    }

    /// The text line of one interval.
    fn line(
        &mut self,
        tag: &str,
        hist: &Histogram<u64>,
        start_ns: u64,
        len_ns: u64,
    ) -> io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(256);
        let mut w = IntervalLogWriterBuilder::new()
            .with_max_value_divisor(MAX_VALUE_DIVISOR)
            .begin_log_with(&mut buf, &mut self.serializer)?;
        w.write_histogram(
            hist,
            Duration::from_nanos(start_ns),
            Duration::from_nanos(len_ns),
            Tag::new(tag),
        )
        .map_err(|e| io::Error::other(format!("HdrHistogram log: {e}")))?;
        // The crate's writer repeats the divisor header each time it starts; keep the entry.
        if buf.starts_with(b"#")
            && let Some(nl) = buf.iter().position(|&b| b == b'\n')
        {
            buf.drain(..=nl);
        }
        Ok(buf)
    }

    /// Target `target`'s histograms of the interval `[from_ns, from_ns + len_ns)` (nanoseconds
    /// since the time origin). Empty histograms are skipped; a sliver joins the held interval.
    pub fn write(
        &mut self,
        target: usize,
        rec: &DeviceRecorder,
        from_ns: u64,
        len_ns: u64,
    ) -> io::Result<()> {
        assert!(target < self.tags.len(), "target {target} out of range");
        for k in 0..self.ops.len() {
            let op = self.ops[k];
            let d = op.index();
            let hist = &rec.dirs[d].hist;
            if hist.is_empty() {
                continue;
            }
            let tag = self.tags[target][d].clone();
            let sliver = len_ns < self.len_ns_max[target][d] / 2;
            self.len_ns_max[target][d] = self.len_ns_max[target][d].max(len_ns);
            if sliver && let Some(held) = self.held[target][d].take() {
                let mut merged = decode_line(&held.line)?;
                merged
                    .add(hist)
                    .map_err(|e| io::Error::other(format!("HdrHistogram log: {e}")))?;
                let end_ns = (from_ns + len_ns).max(held.start_ns + held.len_ns);
                let len = end_ns - held.start_ns;
                let line = self.line(&tag, &merged, held.start_ns, len)?;
                self.held[target][d] = Some(Held {
                    start_ns: held.start_ns,
                    len_ns: len,
                    line,
                });
                continue;
            }
            let line = self.line(&tag, hist, from_ns, len_ns)?;
            if let Some(prev) = self.held[target][d].replace(Held {
                start_ns: from_ns,
                len_ns,
                line,
            }) {
                self.out.write_all(&prev.line)?;
            }
        }
        Ok(())
    }

    /// Writes what is held back, flushes and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        for held in self.held.iter_mut().flat_map(|h| h.iter_mut()) {
            if let Some(h) = held.take() {
                self.out.write_all(&h.line)?;
            }
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The histogram of one written interval line.
fn decode_line(line: &[u8]) -> io::Result<Histogram<u64>> {
    let bad = |what: String| io::Error::other(format!("HdrHistogram log: held interval: {what}"));
    let entry = IntervalLogIterator::new(line)
        .next()
        .ok_or_else(|| bad("missing".into()))?
        .map_err(|e| bad(describe_log_error(&e)))?;
    let LogEntry::Interval(h) = entry else {
        return Err(bad("not an interval".into()));
    };
    decode_histogram(h.encoded_histogram()).map_err(bad)
}

/// An interval-log parse error in words (hdrhistogram's own Debug text, `ParseError { offset: 0 }`,
/// is not a message).
pub fn describe_log_error(
    e: &hdrhistogram::serialization::interval_log::LogIteratorError,
) -> String {
    match e {
        hdrhistogram::serialization::interval_log::LogIteratorError::ParseError { offset } => {
            format!("not an HdrHistogram interval-log line (at byte {offset})")
        }
    }
}

/// The histogram of an interval entry's encoded (base64 V2) text.
pub fn decode_histogram(encoded: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("bad base64: {e}"))?;
    Deserializer::new()
        .deserialize(&mut io::Cursor::new(bytes))
        .map_err(|e| format!("bad histogram: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(reads: &[u64], writes: &[u64]) -> DeviceRecorder {
        let mut r = DeviceRecorder::new();
        for &v in reads {
            r.record(Op::Read, v, 4096);
        }
        for &v in writes {
            r.record(Op::Write, v, 4096);
        }
        r
    }

    /// (tag, start s, length s, max field, count) of every interval in a log.
    fn entries(text: &[u8]) -> Vec<(String, f64, f64, f64, u64)> {
        IntervalLogIterator::new(text)
            .filter_map(|e| match e.unwrap() {
                LogEntry::Interval(h) => {
                    let hist = decode_histogram(h.encoded_histogram()).unwrap();
                    Some((
                        h.tag().unwrap().as_str().to_string(),
                        h.start_timestamp().as_secs_f64(),
                        h.duration().as_secs_f64(),
                        h.max(),
                        hist.len(),
                    ))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn writes_one_tagged_histogram_per_target_and_direction() {
        let names = vec!["zram0".to_string(), "my disk".to_string()];
        let mut log = IntervalLog::start(Vec::new(), "test", 0, &names, &[Op::Read]).unwrap();
        log.write(1, &rec(&[1_000, 2_000], &[]), 1_000_000_000, 500_000_000)
            .unwrap();
        let e = entries(&log.finish().unwrap());
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].0.as_str(), e[0].1), ("my_disk.read", 1.0));
        for name in ["zram3", "my file,x", "a=b c"] {
            let t = hdr_tag(name, Op::Write);
            assert!(Tag::new(&t).is_some(), "{t}");
        }
    }

    #[test]
    fn header_max_unit_empty_intervals_and_slivers_follow_the_reference_writer() {
        let names = vec!["a".to_string(), "b".to_string()];
        let ops = [Op::Read, Op::Write];
        let mut log = IntervalLog::start(
            Vec::new(),
            "nines test",
            1_700_000_000 * 1_000_000_000,
            &names,
            &ops,
        )
        .unwrap();
        let s = 1_000_000_000;
        log.write(0, &rec(&[1_000, 2_500_000], &[]), 0, s).unwrap();
        // b has no I/O in the first interval: nothing is written for it.
        log.write(1, &rec(&[], &[]), 0, s).unwrap();
        log.write(0, &rec(&[3_000], &[]), s, s).unwrap();
        log.write(1, &rec(&[5_000], &[9_000]), s, s).unwrap();
        // A 10 ms sliver at the end joins a's previous interval.
        log.write(0, &rec(&[7_000, 8_000], &[]), 2 * s, 10_000_000)
            .unwrap();
        let text = log.finish().unwrap();
        let t = String::from_utf8(text.clone()).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "#nines test");
        assert_eq!(lines[1], FORMAT_VERSION_LINE);
        assert!(lines[2].starts_with("#[StartTime: 1700000000.000"), "{t}");
        assert!(lines[3].starts_with("#[BaseTime: 1700000000.000"), "{t}");
        assert!(lines[4].starts_with("#[MaxValueDivisor: 1000000"), "{t}");
        assert_eq!(lines[5], LEGEND_LINE);
        assert!(
            lines[6..].iter().all(|l| l.starts_with("Tag=")),
            "only entries after the legend: {t}"
        );
        let e = entries(&text);
        assert_eq!(e.len(), 4, "{t}");
        // Max in milliseconds: 2.5 ms (within the bucket's 0.1%).
        assert_eq!(e[0].0, "a.read");
        assert!((e[0].3 - 2.5).abs() < 0.01, "{e:?}");
        assert_eq!(e[0].4, 2);
        let a2 = e.iter().find(|x| x.0 == "a.read" && x.1 == 1.0).unwrap();
        assert!((a2.2 - 1.01).abs() < 1e-9, "sliver merged: {e:?}");
        assert_eq!(a2.4, 3);
        assert!(!e.iter().any(|x| x.1 >= 2.0), "no sliver entry: {e:?}");
        let b: Vec<_> = e.iter().filter(|x| x.0.starts_with("b.")).collect();
        assert_eq!(
            b.len(),
            2,
            "b's read and write of the second interval: {e:?}"
        );
        assert!(b.iter().all(|x| x.1 == 1.0 && x.4 == 1));
    }

    #[test]
    fn a_run_shorter_than_half_an_interval_is_kept() {
        let mut log =
            IntervalLog::start(Vec::new(), "c", 0, &["x".to_string()], &[Op::Write]).unwrap();
        log.write(0, &rec(&[], &[10]), 0, 100_000_000).unwrap();
        let e = entries(&log.finish().unwrap());
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].4, 1);
    }
}
