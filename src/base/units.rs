//! Sizes (`40GiB`, `512MiB`, `1.5GB`, bytes), durations (`30m`, `90s`, `1h 30m`) and counts
//! of things (`1 scene`, `2 scenes`).

use std::fmt;
use std::time::Duration;

/// A size or duration that could not be read, with the text as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    Size(String),
    Duration(String),
    /// A duration of zero where only a positive one means something (a timeout, a
    /// grace): there is no "0 = none" value.
    ZeroDuration(String),
    /// A duration past `MAX_DURATION`.
    LongDuration(String),
    /// A size past `MAX_SIZE`.
    LargeSize(String),
}

/// The longest duration scenerun takes anywhere (a timeout, a grace, a wait, an age):
/// 365 days. Every deadline is a moment plus at most this, which no clock overflows.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The largest size scenerun takes (a memory budget, a cache's size): 1 EiB, so sums of
/// them stay far from overflowing.
pub const MAX_SIZE: u64 = 1 << 60;

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Size(t) => write!(
                f,
                "bad size `{t}` (write e.g. `512MiB`, `40GiB`, `1.5GB` or a number of bytes)"
            ),
            BadValue::Duration(t) => write!(
                f,
                "bad duration `{t}` (write e.g. `90s`, `30m`, `1h 30m`, `14d`)"
            ),
            BadValue::ZeroDuration(t) => write!(
                f,
                "bad duration `{t}`: it must be longer than zero (leave the key out for its default)"
            ),
            BadValue::LongDuration(t) => write!(
                f,
                "bad duration `{t}`: longer than the longest scenerun takes, 365 days (`365d`)"
            ),
            BadValue::LargeSize(t) => write!(
                f,
                "bad size `{t}`: larger than the largest scenerun takes, 1 EiB (`{MAX_SIZE}`)"
            ),
        }
    }
}

impl std::error::Error for BadValue {}

/// `t + d` that cannot overflow: a moment past what the clock can hold is taken as
/// `t` + `MAX_DURATION` (which Linux's clocks hold for centuries), so a deadline is at
/// worst far away, never a panic. Every deadline scenerun sets is made here.
pub fn later(t: std::time::Instant, d: Duration) -> std::time::Instant {
    t.checked_add(d.min(MAX_DURATION))
        .or_else(|| t.checked_add(Duration::from_secs(3600)))
        .unwrap_or(t)
}

/// Seconds read from a record or report (a float anyone could have written) as a
/// duration: NaN and negative are zero, anything past `MAX_DURATION` is that.
pub fn secs(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(s)
            .unwrap_or(MAX_DURATION)
            .min(MAX_DURATION)
    }
}

/// Parse a size. Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (KB, MB,
/// GB, TB) powers of 1000; a bare number is bytes.
pub fn parse_size(text: &str) -> Result<u64, BadValue> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000_u64.pow(2),
        "gb" => 1000_u64.pow(3),
        "tb" => 1000_u64.pow(4),
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        _ => return Err(bad_size(text)),
    };
    let value: f64 = num.parse().map_err(|_| bad_size(text))?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 {
        return Err(bad_size(text));
    }
    if bytes > MAX_SIZE as f64 {
        return Err(BadValue::LargeSize(text.to_string()));
    }
    Ok(bytes.round() as u64)
}

fn bad_size(text: &str) -> BadValue {
    BadValue::Size(text.to_string())
}

/// Parse a duration: humantime syntax (`30m`, `90s`, `1h 30m`, `14d`); a bare number is
/// seconds. At most `MAX_DURATION`.
pub fn parse_duration(text: &str) -> Result<Duration, BadValue> {
    let t = text.trim();
    let long = || BadValue::LongDuration(text.to_string());
    if let Ok(secs) = t.parse::<u64>() {
        if secs > 0 {
            let d = Duration::from_secs(secs);
            return if d > MAX_DURATION { Err(long()) } else { Ok(d) };
        }
    }
    match humantime::parse_duration(t) {
        Ok(d) if d > MAX_DURATION => Err(long()),
        // Past what humantime counts (u64 seconds): longer still.
        Err(humantime::DurationError::NumberOverflow) => Err(long()),
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(BadValue::ZeroDuration(text.to_string())),
        Err(_) if t.parse::<u64>() == Ok(0) => Err(BadValue::ZeroDuration(text.to_string())),
        Err(_) => Err(BadValue::Duration(text.to_string())),
    }
}

/// An age limit (`cache prune --max-age`): a duration, where `0` means "any age".
pub fn parse_age(text: &str) -> Result<Duration, BadValue> {
    match text.trim() {
        "0" | "0s" => Ok(Duration::ZERO),
        _ => parse_duration(text),
    }
}

/// `1.2s`, `340ms`, `2m05s`: short human durations for terminal lines.
pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{}ms", (s * 1000.0).round() as u64)
    } else if s < 60.0 {
        format!("{s:.1}s")
    } else {
        let m = (s / 60.0).floor();
        format!("{}m{:02}s", m as u64, (s - m * 60.0).round() as u64)
    }
}

/// `1.5 GiB`-style sizes for reports.
pub fn short_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `1 scene`, `2 scenes`: a count and its noun, plural by `s` (every noun scenerun
/// counts takes one).
pub fn count(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("40GiB").unwrap(), 40 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert!(parse_size("40 gigs").is_err());
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("-1GiB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_duration("14d").unwrap(),
            Duration::from_secs(14 * 86400)
        );
        assert_eq!(parse_duration("12").unwrap(), Duration::from_secs(12));
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            parse_duration("0s"),
            Err(BadValue::ZeroDuration("0s".into()))
        );
        assert_eq!(parse_duration("0"), Err(BadValue::ZeroDuration("0".into())));
    }
}
