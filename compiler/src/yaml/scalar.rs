//! Plain-scalar resolution as in PyYAML's `SafeLoader` (YAML 1.1), which is
//! what SkyPilot reads job files with.
//!
//! The cases that differ from YAML 1.2 and matter in job files:
//! `yes`/`no`/`on`/`off` are booleans, `1:30` is the integer 90
//! (sexagesimal), `0755` is octal 493, `1_000` is 1000, `1e3` is the *string*
//! "1e3" (a 1.1 float needs a dot), `08` is the string "08", and a bare `=`
//! cannot be loaded at all. Timestamps (`2024-01-01`) are kept as strings:
//! skyc has no date type, and no job field takes a date.

/// What a plain scalar resolves to.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer outside the 64-bit range (Python's ints are unbounded).
    IntOverflow,
    Float(f64),
    String,
    /// `=`: PyYAML resolves it to `tag:yaml.org,2002:value`, which the safe
    /// loader cannot construct.
    ValueTag,
    /// `<<`, only meaningful as a mapping key.
    Merge,
}

pub(super) fn resolve_plain(text: &str) -> Resolved {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true);
        }
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false);
        }
        "=" => return Resolved::ValueTag,
        "<<" => return Resolved::Merge,
        _ => {}
    }
    if is_int(text) {
        return construct_int(text).map_or(Resolved::IntOverflow, Resolved::Int);
    }
    if is_float(text) {
        return Resolved::Float(construct_float(text));
    }
    Resolved::String
}

fn strip_sign(s: &str) -> (bool, &str) {
    match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    }
}

fn all(s: &str, f: impl Fn(u8) -> bool) -> bool {
    s.bytes().all(f)
}

/// `[-+]?(0b[01_]+ | 0[0-7_]+ | 0 | [1-9][0-9_]* | 0x[0-9a-fA-F_]+ | [1-9][0-9_]*(:[0-5]?[0-9])+)`
pub(super) fn is_int(text: &str) -> bool {
    let (_, s) = strip_sign(text);
    if let Some(rest) = s.strip_prefix("0b") {
        return !rest.is_empty() && all(rest, |b| matches!(b, b'0' | b'1' | b'_'));
    }
    if let Some(rest) = s.strip_prefix("0x") {
        return !rest.is_empty() && all(rest, |b| b.is_ascii_hexdigit() || b == b'_');
    }
    if s == "0" {
        return true;
    }
    if let Some(rest) = s.strip_prefix('0') {
        return all(rest, |b| matches!(b, b'0'..=b'7' | b'_'));
    }
    let mut parts = s.split(':');
    let head = parts.next().unwrap_or("");
    let head_ok = head
        .as_bytes()
        .first()
        .is_some_and(|b| matches!(b, b'1'..=b'9'))
        && all(head, |b| b.is_ascii_digit() || b == b'_');
    head_ok && parts.all(is_sexagesimal_digit_group)
}

/// `:[0-5]?[0-9]`, without the colon.
fn is_sexagesimal_digit_group(p: &str) -> bool {
    match p.as_bytes() {
        [d] => d.is_ascii_digit(),
        [a, b] => matches!(a, b'0'..=b'5') && b.is_ascii_digit(),
        _ => false,
    }
}

fn construct_int(text: &str) -> Option<i64> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, s) = strip_sign(&cleaned);
    let magnitude: i128 = if s == "0" {
        0
    } else if let Some(b) = s.strip_prefix("0b") {
        i128::from_str_radix(b, 2).ok()?
    } else if let Some(h) = s.strip_prefix("0x") {
        i128::from_str_radix(h, 16).ok()?
    } else if let Some(o) = s.strip_prefix('0') {
        i128::from_str_radix(o, 8).ok()?
    } else if s.contains(':') {
        let mut value: i128 = 0;
        for part in s.split(':') {
            value = value
                .checked_mul(60)?
                .checked_add(part.parse::<i128>().ok()?)?;
        }
        value
    } else {
        s.parse().ok()?
    };
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// PyYAML's 1.1 float: a dot is required; `.inf`/`.nan`; sexagesimal with a
/// fraction.
pub(super) fn is_float(text: &str) -> bool {
    if matches!(text, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let (_, s) = strip_sign(text);
    if matches!(s, ".inf" | ".Inf" | ".INF") {
        return true;
    }
    // `\.[0-9_]+([eE][-+][0-9]+)?` takes no sign.
    if let Some(frac) = text.strip_prefix('.') {
        let (digits, exp) = split_exponent(frac);
        return !digits.is_empty()
            && all(digits, |b| b.is_ascii_digit() || b == b'_')
            && exp.is_none_or(is_exponent);
    }
    let Some(first) = s.as_bytes().first() else {
        return false;
    };
    if !first.is_ascii_digit() {
        return false;
    }
    let Some((int_part, frac)) = s.split_once('.') else {
        return false;
    };
    if int_part.contains(':') {
        // `[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*`
        let mut groups = int_part.split(':');
        let head = groups.next().unwrap_or("");
        return all(head, |b| b.is_ascii_digit() || b == b'_')
            && groups.all(is_sexagesimal_digit_group)
            && all(frac, |b| b.is_ascii_digit() || b == b'_');
    }
    let (digits, exp) = split_exponent(frac);
    all(int_part, |b| b.is_ascii_digit() || b == b'_')
        && all(digits, |b| b.is_ascii_digit() || b == b'_')
        && exp.is_none_or(is_exponent)
}

fn split_exponent(s: &str) -> (&str, Option<&str>) {
    match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// `[-+][0-9]+`: YAML 1.1 requires the exponent's sign.
fn is_exponent(e: &str) -> bool {
    let b = e.as_bytes();
    b.len() >= 2 && matches!(b[0], b'-' | b'+') && all(&e[1..], |c| c.is_ascii_digit())
}

fn construct_float(text: &str) -> f64 {
    let cleaned: String = text
        .chars()
        .filter(|&c| c != '_')
        .collect::<String>()
        .to_ascii_lowercase();
    let (negative, s) = strip_sign(&cleaned);
    let sign = if negative { -1.0 } else { 1.0 };
    if s == ".inf" {
        return sign * f64::INFINITY;
    }
    if s == ".nan" {
        return f64::NAN;
    }
    if s.contains(':') {
        let mut value = 0.0;
        for part in s.split(':') {
            value = value * 60.0 + part.parse::<f64>().unwrap_or(0.0);
        }
        return sign * value;
    }
    // Rust's float parser takes `1.`, `.5` and `1.0e+3` like Python's.
    sign * s.parse::<f64>().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::{Resolved, resolve_plain};

    #[test]
    fn resolves_like_pyyaml_safe_loader() {
        let cases: &[(&str, Resolved)] = &[
            ("", Resolved::Null),
            ("~", Resolved::Null),
            ("null", Resolved::Null),
            ("yes", Resolved::Bool(true)),
            ("Off", Resolved::Bool(false)),
            ("y", Resolved::String),
            ("1:30", Resolved::Int(90)),
            ("1:30:00", Resolved::Int(5400)),
            ("0755", Resolved::Int(493)),
            ("08", Resolved::String),
            ("0x1F", Resolved::Int(31)),
            ("0b101", Resolved::Int(5)),
            ("1_000", Resolved::Int(1000)),
            ("-12", Resolved::Int(-12)),
            ("+7", Resolved::Int(7)),
            ("0", Resolved::Int(0)),
            ("1e3", Resolved::String),
            ("1.0e+3", Resolved::Float(1000.0)),
            ("1.0e3", Resolved::String),
            ("1.5", Resolved::Float(1.5)),
            ("1.", Resolved::Float(1.0)),
            (".5", Resolved::Float(0.5)),
            ("-.5", Resolved::String),
            ("1:30.5", Resolved::Float(90.5)),
            ("30s", Resolved::String),
            ("4+", Resolved::String),
            ("=", Resolved::ValueTag),
            ("<<", Resolved::Merge),
            ("99999999999999999999", Resolved::IntOverflow),
        ];
        for (text, want) in cases {
            assert_eq!(&resolve_plain(text), want, "{text:?}");
        }
        assert!(matches!(resolve_plain(".inf"), Resolved::Float(f) if f.is_infinite()));
        assert!(matches!(resolve_plain(".NaN"), Resolved::Float(f) if f.is_nan()));
    }
}
