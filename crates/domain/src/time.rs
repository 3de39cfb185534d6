//! `Timestamp` (Unix milliseconds, UTC) and the `Clock` port.

use std::fmt;
use std::time::Duration;

/// A point in time as milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
}

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
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Timestamp(951_782_400_000).to_string(), "2000-02-29T00:00:00.000Z");
        assert_eq!(Timestamp(1_795_300_123_456).to_string(), "2026-11-21T22:28:43.456Z");
        assert_eq!(Timestamp(-1).to_string(), "1969-12-31T23:59:59.999Z");
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
