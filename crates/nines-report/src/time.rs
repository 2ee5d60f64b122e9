//! Wall-clock dates for reports, in UTC (a report is read on other hosts than the one it was
//! taken on, so it names its zone rather than guessing the reader's).

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01: Howard Hinnant's
/// `civil_from_days`, exact for the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    weekday: usize,
    hour: u64,
    minute: u64,
    second: u64,
}

fn parts(unix_s: u64) -> Parts {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    let (year, month, day) = civil_from_days(days);
    Parts {
        year,
        month,
        day,
        weekday: (days % 7) as usize,
        hour: secs / 3600,
        minute: secs / 60 % 60,
        second: secs % 60,
    }
}

/// C's `ctime` text without the newline, in UTC: `Tue Nov 14 22:13:20 2023` (fio's `time`).
pub fn ctime_utc(unix_s: u64) -> String {
    let p = parts(unix_s);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        DAYS[p.weekday],
        MONTHS[p.month as usize - 1],
        p.day,
        p.hour,
        p.minute,
        p.second,
        p.year
    )
}

/// ISO-like date and time in UTC: `2023-11-14 22:13:20 UTC`.
pub fn datetime_utc(unix_s: u64) -> String {
    let p = parts(unix_s);
    format!(
        "{}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        p.year, p.month, p.day, p.hour, p.minute, p.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(ctime_utc(0), "Thu Jan  1 00:00:00 1970");
        assert_eq!(ctime_utc(1_700_000_000), "Tue Nov 14 22:13:20 2023");
        assert_eq!(datetime_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(datetime_utc(4_102_444_799), "2099-12-31 23:59:59 UTC");
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        // Walk 1970..2200 day by day: dates advance by one, months and leap years roll right.
        let mut prev = civil_from_days(0);
        for d in 1..84_000i64 {
            let cur = civil_from_days(d);
            let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let mdays = [
                31,
                if leap(prev.0) { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            let expected = if prev.2 < mdays[prev.1 as usize - 1] {
                (prev.0, prev.1, prev.2 + 1)
            } else if prev.1 < 12 {
                (prev.0, prev.1 + 1, 1)
            } else {
                (prev.0 + 1, 1, 1)
            };
            assert_eq!(cur, expected, "day {d}");
            prev = cur;
        }
    }
}
