//! Device ids, parsed strictly — the one parser, for the lock tool's grant and for
//! `--devices` alike: non-negative integers, comma lists or ranges (`0-3,8`). A duplicate
//! (`0,0`, `00,0`), anything else, or fewer ids than the run needs is refused before any
//! step runs: running on a card twice, or on a guess, is worse than not running
//! (docs/device.md). `--devices` is refused by clap itself, before a plan is made.

use std::fmt;

/// The most ids one range may expand to.
const MAX_RANGE: u64 = 4096;

/// Why a grant is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdError {
    Empty,
    NotAnId(String),
    BadRange(String),
    Duplicate(u64),
    TooFew { got: usize, need: usize },
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdError::Empty => f.write_str("no device ids"),
            IdError::NotAnId(p) => write!(f, "`{p}` is not a device id (a non-negative integer)"),
            IdError::BadRange(p) => write!(
                f,
                "`{p}` is not a valid range (A-B with A <= B, at most {MAX_RANGE} ids)"
            ),
            IdError::Duplicate(id) => write!(f, "device {id} is granted more than once"),
            IdError::TooFew { got, need } => write!(
                f,
                "{got} id{} granted but the run needs {need} (device_count)",
                if *got == 1 { " was" } else { "s were" }
            ),
        }
    }
}

impl std::error::Error for IdError {}

/// Device ids given on the command line (`--devices 0-3,8`), parsed by clap with
/// [`parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIds(pub Vec<String>);

impl DeviceIds {
    pub fn parse(text: &str) -> Result<DeviceIds, IdError> {
        parse(text).map(DeviceIds)
    }
}

fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Leading zeros name the same card (`00` is `0`); a huge number is no card at all.
    text.parse().ok()
}

/// Parse a grant: ids in the order given, each once, as canonical decimal strings.
pub fn parse(text: &str) -> Result<Vec<String>, IdError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let text = text.trim();
    if text.is_empty() {
        return Err(IdError::Empty);
    }
    for part in text.split(',').map(str::trim) {
        let range = match part.split_once('-') {
            Some((a, b)) => match (number(a.trim()), number(b.trim())) {
                (Some(a), Some(b)) if a <= b && b - a < MAX_RANGE => a..=b,
                (Some(_), Some(_)) => return Err(IdError::BadRange(part.into())),
                _ => return Err(IdError::NotAnId(part.into())),
            },
            None => match number(part) {
                Some(n) => n..=n,
                None => return Err(IdError::NotAnId(part.into())),
            },
        };
        for id in range {
            if !seen.insert(id) {
                return Err(IdError::Duplicate(id));
            }
            out.push(id.to_string());
        }
    }
    Ok(out)
}

/// Parse a grant that must hold at least `need` ids.
pub fn parse_grant(text: &str, need: usize) -> Result<Vec<String>, IdError> {
    let ids = parse(text)?;
    if ids.len() < need {
        return Err(IdError::TooFew {
            got: ids.len(),
            need,
        });
    }
    Ok(ids)
}

/// The message for an unusable grant from the lock tool, naming the manifest key, the
/// variable and its value.
pub fn grant_error(var: &str, value: Option<&str>, e: &IdError) -> String {
    match value.filter(|v| !v.trim().is_empty()) {
        None => format!(
            "lock.device_env: ${var} is not set or empty: the lock command handed over no device ids"
        ),
        Some(v) => format!("lock.device_env: ${var}={v:?} is not a usable grant: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse("0-3,8").unwrap(), ["0", "1", "2", "3", "8"]);
        assert_eq!(parse(" 4 , 5 ").unwrap(), ["4", "5"]);
        assert_eq!(parse("007").unwrap(), ["7"]);
    }

    #[test]
    fn duplicates_are_refused() {
        assert_eq!(parse("0,0"), Err(IdError::Duplicate(0)));
        assert_eq!(parse("00,0"), Err(IdError::Duplicate(0)));
        assert_eq!(parse("0-3,2"), Err(IdError::Duplicate(2)));
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            "", " ", "garbage", "a,b", "1;rm", "-1", "1,", ",1", "1-", "0x1", "1.0",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(matches!(parse("3-1"), Err(IdError::BadRange(_))));
        assert!(matches!(parse("0-99999"), Err(IdError::BadRange(_))));
        assert!(parse("99999999999999999999999").is_err());
    }

    #[test]
    fn too_few_for_the_run() {
        assert_eq!(
            parse_grant("0", 2),
            Err(IdError::TooFew { got: 1, need: 2 })
        );
        assert!(parse_grant("0,1", 2).is_ok());
        let m = grant_error("TASK_DEVICE", Some("0,0"), &IdError::Duplicate(0));
        assert!(m.contains("lock.device_env") && m.contains("TASK_DEVICE") && m.contains("0,0"));
    }
}
