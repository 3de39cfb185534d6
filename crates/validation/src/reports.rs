//! The statement, revenue and export queries: a month (`YYYY-MM`, never one that has not begun)
//! and a range of UTC days (`from`, `to`, as the usage report takes them).

use domain::{Timestamp, UtcDay, UtcMonth};

use crate::ValidationError;
use crate::manage::day_range;

/// A checked export range: UTC days, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayRange {
    /// First day.
    pub from: UtcDay,
    /// Last day.
    pub to: UtcDay,
}

impl DayRange {
    /// Its first millisecond.
    pub const fn start_ms(&self) -> i64 {
        self.from.start().millis()
    }

    /// The first millisecond after it: the day after `to` begins.
    pub const fn end_ms(&self) -> i64 {
        UtcDay(self.to.0 + 1).start().millis()
    }
}

/// A statement's month: `YYYY-MM`, UTC, that has begun by `now` (the month in progress is
/// allowed; a later one is refused).
pub fn statement_month(text: &str, now: Timestamp) -> Result<UtcMonth, ValidationError> {
    let month: UtcMonth = text.parse().map_err(|e| ValidationError::Invalid(format!("month: {e}")))?;
    let current = UtcMonth::of(now);
    if month > current {
        return Err(ValidationError::Invalid(format!(
            "month: {month} has not begun (the latest month with a statement is {current})"
        )));
    }
    Ok(month)
}

/// The revenue report's query: `month` (`YYYY-MM`, default the month in progress); nothing else.
pub fn revenue_query<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    now: Timestamp,
) -> Result<UtcMonth, ValidationError> {
    let mut month = None;
    for (name, value) in params {
        match name {
            "month" if month.is_none() => month = Some(statement_month(value, now)?),
            "month" => return Err(ValidationError::Invalid("query parameter \"month\" given more than once".into())),
            other => return Err(ValidationError::Invalid(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(month.unwrap_or_else(|| UtcMonth::of(now)))
}

/// An export's query: `from` and `to` as `YYYY-MM-DD` (UTC), both included, `from` ≤ `to`, at most
/// 366 days (defaults: the last 30 days up to `today`); nothing else.
pub fn export_range<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    today: UtcDay,
) -> Result<DayRange, ValidationError> {
    let (mut from, mut to) = (None, None);
    for (name, value) in params {
        let day = || value.parse::<UtcDay>().map_err(|e| ValidationError::Invalid(format!("{name}: {e}")));
        let taken = match name {
            "from" => from.replace(day()?).is_some(),
            "to" => to.replace(day()?).is_some(),
            other => return Err(ValidationError::Invalid(format!("unknown query parameter {other:?}"))),
        };
        if taken {
            return Err(ValidationError::Invalid(format!("query parameter {name:?} given more than once")));
        }
    }
    let (from, to) = day_range(from, to, today)?;
    Ok(DayRange { from, to })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("time")
    }

    #[test]
    fn a_statement_month_has_begun_and_is_written_yyyy_mm() {
        let now = at("2026-11-29T12:00:00Z");
        assert_eq!(statement_month("2026-11", now).map(|m| m.to_string()), Ok("2026-11".into()));
        assert_eq!(statement_month("1999-01", now).map(|m| m.to_string()), Ok("1999-01".into()));
        // The first millisecond of a month makes it current; the one before leaves it in the future.
        assert!(statement_month("2026-12", at("2026-12-01T00:00:00Z")).is_ok());
        assert!(statement_month("2026-12", at("2026-11-30T23:59:59.999Z")).is_err());
        for bad in ["2026-12", "2027-01", "2026-13", "2026-1", "november", "2026-11-01", ""] {
            assert!(statement_month(bad, now).is_err(), "{bad}");
        }
        assert_eq!(revenue_query([], now).map(|m| m.to_string()), Ok("2026-11".into()));
        assert_eq!(revenue_query([("month", "2026-10")], now).map(|m| m.to_string()), Ok("2026-10".into()));
        for bad in [vec![("month", "2026-10"), ("month", "2026-10")], vec![("user", "x")], vec![("month", "2027-01")]] {
            assert!(revenue_query(bad.clone(), now).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn export_ranges_and_their_edges() {
        let today: UtcDay = "2026-11-29".parse().expect("day");
        let range =
            |p: &[(&str, &str)]| export_range(p.iter().copied(), today).map(|r| (r.from.to_string(), r.to.to_string()));
        assert_eq!(range(&[]), Ok(("2026-10-31".into(), "2026-11-29".into())));
        // 366 days is the most; one more is refused, and so is a range that runs backwards.
        assert_eq!(
            range(&[("from", "2025-11-29"), ("to", "2026-11-29")]),
            Ok(("2025-11-29".into(), "2026-11-29".into()))
        );
        assert!(range(&[("from", "2025-11-28"), ("to", "2026-11-29")]).is_err());
        assert_eq!(
            range(&[("from", "2026-11-29"), ("to", "2026-11-29")]),
            Ok(("2026-11-29".into(), "2026-11-29".into()))
        );
        assert!(range(&[("from", "2026-11-30"), ("to", "2026-11-29")]).is_err());
        for bad in [[("from", "2026-02-30")], [("to", "2026-11")], [("page", "1")]] {
            assert!(range(&bad).is_err(), "{bad:?}");
        }
        let r = export_range([("from", "2026-11-01"), ("to", "2026-11-30")], today).expect("range");
        assert_eq!(
            (Timestamp(r.start_ms()).to_string(), Timestamp(r.end_ms()).to_string()),
            ("2026-11-01T00:00:00.000Z".into(), "2026-12-01T00:00:00.000Z".into())
        );
    }
}
