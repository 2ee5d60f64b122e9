//! The HdrHistogram interval log both drivers write (`--hdr-log`): one histogram per target and
//! direction per interval, tagged `<target>.<read|write>` ([`crate::stats::hdr_tag`]), in the
//! standard interval-log format (V2 deflate), timestamps in seconds since the run's time origin.
//! One writer, so a simulated run's log and a real one's read the same everywhere.

use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};

use crate::op::Op;
use crate::stats::{DeviceRecorder, hdr_tag};

/// An interval log being written.
pub struct IntervalLog<W: Write> {
    out: W,
    serializer: V2DeflateSerializer,
    tags: Vec<[String; 2]>,
    ops: Vec<Op>,
}

impl<W: Write> IntervalLog<W> {
    /// Writes the log's header: `comment`, and the start and base time `start_unix_ns` (0 for a
    /// simulated run, whose times are virtual). `names` are the targets; `ops` the directions
    /// the run does (only those get a histogram).
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
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut out, &mut serializer)?;
        let tags = names
            .iter()
            .map(|n| [hdr_tag(n, Op::Read), hdr_tag(n, Op::Write)])
            .collect();
        Ok(IntervalLog {
            out,
            serializer,
            tags,
            ops: ops.to_vec(),
        })
    }

    /// Writes target `target`'s histograms of the interval `[from_ns, from_ns + len_ns)`
    /// (nanoseconds since the time origin).
    pub fn write(
        &mut self,
        target: usize,
        rec: &DeviceRecorder,
        from_ns: u64,
        len_ns: u64,
    ) -> io::Result<()> {
        let mut w =
            IntervalLogWriterBuilder::new().begin_log_with(&mut self.out, &mut self.serializer)?;
        let from = Duration::from_nanos(from_ns);
        let len = Duration::from_nanos(len_ns);
        for &op in &self.ops {
            let tag = &self.tags[target][op.index()];
            w.write_histogram(&rec.dirs[op.index()].hist, from, len, Tag::new(tag))
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok(())
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    #[test]
    fn writes_one_tagged_histogram_per_target_and_direction() {
        let mut rec = DeviceRecorder::new();
        rec.record(Op::Read, 1_000, 4096);
        rec.record(Op::Read, 2_000, 4096);
        let names = vec!["zram0".to_string(), "my disk".to_string()];
        let mut log = IntervalLog::start(Vec::new(), "test", 0, &names, &[Op::Read]).unwrap();
        log.write(1, &rec, 1_000_000_000, 500_000_000).unwrap();
        let bytes = log.finish().unwrap();
        let mut tags = Vec::new();
        for e in IntervalLogIterator::new(&bytes) {
            if let LogEntry::Interval(h) = e.unwrap() {
                tags.push(h.tag().map(|t| t.as_str().to_string()));
                assert_eq!(h.start_timestamp(), Duration::from_secs(1));
            }
        }
        assert_eq!(tags, [Some("my_disk.read".to_string())]);
        for name in ["zram3", "my file,x", "a=b c"] {
            let t = hdr_tag(name, Op::Write);
            assert!(Tag::new(&t).is_some(), "{t}");
        }
    }
}
