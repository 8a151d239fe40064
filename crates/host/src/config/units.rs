//! Durations (`"30s"`) and sizes (`"32MiB"`) in the config file.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A size in bytes, written `"32MiB"`, `"64KiB"`, `"1MB"`, `"512B"` or a
/// plain integer. Units: `B`, `KB`/`MB`/`GB` (powers of 1000),
/// `KiB`/`MiB`/`GiB` (powers of 1024), case-insensitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses `"32MiB"` and the like.
    ///
    /// # Errors
    /// A message naming the value when it is not a size.
    pub fn parse(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let bad = || {
            format!(
                "invalid size {s:?} (expected e.g. \"32MiB\", \"512KiB\", \"1MB\" or a number of bytes)"
            )
        };
        let n: u64 = num.parse().map_err(|_| bad())?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" | "k" => 1_000,
            "mb" | "m" => 1_000_000,
            "gb" | "g" => 1_000_000_000,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            _ => return Err(bad()),
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| format!("size {s:?} is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"32MiB\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size {v} (negative)")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// `#[serde(with = "units::duration")]`: `"30s"`, `"500ms"`, `"2m"`,
/// `"1h 30m"` (humantime syntax).
pub(crate) mod duration {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30s\" or \"500ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }

    /// Parses a humantime duration with a message naming the value.
    pub(crate) fn parse(v: &str) -> Result<Duration, String> {
        humantime::parse_duration(v.trim()).map_err(|e| {
            format!("invalid duration {v:?}: {e} (expected e.g. \"30s\", \"500ms\", \"2m\")")
        })
    }
}
