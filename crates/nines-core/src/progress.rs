//! The live progress line both drivers print on a terminal (`profile` in real time, `sim` in
//! virtual time): where the run is against its total, whether it is still in the ramp, the time
//! left, and the tail so far. Only the text is built here; the drivers decide when to print it.

/// What the progress line shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProgressView<'a> {
    /// What is counted: "" for wall time (profile), "simulated" for virtual time (sim).
    pub clock: &'a str,
    /// Time elapsed in that clock, ns.
    pub elapsed_ns: u64,
    /// Ramp plus measured time when the run ends by time, ns.
    pub total_ns: Option<u64>,
    /// The ramp's length, ns (0: no ramp).
    pub ramp_ns: u64,
    /// Wall seconds the run has taken so far, for the time left (sim: simulation is not real
    /// time; profile: the same as elapsed).
    pub wall_s: f64,
    /// I/Os per second of the last interval (profile), or I/Os issued so far (sim).
    pub iops: Option<f64>,
    pub ios: Option<u64>,
    /// p99 of every I/O so far.
    pub p99_ns: Option<u64>,
    /// The device with the highest p99.99 so far, and that p99.99.
    pub worst: Option<(&'a str, u64)>,
}

/// "812 ns", "45.1 us", "3.20 ms", "1.50 s".
pub fn short_ns(ns: u64) -> String {
    let v = ns as f64;
    if v < 1e3 {
        format!("{ns} ns")
    } else if v < 1e6 {
        format!("{:.1} us", v / 1e3)
    } else if v < 1e9 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// Seconds as "42 s", "3 min 05 s", "1 h 02 min".
pub fn short_s(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    }
}

/// Wall seconds left, from the share of the total done so far; None until some of it is done.
pub fn eta_s(elapsed_ns: u64, total_ns: u64, wall_s: f64) -> Option<f64> {
    if elapsed_ns == 0 || total_ns == 0 || wall_s <= 0.0 {
        return None;
    }
    let done = (elapsed_ns as f64 / total_ns as f64).min(1.0);
    Some(wall_s * (1.0 - done) / done)
}

/// The line, without the carriage return and erase the caller prints before it.
pub fn line(v: &ProgressView) -> String {
    let clock = if v.clock.is_empty() {
        String::new()
    } else {
        format!(" {}", v.clock)
    };
    let mut out = match v.total_ns {
        Some(total) => {
            // In-flight I/Os drain past the end: shown as the end.
            let elapsed = v.elapsed_ns.min(total);
            let pct = elapsed as f64 / total.max(1) as f64 * 100.0;
            let mut s = format!(
                "{:.1} of {:.1} s{clock} ({pct:.0}%)",
                elapsed as f64 * 1e-9,
                total as f64 * 1e-9
            );
            if let Some(eta) = eta_s(v.elapsed_ns, total, v.wall_s) {
                s.push_str(&format!(", {} left", short_s(eta)));
            }
            s
        }
        None => format!("{:.1} s{clock}", v.elapsed_ns as f64 * 1e-9),
    };
    if v.ramp_ns > 0 && v.elapsed_ns < v.ramp_ns {
        out.push_str(&format!(
            "  RAMP (not measured, {:.1} s more)",
            (v.ramp_ns - v.elapsed_ns) as f64 * 1e-9
        ));
    }
    if let Some(iops) = v.iops {
        out.push_str(&format!("  {iops:.0} IOPS"));
    }
    if let Some(ios) = v.ios {
        out.push_str(&format!("  {ios} I/Os"));
    }
    if let Some(p) = v.p99_ns {
        out.push_str(&format!("  p99 {}", short_ns(p)));
    }
    if let Some((name, p)) = v.worst {
        out.push_str(&format!("  worst p99.99 {} {name}", short_ns(p)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_total_ramp_time_left_and_the_worst_device() {
        let v = ProgressView {
            clock: "",
            elapsed_ns: 1_000_000_000,
            total_ns: Some(12_000_000_000),
            ramp_ns: 2_000_000_000,
            wall_s: 1.0,
            iops: Some(123_456.4),
            ios: None,
            p99_ns: Some(45_100),
            worst: Some(("nvme3", 812_000)),
        };
        assert_eq!(
            line(&v),
            "1.0 of 12.0 s (8%), 11 s left  RAMP (not measured, 1.0 s more)  123456 IOPS  \
             p99 45.1 us  worst p99.99 812.0 us nvme3"
        );
        // Simulated time runs at its own speed: 2 of 10 s simulated in 30 wall seconds leaves
        // 2 minutes.
        let v = ProgressView {
            clock: "simulated",
            elapsed_ns: 2_000_000_000,
            total_ns: Some(10_000_000_000),
            wall_s: 30.0,
            ios: Some(5000),
            ..ProgressView::default()
        };
        assert_eq!(
            line(&v),
            "2.0 of 10.0 s simulated (20%), 2 min 00 s left  5000 I/Os"
        );
        // An end by I/O count: elapsed only.
        let v = ProgressView {
            elapsed_ns: 3_500_000_000,
            ..ProgressView::default()
        };
        assert_eq!(line(&v), "3.5 s");
        // Draining past the end shows the end.
        let v = ProgressView {
            elapsed_ns: 3_600_000_000,
            total_ns: Some(2_500_000_000),
            wall_s: 2.0,
            ..ProgressView::default()
        };
        assert_eq!(line(&v), "2.5 of 2.5 s (100%), 0 s left");
        assert_eq!(eta_s(0, 10, 1.0), None);
        assert_eq!(short_s(3725.0), "1 h 02 min");
        assert_eq!(short_ns(1_500_000_000), "1.50 s");
    }
}
