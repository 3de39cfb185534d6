//! Integer statistics and formatting: percentiles by nearest rank, rates and milliseconds
//! printed from microseconds (no floating point anywhere).

/// The `q`-th percentile (0 < q ≤ 100) of `sorted` by nearest rank; `None` when empty.
pub fn percentile(sorted: &[u64], q: u64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = u64::try_from(sorted.len()).unwrap_or(u64::MAX);
    let rank = (n.saturating_mul(q.clamp(1, 100))).div_ceil(100).max(1);
    let index = usize::try_from(rank - 1).unwrap_or(usize::MAX).min(sorted.len() - 1);
    sorted.get(index).copied()
}

/// Microseconds as milliseconds with three decimals: `1234` → `1.234`.
pub fn ms(us: u64) -> String {
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// Signed microseconds as milliseconds with three decimals: `-250` → `-0.250`.
pub fn signed_ms(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "+" };
    format!("{sign}{}", ms(us.unsigned_abs()))
}

/// `count` events over `elapsed_us` as a rate per second with one decimal.
pub fn per_second(count: u64, elapsed_us: u64) -> (u64, String) {
    if elapsed_us == 0 {
        return (0, "0.0".to_owned());
    }
    let tenths = u128::from(count) * 10_000_000 / u128::from(elapsed_us);
    let tenths = u64::try_from(tenths).unwrap_or(u64::MAX);
    (tenths / 10, format!("{}.{}", tenths / 10, tenths % 10))
}

/// A duration in whole microseconds, saturating.
pub fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), Some(50));
        assert_eq!(percentile(&v, 99), Some(99));
        assert_eq!(percentile(&v, 100), Some(100));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&[1, 2, 3], 50), Some(2));
    }

    #[test]
    fn formatting() {
        assert_eq!(ms(1234), "1.234");
        assert_eq!(ms(5), "0.005");
        assert_eq!(signed_ms(-250), "-0.250");
        assert_eq!(signed_ms(1500), "+1.500");
        assert_eq!(per_second(3000, 1_000_000), (3000, "3000.0".to_owned()));
        assert_eq!(per_second(1, 3_000_000).1, "0.3");
        assert_eq!(per_second(5, 0).1, "0.0");
    }
}
