//! `Timestamp` (Unix milliseconds, UTC) and the `Clock` port.

use std::fmt;
use std::time::Duration;

/// A point in time as milliseconds since the Unix epoch, UTC (the default is the epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Milliseconds since the epoch.
    pub const fn millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch (floor).
    pub const fn unix_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// The start (00:00:00.000 UTC) of this instant's day.
    pub const fn utc_day_start(self) -> Timestamp {
        Timestamp(self.0.div_euclid(DAY_MS) * DAY_MS)
    }

    /// The start of this instant's ISO week: Monday 00:00 UTC.
    pub const fn utc_week_start(self) -> Timestamp {
        let days = self.0.div_euclid(DAY_MS);
        // 1970-01-01 was a Thursday: three days after a Monday.
        Timestamp((days - (days + 3).rem_euclid(7)) * DAY_MS)
    }

    /// The start of this instant's calendar month: its first day, 00:00 UTC.
    pub fn utc_month_start(self) -> Timestamp {
        let (y, m, _) = civil_from_days(self.0.div_euclid(DAY_MS));
        Timestamp(days_from_civil(y, m, 1) * DAY_MS)
    }
}

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

impl fmt::Display for Timestamp {
    /// RFC 3339 with milliseconds, e.g. `2026-11-21T22:28:43.123Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.div_euclid(1000);
        let ms = self.0.rem_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(f, "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
    }
}

impl std::str::FromStr for Timestamp {
    type Err = BadTimestamp;

    /// RFC 3339: `2026-12-31T23:59:59Z`, with optional fraction (kept to the millisecond) and a
    /// `Z` or `±HH:MM` offset. Anything else (a bare date, `yesterday`) is refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_rfc3339(s.as_bytes()).ok_or_else(|| BadTimestamp(s.to_owned()))
    }
}

/// A UTC calendar day, counted in days since 1970-01-01; written `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDay(pub i64);

impl UtcDay {
    /// The day `at` falls on.
    pub const fn of(at: Timestamp) -> UtcDay {
        UtcDay(at.0.div_euclid(DAY_MS))
    }

    /// Its first millisecond.
    pub const fn start(self) -> Timestamp {
        Timestamp(self.0.saturating_mul(DAY_MS))
    }
}

impl fmt::Display for UtcDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = civil_from_days(self.0);
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

impl std::str::FromStr for UtcDay {
    type Err = BadDay;

    /// Exactly `YYYY-MM-DD`, a real date.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b = s.as_bytes();
        let parse = || {
            let (y, m, d) = (digits(b, 0, 4)?, digits(b, 5, 2)?, digits(b, 8, 2)?);
            let shape = b.len() == 10 && b[4] == b'-' && b[7] == b'-';
            (shape && (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m))
                .then(|| UtcDay(days_from_civil(y, m, d)))
        };
        parse().ok_or_else(|| BadDay(s.to_owned()))
    }
}

/// A UTC calendar month, written `YYYY-MM`: from its first day's 00:00 UTC up to (not including)
/// the next month's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcMonth {
    /// Months since 0000-01 (`year * 12 + month - 1`), so that months order and step as numbers.
    index: i64,
}

impl UtcMonth {
    /// The month `at` falls in.
    pub fn of(at: Timestamp) -> UtcMonth {
        let (y, m, _) = civil_from_days(at.0.div_euclid(DAY_MS));
        UtcMonth { index: y * 12 + m - 1 }
    }

    /// Its first millisecond: the first day, 00:00 UTC.
    pub fn start(self) -> Timestamp {
        let (y, m) = (self.index.div_euclid(12), self.index.rem_euclid(12) + 1);
        Timestamp(days_from_civil(y, m, 1).saturating_mul(DAY_MS))
    }

    /// The month after it (its end is that month's start).
    pub const fn next(self) -> UtcMonth {
        UtcMonth { index: self.index + 1 }
    }

    /// Its end: the next month's first millisecond, which the month does not include.
    pub fn end(self) -> Timestamp {
        self.next().start()
    }
}

impl fmt::Display for UtcMonth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.index.div_euclid(12), self.index.rem_euclid(12) + 1)
    }
}

impl std::str::FromStr for UtcMonth {
    type Err = BadMonth;

    /// Exactly `YYYY-MM` (four-digit year, month 01 to 12).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b = s.as_bytes();
        let parse = || {
            let (y, m) = (digits(b, 0, 4)?, digits(b, 5, 2)?);
            (b.len() == 7 && b[4] == b'-' && (1..=12).contains(&m)).then_some(UtcMonth { index: y * 12 + m - 1 })
        };
        parse().ok_or_else(|| BadMonth(s.to_owned()))
    }
}

/// Text that is not a `YYYY-MM` month.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a month such as 2026-11 (YYYY-MM)")]
pub struct BadMonth(pub String);

/// Text that is not a `YYYY-MM-DD` date.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a date such as 2026-11-27")]
pub struct BadDay(pub String);

/// Text that is not an RFC 3339 date-time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an RFC 3339 date-time such as 2026-12-31T23:59:59Z")]
pub struct BadTimestamp(pub String);

fn digits(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let part = b.get(at..at + n)?;
    part.iter().try_fold(0_i64, |acc, c| c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0')))
}

fn parse_rfc3339(b: &[u8]) -> Option<Timestamp> {
    let (y, mo, d) = (digits(b, 0, 4)?, digits(b, 5, 2)?, digits(b, 8, 2)?);
    let (h, mi, sec) = (digits(b, 11, 2)?, digits(b, 14, 2)?, digits(b, 17, 2)?);
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(i, c)| b.get(i) != Some(&c)) || !matches!(b.get(10), Some(b'T' | b't')) {
        return None;
    }
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let mut at = 19;
    let mut ms = 0_i64;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 3 {
                ms = ms * 10 + i64::from(b[at] - b'0');
            }
            at += 1;
        }
        let taken = (at - start).min(3);
        if taken == 0 {
            return None;
        }
        ms *= 10_i64.pow(u32::try_from(3 - taken).ok()?);
    }
    let offset_secs = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (digits(b, at + 1, 2)?, digits(b, at + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_secs;
    Some(Timestamp(secs * 1000 + ms))
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A proleptic Gregorian (year, month, day) to days since 1970-01-01 (inverse of `civil_from_days`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `d` in whole milliseconds (rounded down), saturating at `i64::MAX`: the one conversion of a
/// `Duration` to the milliseconds [`Timestamp`]s, stored ages and counters are kept in. Never
/// negative, so `.unsigned_abs()` gives it as a `u64` where a count needs one.
pub fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Where the current time comes from; tests may substitute a fixed clock.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(duration_millis).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn utc_days_parse_and_print() {
        assert_eq!("1970-01-01".parse::<UtcDay>(), Ok(UtcDay(0)));
        assert_eq!("2024-02-29".parse::<UtcDay>().map(|d| d.to_string()), Ok("2024-02-29".to_owned()));
        for bad in ["2023-02-29", "2026-13-01", "2026-1-01", "2026-01-01T00:00:00Z", "", "20260101", "2026-00-10"] {
            assert!(bad.parse::<UtcDay>().is_err(), "{bad}");
        }
        let at: Timestamp = "2026-11-27T23:59:59.999Z".parse().expect("time");
        assert_eq!(UtcDay::of(at).to_string(), "2026-11-27");
        assert_eq!(UtcDay::of(at).start().to_string(), "2026-11-27T00:00:00.000Z");
    }

    use super::*;

    #[test]
    fn utc_months_parse_print_and_bound() {
        let month = |s: &str| s.parse::<UtcMonth>();
        let at = |s: &str| s.parse::<Timestamp>().expect(s);
        let nov = month("2026-11").expect("month");
        assert_eq!(nov.to_string(), "2026-11");
        assert_eq!(nov.start(), at("2026-11-01T00:00:00Z"));
        assert_eq!(nov.end(), at("2026-12-01T00:00:00Z"));
        assert_eq!(month("2026-12").map(|m| m.end()), Ok(at("2027-01-01T00:00:00Z")));
        assert_eq!(month("2024-02").map(|m| m.end().0 - m.start().0), Ok(29 * DAY_MS));
        assert_eq!(month("1970-01").map(UtcMonth::start), Ok(Timestamp(0)));
        assert_eq!(month("1969-12").map(|m| (m.to_string(), m.end())), Ok(("1969-12".to_owned(), Timestamp(0))));
        // The last millisecond of a month is in it; the next one starts the next month.
        assert_eq!(UtcMonth::of(Timestamp(nov.end().0 - 1)), nov);
        assert_eq!(UtcMonth::of(nov.end()), nov.next());
        assert!(nov < nov.next());
        for bad in
            ["2026-13", "2026-00", "2026-1", "26-11", "2026/11", "2026-11-01", "", "2026-11 ", "+026-11", "２026-11"]
        {
            assert_eq!(month(bad), Err(BadMonth(bad.to_owned())), "{bad}");
        }
    }

    #[test]
    fn utc_period_starts() {
        let at = |s: &str| s.parse::<Timestamp>().expect(s);
        // Thursday 2026-11-26, 16:12:29.5.
        let now = at("2026-11-26T16:12:29.500Z");
        assert_eq!(now.utc_day_start(), at("2026-11-26T00:00:00Z"));
        assert_eq!(now.utc_week_start(), at("2026-11-23T00:00:00Z"));
        assert_eq!(now.utc_month_start(), at("2026-11-01T00:00:00Z"));
        // Each boundary is its own start; the millisecond before belongs to the previous period.
        let monday = at("2026-11-23T00:00:00Z");
        assert_eq!(monday.utc_week_start(), monday);
        assert_eq!(Timestamp(monday.0 - 1).utc_week_start(), at("2026-11-16T00:00:00Z"));
        assert_eq!(Timestamp(monday.0 - 1).utc_day_start(), at("2026-11-22T00:00:00Z"));
        let march = at("2024-03-01T00:00:00Z");
        assert_eq!(march.utc_month_start(), march);
        assert_eq!(Timestamp(march.0 - 1).utc_month_start(), at("2024-02-01T00:00:00Z"));
        assert_eq!(Timestamp(-1).utc_day_start(), at("1969-12-31T00:00:00Z"));
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Timestamp(951_782_400_000).to_string(), "2000-02-29T00:00:00.000Z");
        assert_eq!(Timestamp(1_795_300_123_456).to_string(), "2026-11-21T22:28:43.456Z");
        assert_eq!(Timestamp(-1).to_string(), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_rfc3339() {
        let parse = |s: &str| s.parse::<Timestamp>();
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(Timestamp(0)));
        assert_eq!(parse("2026-11-21T22:28:43.456Z"), Ok(Timestamp(1_795_300_123_456)));
        assert_eq!(parse("2026-11-21T22:28:43.4567Z"), Ok(Timestamp(1_795_300_123_456)));
        assert_eq!(parse("2026-11-21T22:28:43.4Z"), Ok(Timestamp(1_795_300_123_400)));
        assert_eq!(parse("2026-11-22T00:28:43.456+02:00"), Ok(Timestamp(1_795_300_123_456)));
        assert_eq!(parse("2026-11-21T21:28:43.456-01:00"), Ok(Timestamp(1_795_300_123_456)));
        assert_eq!(parse("2000-02-29T00:00:00Z"), Ok(Timestamp(951_782_400_000)));
        for t in [-1, 0, 951_782_400_000, 1_795_300_123_456, 4_102_444_799_999] {
            assert_eq!(parse(&Timestamp(t).to_string()), Ok(Timestamp(t)));
        }
        for bad in [
            "yesterday",
            "",
            "2026-11-21",
            "2026-11-21T22:28:43",
            "2026-11-21 22:28:43Z",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-11-21T24:00:00Z",
            "2026-11-21T22:28:43.Z",
            "2026-11-21T22:28:43Zjunk",
            "2026-11-21T22:28:43+2:00",
        ] {
            assert_eq!(parse(bad), Err(BadTimestamp(bad.to_owned())), "{bad}");
        }
    }

    #[test]
    fn durations_in_whole_milliseconds_saturating() {
        assert_eq!(duration_millis(Duration::ZERO), 0);
        assert_eq!(duration_millis(Duration::from_micros(1_999)), 1);
        assert_eq!(duration_millis(Duration::from_secs(86_400)), 86_400_000);
        let largest = Duration::from_millis(u64::try_from(i64::MAX).unwrap_or(u64::MAX));
        assert_eq!(duration_millis(largest), i64::MAX);
        assert_eq!(duration_millis(largest + Duration::from_millis(1)), i64::MAX);
        assert_eq!(duration_millis(Duration::MAX), i64::MAX);
    }
}
