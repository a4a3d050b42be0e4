//! The fleet simulation's random inputs (docs/fleet.md): `--arrival` and `--hold`
//! distributions (parsed by clap into these types) and the seeded generator that draws
//! from them. A leaf: the command line and the simulation both use it. The generator
//! is our own xoshiro256++ (seeded through splitmix64), not a crate's default one, so a
//! seed gives the same jobs, and the same output bytes, in every build and version.

use std::fmt;

/// Why an `--arrival` or `--hold` value was refused (clap prints it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("`{text}`: expected {forms}")]
    UnknownForm { text: String, forms: &'static str },
    #[error("`{value}` is not {what}")]
    NotANumber { value: String, what: &'static str },
    #[error("`{value}`: {what} must be more than 0")]
    NotPositive { value: String, what: &'static str },
    #[error("`{value}`: {what} must not be negative")]
    Negative { value: String, what: &'static str },
    #[error("`{value}`: {what} must be at most {max}")]
    TooLarge {
        value: String,
        what: &'static str,
        max: f64,
    },
}

/// The longest time a simulation takes as a hold, a mean or an interval: one year, in
/// seconds. With at most `MAX_RATE` arrivals a second and a bounded number of jobs,
/// every time the simulation computes is finite.
pub const MAX_SECS: f64 = 365.0 * 86400.0;

/// The most jobs a second a Poisson arrival may bring, and the fewest (one a year).
pub const MAX_RATE: f64 = 1e6;
pub const MIN_RATE: f64 = 1.0 / MAX_SECS;

/// A seeded pseudo-random generator (xoshiro256++).
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator for `seed` and one of several independent streams (`stream`), so
    /// arrivals stay the same whatever is drawn for holds.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut x = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) * (1.0 / (1u64 << 53) as f64)
    }

    /// Exponentially distributed with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
}

/// How jobs arrive: a Poisson process or a fixed interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// `poisson:RATE_PER_S`: exponential gaps with mean 1 / rate.
    Poisson { rate: f64 },
    /// `fixed:SECS`: one job every SECS seconds.
    Fixed { secs: f64 },
}

impl Arrival {
    pub fn parse(text: &str) -> Result<Arrival, SpecError> {
        let forms = "poisson:RATE_PER_S or fixed:SECS";
        match split(text) {
            Some(("poisson", v)) => {
                let rate = at_most(
                    positive(v, "a rate per second")?,
                    v,
                    "a rate per second",
                    MAX_RATE,
                )?;
                if rate < MIN_RATE {
                    return Err(SpecError::NotPositive {
                        value: v.to_string(),
                        what: "a rate of at least one job a year (3.2e-8 per second)",
                    });
                }
                Ok(Arrival::Poisson { rate })
            }
            Some(("fixed", v)) => Ok(Arrival::Fixed {
                secs: seconds(v, "an interval in seconds")?,
            }),
            _ => Err(SpecError::UnknownForm {
                text: text.to_string(),
                forms,
            }),
        }
    }

    /// The gap before the next job.
    pub fn gap(&self, rng: &mut Rng) -> f64 {
        match *self {
            Arrival::Poisson { rate } => rng.exp(1.0 / rate),
            Arrival::Fixed { secs } => secs,
        }
    }

    /// Jobs per second on average (infinite for `fixed:0`).
    pub fn rate(&self) -> f64 {
        match *self {
            Arrival::Poisson { rate } => rate,
            Arrival::Fixed { secs } => 1.0 / secs,
        }
    }
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arrival::Poisson { rate } => write!(f, "poisson:{rate}"),
            Arrival::Fixed { secs } => write!(f, "fixed:{secs}"),
        }
    }
}

/// How long a job given by flags holds its cards.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Hold {
    /// `exp:MEAN_S`: exponential with this mean.
    Exp { mean: f64 },
    /// `fixed:SECS`.
    Fixed { secs: f64 },
}

impl Hold {
    pub fn parse(text: &str) -> Result<Hold, SpecError> {
        let forms = "exp:MEAN_S or fixed:SECS";
        match split(text) {
            Some(("exp", v)) => Ok(Hold::Exp {
                mean: at_most(
                    positive(v, "a mean in seconds")?,
                    v,
                    "a mean in seconds",
                    MAX_SECS,
                )?,
            }),
            Some(("fixed", v)) => Ok(Hold::Fixed {
                secs: seconds(v, "a time in seconds")?,
            }),
            _ => Err(SpecError::UnknownForm {
                text: text.to_string(),
                forms,
            }),
        }
    }

    pub fn draw(&self, rng: &mut Rng) -> f64 {
        match *self {
            Hold::Exp { mean } => rng.exp(mean),
            Hold::Fixed { secs } => secs,
        }
    }

    pub fn mean(&self) -> f64 {
        match *self {
            Hold::Exp { mean } => mean,
            Hold::Fixed { secs } => secs,
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hold::Exp { mean } => write!(f, "exp:{mean}"),
            Hold::Fixed { secs } => write!(f, "fixed:{secs}"),
        }
    }
}

fn split(text: &str) -> Option<(&str, &str)> {
    let (kind, value) = text.trim().split_once(':')?;
    Some((kind.trim(), value.trim()))
}

fn number(v: &str, what: &'static str) -> Result<f64, SpecError> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(SpecError::NotANumber {
            value: v.to_string(),
            what,
        }),
    }
}

/// A time in seconds: finite, not negative, at most `MAX_SECS`.
fn seconds(v: &str, what: &'static str) -> Result<f64, SpecError> {
    at_most(non_negative(v, what)?, v, what, MAX_SECS)
}

fn at_most(x: f64, v: &str, what: &'static str, max: f64) -> Result<f64, SpecError> {
    if x > max {
        return Err(SpecError::TooLarge {
            value: v.to_string(),
            what,
            max,
        });
    }
    Ok(x)
}

fn positive(v: &str, what: &'static str) -> Result<f64, SpecError> {
    match number(v, what)? {
        x if x > 0.0 => Ok(x),
        _ => Err(SpecError::NotPositive {
            value: v.to_string(),
            what,
        }),
    }
}

fn non_negative(v: &str, what: &'static str) -> Result<f64, SpecError> {
    match number(v, what)? {
        x if x >= 0.0 => Ok(x),
        _ => Err(SpecError::Negative {
            value: v.to_string(),
            what,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms_and_refuses_the_rest() {
        assert_eq!(
            Arrival::parse("poisson:0.5"),
            Ok(Arrival::Poisson { rate: 0.5 })
        );
        assert_eq!(
            Arrival::parse("fixed:10"),
            Ok(Arrival::Fixed { secs: 10.0 })
        );
        assert_eq!(Hold::parse("exp:115"), Ok(Hold::Exp { mean: 115.0 }));
        assert_eq!(Hold::parse("fixed:0.036"), Ok(Hold::Fixed { secs: 0.036 }));
        let refused = |r: Result<_, SpecError>| match r {
            Err(SpecError::UnknownForm { .. }) => "form",
            Err(SpecError::NotANumber { .. }) => "number",
            Err(SpecError::NotPositive { .. }) => "positive",
            Err(SpecError::Negative { .. }) => "negative",
            Err(SpecError::TooLarge { .. }) => "large",
            Ok(()) => "accepted",
        };
        for (bad, why) in [
            ("poisson:0", "positive"),
            ("poisson:-1", "positive"),
            ("poisson:x", "number"),
            ("poisson:inf", "number"),
            ("uniform:3", "form"),
            ("3", "form"),
            ("fixed:-2", "negative"),
            ("fixed:1e308", "large"),
            ("poisson:1e300", "large"),
            ("poisson:1e-300", "positive"),
        ] {
            assert_eq!(refused(Arrival::parse(bad).map(|_| ())), why, "{bad}");
        }
        for (bad, why) in [
            ("exp:0", "positive"),
            ("exp:NaN", "number"),
            ("exp:1e308", "large"),
            ("fixed:1e308", "large"),
            ("fixed:", "number"),
            ("normal:3:1", "form"),
            ("poisson:2", "form"),
        ] {
            assert_eq!(refused(Hold::parse(bad).map(|_| ())), why, "{bad}");
        }
        assert_eq!(Arrival::Poisson { rate: 0.25 }.to_string(), "poisson:0.25");
        assert_eq!(Hold::Exp { mean: 115.0 }.to_string(), "exp:115");
    }

    #[test]
    fn a_seed_gives_one_sequence_and_streams_differ() {
        let draw = |seed, stream| {
            let mut r = Rng::new(seed, stream);
            (0..4).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7, 0), draw(7, 0));
        assert_ne!(draw(7, 0), draw(8, 0));
        assert_ne!(draw(7, 0), draw(7, 1));
    }

    #[test]
    fn exponential_draws_have_their_mean() {
        let mut r = Rng::new(1, 0);
        let n = 200_000;
        let mean = (0..n).map(|_| r.exp(3.0)).sum::<f64>() / n as f64;
        // The standard error is 3 / sqrt(n) ≈ 0.0067.
        assert!((mean - 3.0).abs() < 0.04, "{mean}");
        assert!((0..1000).all(|_| r.unit() > 0.0 && r.unit() <= 1.0));
    }
}
