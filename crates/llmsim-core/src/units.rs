//! Time, size and rate newtypes with explicit units, and their parsers.
//!
//! Conventions (stated once, used everywhere):
//! - `K`, `M`, `G`, `T` are decimal (10^3, 10^6, 10^9, 10^12); `Ki`, `Mi`, `Gi`, `Ti` are binary
//!   (2^10 …).
//! - In rates, lower-case `b` means bits and upper-case `B` means bytes: `400Gbps` is
//!   400·10^9 bit/s, `900GBps` is 900·10^9 byte/s.
//! - In sizes, `B` is optional: `32MiB`, `32Mi`, `4096`, `4096B` are all accepted.
//! - Power is in watts with a required `W`: `500W`, `1.2kW`.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::UnitError;

/// Simulated time, in integer picoseconds. `u64` picoseconds cover 213 days.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    /// Time zero.
    pub const ZERO: SimTime = SimTime(0);
    /// The latest representable time (about 213 days).
    pub const MAX: SimTime = SimTime(u64::MAX);
    /// Picoseconds per nanosecond.
    pub const PS_PER_NS: u64 = 1_000;
    /// Picoseconds per microsecond.
    pub const PS_PER_US: u64 = 1_000_000;
    /// Picoseconds per millisecond.
    pub const PS_PER_MS: u64 = 1_000_000_000;
    /// Picoseconds per second.
    pub const PS_PER_S: u64 = 1_000_000_000_000;

    /// A time of `ps` picoseconds.
    pub const fn from_ps(ps: u64) -> Self {
        SimTime(ps)
    }
    /// A time of `ns` nanoseconds.
    pub const fn from_ns(ns: u64) -> Self {
        SimTime(ns * Self::PS_PER_NS)
    }
    /// A time of `us` microseconds.
    pub const fn from_us(us: u64) -> Self {
        SimTime(us * Self::PS_PER_US)
    }
    /// A time of `ms` milliseconds.
    pub const fn from_ms(ms: u64) -> Self {
        SimTime(ms * Self::PS_PER_MS)
    }
    /// Rounds to the nearest picosecond; negative or NaN inputs give zero, huge ones saturate.
    pub fn from_secs_f64(s: f64) -> Self {
        SimTime::from_ps_f64(s * Self::PS_PER_S as f64)
    }
    /// As [`SimTime::from_secs_f64`], from microseconds.
    pub fn from_us_f64(us: f64) -> Self {
        SimTime::from_ps_f64(us * Self::PS_PER_US as f64)
    }
    /// As [`SimTime::from_secs_f64`], from picoseconds.
    pub fn from_ps_f64(ps: f64) -> Self {
        if ps.is_nan() || ps <= 0.0 {
            SimTime::ZERO
        } else if ps >= u64::MAX as f64 {
            SimTime::MAX
        } else {
            SimTime(ps.round() as u64)
        }
    }
    /// The longest time a `SimTime` holds, in seconds (`u64::MAX` picoseconds, about 213 days).
    pub const MAX_SECS: f64 = u64::MAX as f64 / Self::PS_PER_S as f64;
    /// `ns` nanoseconds, or `None` beyond [`SimTime::MAX`].
    pub const fn checked_from_ns(ns: u64) -> Option<Self> {
        match ns.checked_mul(Self::PS_PER_NS) {
            Some(ps) => Some(SimTime(ps)),
            None => None,
        }
    }
    /// `s` seconds rounded to the nearest picosecond, or `None` for a negative, NaN or infinite
    /// input or one beyond [`SimTime::MAX_SECS`]: for user input, where saturating would hide a
    /// typo.
    pub fn checked_from_secs_f64(s: f64) -> Option<Self> {
        SimTime::checked_from_ps_f64(s * Self::PS_PER_S as f64)
    }
    /// As [`SimTime::checked_from_secs_f64`], in microseconds.
    pub fn checked_from_us_f64(us: f64) -> Option<Self> {
        SimTime::checked_from_ps_f64(us * Self::PS_PER_US as f64)
    }
    /// As [`SimTime::checked_from_secs_f64`], in picoseconds.
    pub fn checked_from_ps_f64(ps: f64) -> Option<Self> {
        // `u64::MAX as f64` is 2^64, so `<` keeps the rounded value in range.
        (ps >= 0.0 && ps < u64::MAX as f64).then(|| SimTime(ps.round() as u64))
    }
    /// In picoseconds.
    pub const fn as_ps(self) -> u64 {
        self.0
    }
    /// In whole nanoseconds, truncated (as ns-3's output files print times).
    pub const fn as_ns(self) -> u64 {
        self.0 / Self::PS_PER_NS
    }
    /// In seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / Self::PS_PER_S as f64
    }
    /// In microseconds.
    pub fn as_us_f64(self) -> f64 {
        self.0 as f64 / Self::PS_PER_US as f64
    }
    /// In nanoseconds.
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / Self::PS_PER_NS as f64
    }
    /// The sum, [`SimTime::MAX`] on overflow.
    pub const fn saturating_add(self, o: SimTime) -> SimTime {
        SimTime(self.0.saturating_add(o.0))
    }
    /// The difference, zero when `o` is later.
    pub const fn saturating_sub(self, o: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(o.0))
    }
    /// The sum, `None` on overflow.
    pub fn checked_add(self, o: SimTime) -> Option<SimTime> {
        self.0.checked_add(o.0).map(SimTime)
    }
}

impl Add for SimTime {
    type Output = SimTime;
    fn add(self, o: SimTime) -> SimTime {
        SimTime(self.0 + o.0)
    }
}
impl AddAssign for SimTime {
    fn add_assign(&mut self, o: SimTime) {
        self.0 += o.0;
    }
}
impl Sub for SimTime {
    type Output = SimTime;
    fn sub(self, o: SimTime) -> SimTime {
        SimTime(self.0 - o.0)
    }
}
impl SubAssign for SimTime {
    fn sub_assign(&mut self, o: SimTime) {
        self.0 -= o.0;
    }
}

impl fmt::Display for SimTime {
    /// Human form with the largest unit that keeps the value >= 1: `12.5us`, `3.2ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ps = self.0 as f64;
        let (v, u) = if self.0 >= Self::PS_PER_S {
            (ps / Self::PS_PER_S as f64, "s")
        } else if self.0 >= Self::PS_PER_MS {
            (ps / Self::PS_PER_MS as f64, "ms")
        } else if self.0 >= Self::PS_PER_US {
            (ps / Self::PS_PER_US as f64, "us")
        } else if self.0 >= Self::PS_PER_NS {
            (ps / Self::PS_PER_NS as f64, "ns")
        } else {
            return write!(f, "{}ps", self.0);
        };
        let prec = f.precision().unwrap_or(3);
        write!(f, "{v:.prec$}{u}")
    }
}

impl FromStr for SimTime {
    type Err = UnitError;
    /// Accepts `ps`, `ns`, `us` (or `µs`), `ms`, `s`, with an optional fraction: `2.5us`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || UnitError::new(s, "time", "a number with a unit: ps, ns, us, ms, s (e.g. \"1us\", \"2.5ms\")");
        let (num, unit) = split_number(s).ok_or_else(err)?;
        let scale = match unit {
            "ps" => 1.0,
            "ns" => Self::PS_PER_NS as f64,
            "us" | "µs" => Self::PS_PER_US as f64,
            "ms" => Self::PS_PER_MS as f64,
            "s" => Self::PS_PER_S as f64,
            _ => return Err(err()),
        };
        let ps = num * scale;
        if !ps.is_finite() || ps < 0.0 || ps >= u64::MAX as f64 {
            return Err(err());
        }
        Ok(SimTime(ps.round() as u64))
    }
}

/// A number of bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    /// No bytes.
    pub const ZERO: Bytes = Bytes(0);
    /// Bytes per KiB.
    pub const KIB: u64 = 1 << 10;
    /// Bytes per MiB.
    pub const MIB: u64 = 1 << 20;
    /// Bytes per GiB.
    pub const GIB: u64 = 1 << 30;
    /// `b` bytes.
    pub const fn new(b: u64) -> Self {
        Bytes(b)
    }
    /// `n` KiB.
    pub const fn kib(n: u64) -> Self {
        Bytes(n << 10)
    }
    /// `n` MiB.
    pub const fn mib(n: u64) -> Self {
        Bytes(n << 20)
    }
    /// `n` GiB.
    pub const fn gib(n: u64) -> Self {
        Bytes(n << 30)
    }
    /// The byte count.
    pub const fn get(self) -> u64 {
        self.0
    }
    /// The bit count.
    pub const fn bits(self) -> u64 {
        self.0 * 8
    }
    /// The byte count as a float (for rates and statistics).
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, o: Bytes) -> Bytes {
        Bytes(self.0 + o.0)
    }
}
impl AddAssign for Bytes {
    fn add_assign(&mut self, o: Bytes) {
        self.0 += o.0;
    }
}
impl Sub for Bytes {
    type Output = Bytes;
    fn sub(self, o: Bytes) -> Bytes {
        Bytes(self.0 - o.0)
    }
}

impl fmt::Display for Bytes {
    /// Binary units, exact when the value is a whole multiple: `1GiB`, `1.50MiB`, `4096B` -> `4KiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        for (scale, u) in UNITS {
            if self.0 >= scale {
                return if self.0.is_multiple_of(scale) {
                    write!(f, "{}{u}", self.0 / scale)
                } else {
                    write!(f, "{:.2}{u}", self.0 as f64 / scale as f64)
                };
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl FromStr for Bytes {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || {
            UnitError::new(
                s,
                "size",
                "a byte count with an optional unit: B, KB/MB/GB/TB (10^3..), KiB/MiB/GiB/TiB (2^10..) (e.g. \"32MiB\")",
            )
        };
        let (num, unit) = split_number(s).ok_or_else(err)?;
        let unit = unit.strip_suffix('B').unwrap_or(unit);
        let scale = prefix_scale(unit).ok_or_else(err)?;
        let b = num * scale;
        if !b.is_finite() || b < 0.0 || b >= u64::MAX as f64 || b.fract() != 0.0 {
            return Err(err());
        }
        Ok(Bytes(b as u64))
    }
}

/// A data rate in bits per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bandwidth(u64);

impl Bandwidth {
    /// No bandwidth.
    pub const ZERO: Bandwidth = Bandwidth(0);
    /// `bits_per_sec` bits per second.
    pub const fn from_bps(bits_per_sec: u64) -> Self {
        Bandwidth(bits_per_sec)
    }
    /// `gbit_per_sec` x 10^9 bits per second.
    pub const fn from_gbps(gbit_per_sec: u64) -> Self {
        Bandwidth(gbit_per_sec * 1_000_000_000)
    }
    /// `mbit_per_sec` x 10^6 bits per second.
    pub const fn from_mbps(mbit_per_sec: u64) -> Self {
        Bandwidth(mbit_per_sec * 1_000_000)
    }
    /// `GBps` in the NCCL / nccl-tests sense: 10^9 bytes per second.
    pub const fn from_gbytes_per_sec(gbyte_per_sec: u64) -> Self {
        Bandwidth(gbyte_per_sec * 8_000_000_000)
    }
    /// Rounded to whole bits per second; negative, NaN or infinite rates give zero.
    pub fn from_bps_f64(bps: f64) -> Self {
        Bandwidth(if bps.is_finite() && bps > 0.0 { bps.round() as u64 } else { 0 })
    }
    /// In bits per second.
    pub const fn bps(self) -> u64 {
        self.0
    }
    /// In bits per second, as a float.
    pub fn bps_f64(self) -> f64 {
        self.0 as f64
    }
    /// In 10^9 bits per second.
    pub fn gbps_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// 10^9 bytes per second, the unit nccl-tests and NCCL's tuning model use.
    pub fn gbytes_per_sec_f64(self) -> f64 {
        self.0 as f64 / 8e9
    }
    /// Zero bandwidth.
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
    /// Serialization time of `b` at this rate, rounded up to the next picosecond.
    /// A zero rate gives `SimTime::MAX`.
    pub fn time_to_send(self, b: Bytes) -> SimTime {
        if self.0 == 0 {
            return SimTime::MAX;
        }
        let num = b.0 as u128 * 8 * SimTime::PS_PER_S as u128;
        let den = self.0 as u128;
        let ps = num.div_ceil(den);
        SimTime(u64::try_from(ps).unwrap_or(u64::MAX))
    }
    /// Rate scaled by a factor (e.g. an efficiency), rounded to a bit/s.
    pub fn scale(self, f: f64) -> Bandwidth {
        Bandwidth::from_bps_f64(self.0 as f64 * f)
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0 as f64;
        let (x, u) = if v >= 1e12 {
            (v / 1e12, "Tbps")
        } else if v >= 1e9 {
            (v / 1e9, "Gbps")
        } else if v >= 1e6 {
            (v / 1e6, "Mbps")
        } else {
            return write!(f, "{}bps", self.0);
        };
        if x.fract() == 0.0 {
            write!(f, "{x}{u}")
        } else {
            write!(f, "{x:.2}{u}")
        }
    }
}

impl FromStr for Bandwidth {
    type Err = UnitError;
    /// `400Gbps` (bits), `50GBps` or `50GB/s` (bytes), `100Mbps`, `1Tbps`; binary prefixes allowed.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || {
            UnitError::new(
                s,
                "bandwidth",
                "a rate with a unit: bps/Kbps/Mbps/Gbps/Tbps (bits) or Bps/KBps/MBps/GBps/TBps, GB/s (bytes) (e.g. \"400Gbps\", \"900GBps\")",
            )
        };
        let (num, unit) = split_number(s).ok_or_else(err)?;
        let (prefix, per_unit_bits) = if let Some(p) = unit.strip_suffix("bps").or_else(|| unit.strip_suffix("b/s")) {
            (p, 1.0)
        } else if let Some(p) = unit.strip_suffix("Bps").or_else(|| unit.strip_suffix("B/s")) {
            (p, 8.0)
        } else {
            return Err(err());
        };
        let scale = prefix_scale(prefix).ok_or_else(err)?;
        let bps = num * scale * per_unit_bits;
        if !bps.is_finite() || bps < 0.0 || bps >= u64::MAX as f64 {
            return Err(err());
        }
        Ok(Bandwidth(bps.round() as u64))
    }
}

/// Electrical power, in integer milliwatts: a GPU board's power limit (`500W`, `1.2kW`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Power(u64);

impl Power {
    /// No power.
    pub const ZERO: Power = Power(0);
    /// `w` watts.
    pub const fn from_watts(w: u64) -> Self {
        Power(w * 1000)
    }
    /// `mw` milliwatts.
    pub const fn from_milliwatts(mw: u64) -> Self {
        Power(mw)
    }
    /// In milliwatts.
    pub const fn milliwatts(self) -> u64 {
        self.0
    }
    /// In watts, as a float (for ratios).
    pub fn watts_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
    /// Zero power.
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Power {
    /// Watts, with a fraction only where needed: `500W`, `1200W`, `0.5W`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{}W", self.0 / 1000)
        } else {
            write!(f, "{}W", self.0 as f64 / 1000.0)
        }
    }
}

impl FromStr for Power {
    type Err = UnitError;
    /// `500W`, `500 W`, `1.2kW`, `1.2KW`, `750mW`. The unit is required: a bare `500` is rejected.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || {
            UnitError::new(
                s,
                "power",
                "a number of watts with the unit: W, kW or mW (e.g. \"500W\", \"1.2kW\")",
            )
        };
        let (num, unit) = split_number(s).ok_or_else(err)?;
        let scale_mw = match unit {
            "W" => 1e3,
            "kW" | "KW" => 1e6,
            "mW" => 1.0,
            _ => return Err(err()),
        };
        let mw = num * scale_mw;
        if !mw.is_finite() || mw < 0.0 || mw >= u64::MAX as f64 {
            return Err(err());
        }
        Ok(Power(mw.round() as u64))
    }
}

fn prefix_scale(p: &str) -> Option<f64> {
    Some(match p {
        "" => 1.0,
        "K" | "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

/// Splits `"2.5 us"` into `(2.5, "us")`. Whitespace between number and unit is allowed.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let num: f64 = s[..end].replace('_', "").parse().ok()?;
    Some((num, s[end..].trim()))
}

macro_rules! serde_via_str {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_via_str!(SimTime);
serde_via_str!(Bytes);
serde_via_str!(Bandwidth);
serde_via_str!(Power);

/// JSON Schema of a unit string, for `llmsim schema`: the patterns accept what `FromStr` does
/// (checked against it in llmsim-cli's schema tests).
macro_rules! schema_via_str {
    ($t:ty, $name:literal, $pattern:literal, $description:literal, [$($example:literal),*]) => {
        impl schemars::JsonSchema for $t {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "pattern": $pattern,
                    "description": $description,
                    "examples": [$($example),*],
                })
            }
        }
    };
}
schema_via_str!(
    SimTime,
    "Time",
    r"^\s*([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)\s*(ps|ns|us|µs|ms|s)\s*$",
    "A time: a number with a unit ps, ns, us (or µs), ms, s.",
    ["500ns", "2.5us", "1ms"]
);
schema_via_str!(
    Bytes,
    "Size",
    r"^\s*([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)\s*(|k|K|M|G|T|Ki|Mi|Gi|Ti)B?\s*$",
    "A byte count: a number with an optional unit B, KB/MB/GB/TB (powers of 10) or KiB/MiB/GiB/TiB (powers of 2).",
    ["32MiB", "96GiB", "1GB"]
);
schema_via_str!(
    Bandwidth,
    "Bandwidth",
    r"^\s*([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)\s*(|k|K|M|G|T|Ki|Mi|Gi|Ti)(bps|b/s|Bps|B/s)\s*$",
    "A rate: a number with a unit in bits (bps, Kbps, Mbps, Gbps, Tbps; b/s) or bytes (Bps, GBps, GB/s; powers of 10, or Ki/Mi/Gi/Ti for powers of 2).",
    ["400Gbps", "900GBps", "4TB/s"]
);
schema_via_str!(
    Power,
    "Power",
    r"^\s*([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9][0-9_]*)\s*(W|kW|KW|mW)\s*$",
    "Electrical power: a number with the unit W, kW or mW.",
    ["500W", "700W", "1.2kW"]
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_times() {
        assert_eq!("1us".parse::<SimTime>().unwrap(), SimTime::from_us(1));
        assert_eq!("2.5 ms".parse::<SimTime>().unwrap(), SimTime(2_500_000_000));
        assert_eq!("10ps".parse::<SimTime>().unwrap(), SimTime(10));
        assert_eq!("1s".parse::<SimTime>().unwrap(), SimTime(SimTime::PS_PER_S));
        assert!("1 sec".parse::<SimTime>().is_err());
        assert!("us".parse::<SimTime>().is_err());
        assert!("-1us".parse::<SimTime>().is_err());
    }

    #[test]
    fn checked_time_constructors_refuse_what_u64_picoseconds_cannot_hold() {
        assert_eq!(SimTime::checked_from_secs_f64(1.5), Some(SimTime(1_500_000_000_000)));
        assert_eq!(SimTime::checked_from_us_f64(0.0), Some(SimTime::ZERO));
        assert_eq!(SimTime::checked_from_secs_f64(18_446_744.074_5), None);
        assert_eq!(SimTime::checked_from_secs_f64(-1.0), None);
        assert_eq!(SimTime::checked_from_secs_f64(f64::NAN), None);
        assert_eq!(SimTime::checked_from_us_f64(f64::INFINITY), None);
        assert!(SimTime::checked_from_secs_f64(SimTime::MAX_SECS * 0.999).is_some());
        assert_eq!(SimTime::checked_from_ns(u64::MAX / 1000 + 1), None);
        assert_eq!(SimTime::checked_from_ns(7), Some(SimTime(7000)));
    }

    #[test]
    fn parses_sizes_decimal_and_binary() {
        assert_eq!("32MiB".parse::<Bytes>().unwrap(), Bytes(32 << 20));
        assert_eq!("32MB".parse::<Bytes>().unwrap(), Bytes(32_000_000));
        assert_eq!("1GiB".parse::<Bytes>().unwrap(), Bytes(1 << 30));
        assert_eq!("4096".parse::<Bytes>().unwrap(), Bytes(4096));
        assert_eq!("1.5KiB".parse::<Bytes>().unwrap(), Bytes(1536));
        assert!("0.3B".parse::<Bytes>().is_err(), "fractional bytes are rejected");
        assert!("32Mib".parse::<Bytes>().is_err());
    }

    #[test]
    fn parses_rates_bits_vs_bytes() {
        assert_eq!("400Gbps".parse::<Bandwidth>().unwrap(), Bandwidth::from_gbps(400));
        assert_eq!("900GBps".parse::<Bandwidth>().unwrap(), Bandwidth::from_gbytes_per_sec(900));
        assert_eq!("50GB/s".parse::<Bandwidth>().unwrap(), Bandwidth::from_gbps(400));
        assert_eq!("100Mbps".parse::<Bandwidth>().unwrap(), Bandwidth::from_mbps(100));
        let e = "400Gbsp".parse::<Bandwidth>().unwrap_err();
        assert!(e.to_string().contains("400Gbsp"), "{e}");
        assert!(e.to_string().contains("Gbps"), "{e}");
    }

    #[test]
    fn parses_power_with_a_required_unit() {
        assert_eq!("500W".parse::<Power>().unwrap(), Power::from_watts(500));
        assert_eq!("500 W".parse::<Power>().unwrap(), Power::from_watts(500));
        assert_eq!("1.2kW".parse::<Power>().unwrap(), Power::from_watts(1200));
        assert_eq!("750mW".parse::<Power>().unwrap(), Power::from_milliwatts(750));
        for bad in ["500", "W", "-500W", "500w", "500 watts", "5e2W"] {
            let e = bad.parse::<Power>().unwrap_err();
            assert!(e.to_string().contains("watts"), "{bad}: {e}");
        }
        assert_eq!(Power::from_watts(700).to_string(), "700W");
        assert_eq!("0.5W".parse::<Power>().unwrap().to_string(), "0.5W");
        assert_eq!(serde_json::from_str::<Power>("\"500W\"").unwrap(), Power::from_watts(500));
    }

    #[test]
    fn serialization_time_rounds_up() {
        // 1 byte at 8 bit/s is exactly one second.
        assert_eq!(Bandwidth::from_bps(8).time_to_send(Bytes(1)), SimTime(SimTime::PS_PER_S));
        // 1000 B at 400 Gbit/s = 8000 bit / 4e11 = 20 ns.
        assert_eq!(Bandwidth::from_gbps(400).time_to_send(Bytes(1000)), SimTime::from_ns(20));
        // 1 B at 3 bit/s = 8/3 s, rounded up.
        assert_eq!(Bandwidth::from_bps(3).time_to_send(Bytes(1)).0, 2_666_666_666_667);
        assert_eq!(Bandwidth::ZERO.time_to_send(Bytes(1)), SimTime::MAX);
    }

    #[test]
    fn display_round_trips_through_parse() {
        for s in ["1us", "2.500ms", "10ps", "3.000s"] {
            let t: SimTime = s.parse().unwrap();
            assert_eq!(t.to_string().parse::<SimTime>().unwrap(), t);
        }
        assert_eq!(Bytes::gib(1).to_string(), "1GiB");
        assert_eq!(Bandwidth::from_gbps(400).to_string(), "400Gbps");
    }

    #[test]
    fn serde_uses_unit_strings() {
        let b: Bandwidth = serde_json::from_str("\"400Gbps\"").unwrap();
        assert_eq!(b, Bandwidth::from_gbps(400));
        assert_eq!(serde_json::to_string(&Bytes::mib(4)).unwrap(), "\"4MiB\"");
        assert!(serde_json::from_str::<Bytes>("\"4 Mbit\"").is_err());
    }

    proptest::proptest! {
        #[test]
        fn bytes_display_parse_round_trip(n in 0u64..(1u64 << 50)) {
            let b = Bytes(n);
            // Exact multiples print without a fraction and so round-trip exactly.
            if n < 1024 || [1u64 << 10, 1 << 20, 1 << 30, 1 << 40].iter().any(|s| n >= *s && n % s == 0 && n / s < 1024 * 1024) {
                let txt = b.to_string();
                if !txt.contains('.') {
                    proptest::prop_assert_eq!(txt.parse::<Bytes>().unwrap(), b);
                }
            }
        }

        #[test]
        fn send_time_is_monotone_in_size(a in 0u64..1u64 << 40, d in 0u64..1u64 << 20, g in 1u64..1000) {
            let bw = Bandwidth::from_gbps(g);
            proptest::prop_assert!(bw.time_to_send(Bytes(a)) <= bw.time_to_send(Bytes(a + d)));
        }
    }
}
