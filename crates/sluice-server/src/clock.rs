//! The clock a connection's commands run by.
//!
//! A connection runs the commands of one read back to back (pipelining).
//! Reading the clocks for each of them (the monotonic clock when it starts
//! and when it ends, for `INFO commandstats` and the latency histogram,
//! and the wall clock for its expiry checks) cost three reads per command;
//! a [`Clock`] reads the wall clock once per batch and the monotonic clock
//! once per command, when it ends, which is when the next one starts.

use std::time::{Duration, Instant};

use crate::store::now_ms;

/// The time of a batch of commands run back to back.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// When the batch started, on both clocks.
    start: Instant,
    start_ms: u64,
    /// When the running command started (the previous one ended).
    last: Instant,
}

impl Clock {
    /// A batch starting now.
    pub fn start() -> Clock {
        let now = Instant::now();
        Clock {
            start: now,
            start_ms: now_ms(),
            last: now,
        }
    }

    /// Milliseconds since the Unix epoch when the running command started:
    /// the batch's wall-clock start plus the monotonic time since, so a
    /// command after a slow one (`DEBUG SLEEP`) sees the time move on.
    pub fn now_ms(&self) -> u64 {
        self.start_ms + self.last.duration_since(self.start).as_millis() as u64
    }

    /// Ends the running command: returns how long it took, and the next
    /// command starts now.
    pub fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let took = now.duration_since(self.last);
        self.last = now;
        took
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lap_times_one_command_and_the_wall_clock_follows_the_laps() {
        let mut c = Clock::start();
        let at_start = c.now_ms();
        std::thread::sleep(Duration::from_millis(20));
        let first = c.lap();
        assert!(first >= Duration::from_millis(20));
        assert!(
            c.now_ms() >= at_start + 20,
            "the next command sees the time move on"
        );
        let second = c.lap();
        assert!(second < first, "a lap starts where the previous one ended");
        assert!(c.now_ms() <= now_ms());
    }
}
