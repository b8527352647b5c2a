//! The space limit's write delays: owed by writes, slept in lumps
//! (`Core::wait_for_space`; `docs/design.md`, "Pressure levels").
//!
//! Between the space limit's ratios each write is asked a delay in
//! proportion to how far the ratio is toward high (Scavenger (VLDB),
//! §3.5, slows writes there). A delay of a few microseconds cannot be slept
//! as such: a sleep lasts the kernel's timer slack (50 µs by default) and
//! here its wake-up another 30-50 µs, so the delays are owed until they add
//! up to a *lump*, which one write sleeps, and what that sleep lasts past
//! the lump is credited to the writes after it. Every write that sleeps
//! waits the lump and more, so the lump decides the tail latency under
//! pressure:
//! - The writes that sleep are the delay asked per write divided by the
//!   lump. While that is under 1% of them, the p99 latency does not see the
//!   sleeps at all; so the lump is set from the rate at which delays were
//!   asked over the last [`RATE_WINDOW_OPS`] writes (those asked none
//!   included) to make one write in [`WRITES_PER_SLEEP`] sleep, from
//!   [`BASE_LUMP_NANOS`] (a window that ends a calm stretch says little
//!   about the pressure just returned) up to [`MAX_LUMP_NANOS`].
//! - Past that (a store whose GC cannot keep up asks more than 10 µs a
//!   write), one write in two hundred cannot carry it without sleeping
//!   milliseconds; then the lump is [`SHORT_LUMP_NANOS`], and every
//!   sleeping write waits as little as a sleep can here.
//!
//! Measured in `docs/experiments.md`, "Owed write delays" (a fixed lump of
//! 1 ms set the wisckey preset's p99 at 1.1 ms; of 200 µs, the hashkv
//! preset's at 4 KiB values at 300-330 µs).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The lump while no rate is known, and the shortest while the rate lets
/// one write in [`WRITES_PER_SLEEP`] carry it: a lump shorter than what
/// the rate asks would only make more writes sleep, and a rate measured
/// over a calm window is low when pressure returns.
pub(super) const BASE_LUMP_NANOS: i64 = 200_000;
/// The lump when the rate asks more than one write in [`WRITES_PER_SLEEP`]
/// can carry.
pub(super) const SHORT_LUMP_NANOS: i64 = 50_000;
/// The longest lump a write sleeps for the others.
pub(super) const MAX_LUMP_NANOS: i64 = 2_000_000;
/// One write in this many sleeps, while the lump is under its bound.
pub(super) const WRITES_PER_SLEEP: i64 = 200;
/// Writes over which the rate of asked delay is measured.
pub(super) const RATE_WINDOW_OPS: u64 = 1 << 16;

/// The lump for delays asked at `nanos_per_write` on average.
pub(super) fn lump_for_rate(nanos_per_write: f64) -> i64 {
    let lump = nanos_per_write * WRITES_PER_SLEEP as f64;
    if lump > MAX_LUMP_NANOS as f64 {
        SHORT_LUMP_NANOS
    } else {
        (lump as i64).max(BASE_LUMP_NANOS)
    }
}

/// Delays asked of writes and not slept yet, and the lump they are slept in.
#[derive(Debug)]
pub(super) struct OwedDelays {
    /// Delay asked and no write has slept yet, in nanoseconds, less what
    /// sleeps overslept (negative while such credit is left).
    owed: AtomicI64,
    /// The writes counted (the caller's count of user operations) when
    /// the current window began, and the delay asked in it, in nanoseconds.
    window_ops: AtomicU64,
    window_asked: AtomicU64,
    /// What a write owes before one sleeps (`lump_for_rate` of the last
    /// window).
    lump: AtomicI64,
}

impl Default for OwedDelays {
    fn default() -> Self {
        OwedDelays {
            owed: AtomicI64::new(0),
            window_ops: AtomicU64::new(0),
            window_asked: AtomicU64::new(0),
            lump: AtomicI64::new(BASE_LUMP_NANOS),
        }
    }
}

impl OwedDelays {
    /// Asks `delay` of a write, `ops` being the writes counted so far;
    /// returns how long this write sleeps, if it is the one to sleep.
    pub(super) fn ask(&self, delay: Duration, ops: u64) -> Option<Duration> {
        let delay = delay.as_nanos().min(i64::MAX as u128) as i64;
        self.window_asked.fetch_add(delay as u64, Ordering::Relaxed);
        self.roll_window(ops);
        let owed = self.owed.fetch_add(delay, Ordering::Relaxed) + delay;
        if owed < self.lump.load(Ordering::Relaxed) {
            return None;
        }
        // This write pays what is owed (another may have taken it).
        let owed = self.owed.swap(0, Ordering::Relaxed);
        if owed <= 0 {
            // Credit taken meanwhile: give back what is left.
            self.owed.fetch_add(owed, Ordering::Relaxed);
            return None;
        }
        Some(Duration::from_nanos(owed as u64))
    }

    /// A sleep asked for `owed` lasted `slept`: what it lasted past that
    /// is credited to the writes after it (at most a lump).
    pub(super) fn slept(&self, owed: Duration, slept: Duration) {
        let over = slept.saturating_sub(owed).as_nanos().min(i64::MAX as u128) as i64;
        let lump = self.lump.load(Ordering::Relaxed);
        self.owed.fetch_sub(over.min(lump), Ordering::Relaxed);
    }

    /// The lump writes now owe before one sleeps.
    pub(super) fn lump(&self) -> Duration {
        Duration::from_nanos(self.lump.load(Ordering::Relaxed).max(0) as u64)
    }

    /// Sets the lump from the window's rate once it spans
    /// [`RATE_WINDOW_OPS`] writes, and starts the next window. A window
    /// spans the writes asked nothing too: what counts is the share of all
    /// writes that sleep.
    fn roll_window(&self, ops: u64) {
        let start = self.window_ops.load(Ordering::Relaxed);
        let writes = ops.saturating_sub(start);
        if writes < RATE_WINDOW_OPS {
            return;
        }
        // One writer rolls it; the others keep the lump they saw.
        if self
            .window_ops
            .compare_exchange(start, ops, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let asked = self.window_asked.swap(0, Ordering::Relaxed);
        let rate = asked as f64 / writes as f64;
        self.lump.store(lump_for_rate(rate), Ordering::Relaxed);
    }
}

/// The timer slack a space-limit sleep runs with: the kernel may end a
/// sleep this much late (and merges timers within it to wake less often).
#[cfg(target_os = "linux")]
const SLEEP_TIMER_SLACK_NANOS: u64 = 2_000;

/// Sleeps `d` with the calling thread's timer slack lowered to
/// `SLEEP_TIMER_SLACK_NANOS` for the sleep, and restored after it: the
/// thread is the user's, and its slack is not ours to keep. Three more
/// system calls, against a sleep of tens of microseconds that would
/// otherwise last 50 more. Returns how long it slept.
pub(super) fn sleep_precisely(d: Duration) -> Duration {
    let t = Instant::now();
    #[cfg(target_os = "linux")]
    {
        use rustix::thread::{current_timer_slack, set_current_timer_slack};
        use std::num::NonZeroU64;
        if let Ok(was) = current_timer_slack() {
            if was > SLEEP_TIMER_SLACK_NANOS
                && set_current_timer_slack(NonZeroU64::new(SLEEP_TIMER_SLACK_NANOS)).is_ok()
            {
                std::thread::sleep(d);
                // `None` would set the thread's default slack, not the one
                // it had (`was` is not 0: checked above).
                let _ = set_current_timer_slack(NonZeroU64::new(was));
                return t.elapsed();
            }
        }
    }
    std::thread::sleep(d);
    t.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lump_makes_one_write_in_two_hundred_sleep_while_it_can() {
        // Little asked: the base lump (fewer sleepers still).
        assert_eq!(lump_for_rate(0.0), BASE_LUMP_NANOS);
        assert_eq!(lump_for_rate(1_000.0), BASE_LUMP_NANOS);
        // 4 µs a write: 800 µs lumps, one write in 200 sleeps.
        assert_eq!(lump_for_rate(4_000.0), 800_000);
        assert_eq!(lump_for_rate(10_000.0), MAX_LUMP_NANOS);
        // More than the longest lump can carry at that share: short ones.
        assert_eq!(lump_for_rate(10_001.0), SHORT_LUMP_NANOS);
    }

    #[test]
    fn delays_are_slept_in_lumps_with_oversleep_credited() {
        let d = OwedDelays::default();
        let us = Duration::from_micros;
        // The first lump (no rate yet) is 200 µs: 199 writes of 1 µs owe.
        for i in 0..199 {
            assert_eq!(d.ask(us(1), i), None, "write {i}");
        }
        assert_eq!(d.ask(us(1), 199), Some(us(200)));
        // That sleep lasted 250 µs: the next 50 µs asked are credit.
        d.slept(us(200), us(250));
        assert_eq!(d.ask(us(50), 200), None);
        for i in 0..199 {
            assert_eq!(d.ask(us(1), 201 + i), None, "write {i} after the credit");
        }
        assert_eq!(d.ask(us(1), 400), Some(us(200)));
    }

    #[test]
    fn the_lump_follows_the_rate_over_all_writes() {
        let d = OwedDelays::default();
        // One write in 100 asked 300 µs: 3 µs a write over the window.
        let mut ops = 0;
        while ops <= RATE_WINDOW_OPS {
            let delay = if ops % 100 == 0 { 300 } else { 0 };
            if let Some(s) = d.ask(Duration::from_micros(delay), ops) {
                d.slept(s, s);
            }
            ops += 1;
        }
        // 656 writes asked 300 µs of 65,537: 3.003 µs a write.
        let lump = d.lump().as_nanos();
        assert!((600_000..=601_000).contains(&lump), "lump {lump} ns");
        // Every write asks 20 µs: more than a 2 ms lump can carry at one
        // write in 200, so the lump is short.
        let end = ops + RATE_WINDOW_OPS + 1;
        while ops <= end {
            if let Some(s) = d.ask(Duration::from_micros(20), ops) {
                d.slept(s, s);
            }
            ops += 1;
        }
        assert_eq!(d.lump(), Duration::from_nanos(SHORT_LUMP_NANOS as u64));
    }
}
