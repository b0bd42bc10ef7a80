//! Reading the agent's `/metrics` text in tests.

use std::time::{Duration, Instant};

/// The sum of the samples whose line starts with `prefix`.
pub fn sum(body: &str, prefix: &str) -> u64 {
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Calls `f` every 200 ms until it gives a value or `timeout` has passed.
pub fn poll_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
