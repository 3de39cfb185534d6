//! The simulator's clock for video tasks: simulated milliseconds since the simulator started,
//! moved by real time (when [`ClockMode::Real`]) and by explicit advances (always).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use domain::duration_millis;

/// How the simulated clock moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockMode {
    /// Real time plus every advance (the default: a gateway run against the simulator sees
    /// tasks finish on their own).
    #[default]
    Real,
    /// Only advances move it (tests decide when tasks change state).
    Manual,
}

/// Simulated time.
#[derive(Debug)]
pub(crate) struct SimClock {
    mode: ClockMode,
    started: Instant,
    started_unix_ms: u64,
    advanced_ms: AtomicU64,
}

impl SimClock {
    pub(crate) fn new(mode: ClockMode) -> SimClock {
        let started_unix_ms =
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| duration_millis(d).unsigned_abs()).unwrap_or_default();
        SimClock { mode, started: Instant::now(), started_unix_ms, advanced_ms: AtomicU64::new(0) }
    }

    /// Simulated milliseconds since the start.
    pub(crate) fn now_ms(&self) -> u64 {
        let real = match self.mode {
            ClockMode::Real => duration_millis(self.started.elapsed()).unsigned_abs(),
            ClockMode::Manual => 0,
        };
        self.advanced_ms.load(Ordering::Relaxed).saturating_add(real)
    }

    /// Moves simulated time forward by `by`.
    pub(crate) fn advance(&self, by: Duration) {
        let ms = duration_millis(by).unsigned_abs();
        let _ = self.advanced_ms.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_add(ms)));
    }

    /// Unix seconds at simulated millisecond `at_ms`.
    pub(crate) fn unix_secs(&self, at_ms: u64) -> u64 {
        self.started_unix_ms.saturating_add(at_ms) / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = SimClock::new(ClockMode::Manual);
        assert_eq!(clock.now_ms(), 0);
        clock.advance(Duration::from_millis(1500));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now_ms(), 3500);
        assert_eq!(clock.unix_secs(3500), (clock.started_unix_ms + 3500) / 1000);
    }

    #[test]
    fn real_clock_adds_advances() {
        let clock = SimClock::new(ClockMode::Real);
        clock.advance(Duration::from_secs(100));
        assert!(clock.now_ms() >= 100_000);
    }
}
