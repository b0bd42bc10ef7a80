//! Kernel timestamps (`CLOCK_BOOTTIME` ns) to wall-clock time, and RFC 3339 output.

use jiff::{Timestamp, tz::TimeZone};

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; these clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// Now, in the kernel's event clock (`bpf_ktime_get_boot_ns`).
pub fn boot_now_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME) as u64
}

/// Wall-clock nanoseconds since the Unix epoch of a boot-clock timestamp. The offset
/// is taken at each call, so wall-clock steps (NTP) are followed.
pub fn boot_to_unix_ns(boot_ns: u64) -> i128 {
    boot_offset_ns() + boot_ns as i128
}

/// The wall clock minus the boot clock, now. Read twice, it differs by the few ns
/// between its two clock reads: times shown together (one incident's) take it once,
/// so that equal kernel times read as equal wall times and keep their order.
pub fn boot_offset_ns() -> i128 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_BOOTTIME)
}

/// The boot-clock time of an RFC 3339 wall-clock time (as the API reports times);
/// none for a malformed time or one before boot.
pub fn rfc3339_to_boot_ns(text: &str) -> Option<u64> {
    timestamp_to_boot_ns(text.parse().ok()?)
}

/// The boot-clock time of a wall-clock time; none for one before boot.
pub fn timestamp_to_boot_ns(t: Timestamp) -> Option<u64> {
    u64::try_from(t.as_nanosecond() - boot_offset_ns()).ok()
}

/// `2026-11-29T16:40:01.123456789Z`: RFC 3339, UTC, always nine fractional digits.
pub fn rfc3339_nanos(unix_ns: i128) -> String {
    let t = Timestamp::from_nanosecond(unix_ns).unwrap_or(Timestamp::UNIX_EPOCH);
    format!("{}", t.strftime("%Y-%m-%dT%H:%M:%S%.9fZ"))
}

/// The local time zone's offset from UTC at `unix_s`, in seconds (0 if unknown).
pub fn local_offset(unix_s: i64) -> i64 {
    Timestamp::from_second(unix_s)
        .map_or(0, |t| i64::from(TimeZone::system().to_offset(t).seconds()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_nanoseconds() {
        assert_eq!(
            rfc3339_nanos(1_795_970_401_000_000_007),
            "2026-11-29T16:40:01.000000007Z"
        );
        assert_eq!(rfc3339_nanos(0), "1970-01-01T00:00:00.000000000Z");
    }

    #[test]
    fn api_times_map_to_the_boot_clock() {
        let now = boot_now_ns();
        let text = rfc3339_nanos(boot_to_unix_ns(now));
        let back = rfc3339_to_boot_ns(&text).unwrap();
        assert!(back.abs_diff(now) < 1_000_000_000, "{back} vs {now}");
        assert_eq!(rfc3339_to_boot_ns("1970-01-01T00:00:00Z"), None);
        assert_eq!(rfc3339_to_boot_ns("yesterday"), None);
    }

    #[test]
    fn boot_clock_maps_to_now() {
        let now = clock_ns(libc::CLOCK_REALTIME);
        let mapped = boot_to_unix_ns(boot_now_ns());
        assert!((mapped - now).abs() < 1_000_000_000, "{mapped} vs {now}");
    }
}
