//! Quantities as SkyPilot spells them: durations, cpus, memory and disk
//! sizes, ports, accelerators. Each parser returns the value or a short
//! reason; callers attach the span.

use crate::ir::{PortRange, Quantity};

/// Python's `float()` on a string: surrounding white space, a sign,
/// `inf`/`nan`, and `_` between digits are accepted.
pub(crate) fn python_float(text: &str) -> Option<f64> {
    let s = text.trim();
    if s.is_empty() || !underscores_between_digits(s) {
        return None;
    }
    let cleaned: String = s.chars().filter(|&c| c != '_').collect();
    // Rust accepts "inf"/"infinity"/"nan" in any case, as Python does, but
    // also forms Python rejects ("1." and ".5" are fine in both).
    cleaned.parse::<f64>().ok()
}

/// Python's `int()` on a string.
pub(crate) fn python_int(text: &str) -> Option<i64> {
    let s = text.trim();
    if s.is_empty() || !underscores_between_digits(s) {
        return None;
    }
    let cleaned: String = s.chars().filter(|&c| c != '_').collect();
    let digits = cleaned.trim_start_matches(['+', '-']);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    cleaned.parse().ok()
}

fn underscores_between_digits(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().all(|(i, &c)| {
        c != b'_'
            || (i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
    })
}

/// `termination_delay` and other `NUMBER[s|m|h|d|w]` durations, in seconds.
pub(crate) fn parse_duration(text: &str) -> Option<u64> {
    // SkyPilot's check is a Python `re.match` ending in `$`, which allows
    // one trailing newline (a block scalar `|` gives one).
    let text = text.strip_suffix('\n').unwrap_or(text);
    let (digits, unit) = match text.as_bytes().last()? {
        b'0'..=b'9' => (text, 1),
        c => (
            &text[..text.len() - 1],
            match c.to_ascii_lowercase() {
                b's' => 1,
                b'm' => 60,
                b'h' => 3600,
                b'd' => 86_400,
                b'w' => 604_800,
                _ => return None,
            },
        ),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// `cpus`: a positive number, or `N+`.
pub fn parse_cpus(text: &str) -> Result<Quantity, String> {
    let (number, at_least) = match text.strip_suffix('+') {
        Some(n) => (n, true),
        None => (text, false),
    };
    let value =
        python_float(number).ok_or_else(|| format!("`{text}` is not a number or `<number>+`"))?;
    check_positive(value, text)?;
    Ok(Quantity { value, at_least })
}

const MEMORY_UNITS: [(&str, f64); 10] = [
    ("kb", 1.0 / 1024.0 / 1024.0),
    ("ki", 1.0 / 1024.0 / 1024.0),
    ("mb", 1.0 / 1024.0),
    ("mi", 1.0 / 1024.0),
    ("gb", 1.0),
    ("gi", 1.0),
    ("tb", 1024.0),
    ("ti", 1024.0),
    ("pb", 1024.0 * 1024.0),
    ("pi", 1024.0 * 1024.0),
];

/// `memory`: GB (binary, as SkyPilot computes it), with an optional unit
/// (`kb ki mb mi gb gi tb ti pb pi`, any case) and an optional `+`.
pub fn parse_memory(text: &str, allow_zero: bool) -> Result<Quantity, String> {
    let (body, at_least) = match text.strip_suffix('+') {
        Some(b) => (b, true),
        None => (text, false),
    };
    let bad = || {
        format!(
            "`{text}` is not a size: use a number of GB (`16`), a number with a unit \
             (`16GB`, `512Mi`), or either with `+` for \"at least\""
        )
    };
    let value = match python_float(body) {
        Some(v) => v,
        None => {
            let lower = body.to_ascii_lowercase();
            let (number, factor) = MEMORY_UNITS
                .iter()
                .find_map(|(unit, factor)| lower.strip_suffix(unit).map(|n| (n, *factor)))
                .ok_or_else(bad)?;
            python_float(number).ok_or_else(bad)? * factor
        }
    };
    if !(allow_zero && value == 0.0) {
        check_positive(value, text)?;
    }
    Ok(Quantity { value, at_least })
}

fn check_positive(value: f64, text: &str) -> Result<(), String> {
    if !value.is_finite() {
        return Err(format!("`{text}` is not a finite number"));
    }
    if value <= 0.0 {
        return Err(format!("must be positive, found `{text}`"));
    }
    Ok(())
}

/// A size in SkyPilot's `^[0-9]+(unit)?$` form, in bytes: a bare number is
/// GB, and GB means GiB (`kb`/`ki` ... `pb`/`pi`, any case).
fn size_bytes(text: &str) -> Result<u128, String> {
    let lower = text.to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size"))?;
    let bytes_per_unit: u128 = match unit {
        "" | "gb" | "gi" => 1 << 30,
        "kb" | "ki" => 1 << 10,
        "mb" | "mi" => 1 << 20,
        "tb" | "ti" => 1 << 40,
        "pb" | "pi" => 1 << 50,
        _ => return Err(format!("`{text}` has an unknown unit")),
    };
    Ok(u128::from(number) * bytes_per_unit)
}

/// A volume's `size`: whole GiB, rounded up, at least 1 (`500Mi` is 1),
/// as SkyPilot's volume loader rounds it.
pub fn parse_volume_size(text: &str) -> Result<u64, String> {
    let gb = size_bytes(text)?.div_ceil(1 << 30);
    if gb == 0 {
        return Err("a volume's size must be no less than 1Gi".to_owned());
    }
    u64::try_from(gb).map_err(|_| format!("`{text}` is too large"))
}

/// `disk_size`: whole GB, from an integer or `^[0-9]+(unit)?$` (the schema
/// has checked the form).
pub fn parse_disk_size(text: &str) -> Result<u64, String> {
    let bytes = size_bytes(text)?;
    if !bytes.is_multiple_of(1 << 30) {
        return Err(format!("`{text}` is not a whole number of GB"));
    }
    let gb = u64::try_from(bytes >> 30).map_err(|_| format!("`{text}` is too large"))?;
    if gb == 0 {
        return Err(format!("must be positive, found `{text}`"));
    }
    Ok(gb)
}

/// One `ports` entry: `8080` or `10022-10040`.
pub(crate) fn parse_port_range(text: &str) -> Result<PortRange, String> {
    let port = |p: &str| -> Result<u16, String> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("`{text}` is not a port or a `from-to` range"));
        }
        match p.parse::<u32>() {
            Ok(n @ 1..=65535) => Ok(u16::try_from(n).unwrap_or(u16::MAX)),
            _ => Err(format!("port `{p}` is outside 1-65535")),
        }
    };
    match text.split_once('-') {
        None => {
            let p = port(text)?;
            Ok(PortRange { start: p, end: p })
        }
        Some((from, to)) => {
            let (start, end) = (port(from)?, port(to)?);
            if start > end {
                return Err(format!("the range `{text}` ends before it starts"));
            }
            Ok(PortRange { start, end })
        }
    }
}

/// An accelerator request `NAME` or `NAME:COUNT` (count may be fractional).
/// Memory forms (`80GB+`, `nvidia:80GB:8`) are returned as `name`
/// unchanged with their count, since they select from a catalog.
pub(crate) fn parse_accelerator(text: &str) -> Result<(String, f64), String> {
    let parts: Vec<&str> = text.split(':').collect();
    let is_memory = |s: &str| {
        let s = s.strip_suffix('+').unwrap_or(s);
        let b = s.as_bytes();
        b.len() >= 3
            && b[..b.len() - 2].iter().all(u8::is_ascii_digit)
            && matches!(b[b.len() - 2].to_ascii_lowercase(), b'g' | b'm' | b't')
            && b[b.len() - 1].eq_ignore_ascii_case(&b'b')
    };
    let count = |c: &str| -> Result<f64, String> {
        let n = python_float(c).ok_or_else(|| format!("`{c}` in `{text}` is not a count"))?;
        if !n.is_finite() || n <= 0.0 {
            return Err(format!("the count in `{text}` must be positive"));
        }
        Ok(n)
    };
    match parts.as_slice() {
        [name] => Ok(((*name).to_owned(), 1.0)),
        [maker, memory, n] if is_memory(memory) => {
            let n =
                python_int(n).ok_or_else(|| format!("`{n}` in `{text}` is not a whole count"))?;
            if n <= 0 {
                return Err(format!("the count in `{text}` must be positive"));
            }
            #[allow(clippy::cast_precision_loss)]
            Ok((format!("{maker}:{memory}"), n as f64))
        }
        [memory, n] if is_memory(memory) => {
            let n =
                python_int(n).ok_or_else(|| format!("`{n}` in `{text}` is not a whole count"))?;
            #[allow(clippy::cast_precision_loss)]
            Ok(((*memory).to_owned(), n as f64))
        }
        [_maker, memory] if is_memory(memory) => Ok((text.to_owned(), 1.0)),
        [name, n] => Ok(((*name).to_owned(), count(n)?)),
        _ => Err(format!(
            "`{text}` is not `NAME` or `NAME:COUNT` (e.g. `H100:8`)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Some(30));
        assert_eq!(parse_duration("30s"), Some(30));
        assert_eq!(parse_duration("5M"), Some(300));
        assert_eq!(parse_duration("1h"), Some(3600));
        assert_eq!(parse_duration("2d"), Some(172_800));
        assert_eq!(parse_duration("1w"), Some(604_800));
        for bad in ["", "s", "30x", "30 s", "-5", "1.5m", "+3"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    fn parse_memory_t(text: &str) -> Result<Quantity, String> {
        parse_memory(text, false)
    }

    #[test]
    fn memory_and_cpus() {
        assert_eq!(
            parse_memory_t("16+").unwrap(),
            Quantity {
                value: 16.0,
                at_least: true
            }
        );
        assert_eq!(parse_memory_t("512Mi").unwrap().value, 0.5);
        assert_eq!(parse_memory_t("1TB").unwrap().value, 1024.0);
        assert!(parse_memory_t("0").is_err());
        // Python's float() takes the space: SkyPilot reads "16 GB" as 16.
        assert_eq!(parse_memory_t("16 GB").unwrap().value, 16.0);
        assert!(parse_memory_t("16 G B").is_err());
        assert_eq!(parse_cpus("0.5").unwrap().value, 0.5);
        assert!(parse_cpus("4++").is_err());
        assert!(parse_cpus("-1").is_err());
    }

    #[test]
    fn ports_and_disks() {
        assert_eq!(
            parse_port_range("8080").unwrap(),
            PortRange {
                start: 8080,
                end: 8080
            }
        );
        assert_eq!(
            parse_port_range("10-20").unwrap(),
            PortRange { start: 10, end: 20 }
        );
        for bad in ["0", "70000", "20-10", "abc", "1-", "-1"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_disk_size("100").unwrap(), 100);
        assert_eq!(parse_disk_size("1TB").unwrap(), 1024);
        assert!(parse_disk_size("0").is_err());
        assert!(parse_disk_size("512MB").is_err());
    }

    #[test]
    fn accelerators() {
        assert_eq!(parse_accelerator("H100").unwrap(), ("H100".into(), 1.0));
        assert_eq!(parse_accelerator("H100:8").unwrap(), ("H100".into(), 8.0));
        assert_eq!(parse_accelerator("T4:0.5").unwrap(), ("T4".into(), 0.5));
        assert!(parse_accelerator("H100:0").is_err());
        assert!(parse_accelerator("H100:x").is_err());
        assert_eq!(parse_accelerator("80GB+:8").unwrap(), ("80GB+".into(), 8.0));
    }
}
