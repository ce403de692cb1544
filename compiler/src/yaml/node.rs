//! The YAML tree every later stage reads: values resolved the way SkyPilot's
//! PyYAML loader resolves them, each with the byte span it came from.

use crate::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub value: Value,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub key: Node,
    pub value: Node,
}

impl Node {
    pub fn new(value: Value, span: Span) -> Self {
        Self { value, span }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self.value {
            Value::Int(i) => Some(i),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// The entry whose key is the string `key`.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.as_map()?.iter().find(|e| e.key.as_str() == Some(key))
    }

    /// The value under the string key `key`.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|e| &e.value)
    }

    /// The value under `key`, treating an explicit null like an absent key,
    /// as SkyPilot does for top-level fields.
    pub fn get_present(&self, key: &str) -> Option<&Node> {
        self.get(key).filter(|n| !n.is_null())
    }

    /// What the value is called in messages ("a string", "a list", ...).
    pub fn type_name(&self) -> &'static str {
        self.value.type_name()
    }

    /// The text Python's `str()` gives this scalar: SkyPilot stringifies env
    /// values and keys this way (`yes` becomes `True`).
    pub fn python_str(&self) -> Option<String> {
        Some(match &self.value {
            Value::Null => "None".to_owned(),
            Value::Bool(true) => "True".to_owned(),
            Value::Bool(false) => "False".to_owned(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => python_float_repr(*f),
            Value::String(s) => s.clone(),
            Value::Seq(_) | Value::Map(_) => return None,
        })
    }
}

impl Node {
    /// Python's `str()` of any loaded value (lists and mappings as their
    /// repr): SkyPilot stringifies `envs` and `secrets` values this way
    /// before validating them.
    pub fn python_literal(&self) -> String {
        if let Some(s) = self.python_str() {
            return s;
        }
        let inner = |n: &Node| match &n.value {
            Value::String(s) => format!("'{s}'"),
            _ => n.python_literal(),
        };
        match &self.value {
            Value::Seq(items) => format!(
                "[{}]",
                items.iter().map(inner).collect::<Vec<_>>().join(", ")
            ),
            Value::Map(entries) => format!(
                "{{{}}}",
                entries
                    .iter()
                    .map(|e| format!("{}: {}", inner(&e.key), inner(&e.value)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => String::new(),
        }
    }
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::String(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Python's `repr(float)`: shortest round-trip digits, `1e+16` past 1e16.
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        // Rust's `{:e}` gives `1e16`, Python `1e+16`; mantissa digits agree.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f:?}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::python_float_repr;

    #[test]
    fn floats_print_like_python() {
        assert_eq!(python_float_repr(1.0), "1.0");
        assert_eq!(python_float_repr(0.5), "0.5");
        assert_eq!(python_float_repr(1500.0), "1500.0");
        assert_eq!(python_float_repr(1e16), "1e+16");
        assert_eq!(python_float_repr(1.5e-5), "1.5e-05");
        assert_eq!(python_float_repr(-0.0), "-0.0");
    }
}
