//! A wall-clock budget for long runs: stop before a unit of work (a bench
//! case, a replay round) that would not finish in time, so a run under an
//! outer time limit ends cleanly with its report written instead of being
//! killed mid-unit.

use std::time::{Duration, Instant};

pub struct Deadline {
    started: Instant,
    limit: Option<Duration>,
    longest: Duration,
    unit_started: Instant,
    units: usize,
}

impl Deadline {
    /// `limit_s`: None or a non-positive value means no budget.
    pub fn new(limit_s: Option<f64>) -> Deadline {
        let now = Instant::now();
        Deadline {
            started: now,
            limit: limit_s.filter(|s| *s > 0.0).map(Duration::from_secs_f64),
            longest: Duration::ZERO,
            unit_started: now,
            units: 0,
        }
    }

    /// May another unit start? Predicted by the longest unit so far; the
    /// first always starts, so every run records at least one unit.
    pub fn allows_another(&self) -> bool {
        self.allows_with_reserve(0)
    }

    /// May another unit start and `reserve` more still finish after it
    /// (e.g. a search's fresh measurement of its winner)?
    pub fn allows_with_reserve(&self, reserve: u32) -> bool {
        match self.limit {
            None => true,
            Some(_) if self.units == 0 => true,
            Some(limit) => self.started.elapsed() + self.longest * (1 + reserve) <= limit,
        }
    }

    pub fn start_unit(&mut self) {
        self.unit_started = Instant::now();
    }

    pub fn end_unit(&mut self) {
        self.longest = self.longest.max(self.unit_started.elapsed());
        self.units += 1;
    }

    pub fn limit_s(&self) -> Option<f64> {
        self.limit.map(|d| d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_budget_always_allows_and_a_spent_budget_stops_after_a_unit() {
        let mut none = Deadline::new(None);
        none.start_unit();
        none.end_unit();
        assert!(none.allows_another());
        assert!(Deadline::new(Some(0.0)).allows_another());

        let mut tight = Deadline::new(Some(0.02));
        std::thread::sleep(Duration::from_millis(25));
        assert!(tight.allows_another(), "the first unit always starts");
        tight.start_unit();
        std::thread::sleep(Duration::from_millis(15));
        tight.end_unit();
        // 15 ms spent, the next unit is predicted at 15 ms: over 20 ms.
        assert!(!tight.allows_another());
        assert_eq!(tight.limit_s(), Some(0.02));
    }
}
