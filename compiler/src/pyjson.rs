//! Python's `json` text rules, where SkyPilot's verdict depends on them: it
//! fills env vars into `service` by editing `json.dumps` text, and parses a
//! readiness probe's `post_data` string with `json.loads`.

use std::fmt::Write as _;

/// `json.dumps(text)`: quoted, with everything outside printable ASCII
/// escaped (`ensure_ascii`).
pub(crate) fn dumps_str(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
    out
}

/// `json.loads(text)` when `text` must be exactly one JSON string: its
/// value, or `None` when it is not one (an unescaped quote or control
/// character, a bad escape). A lone surrogate becomes U+FFFD.
pub(crate) fn loads_str(text: &str) -> Option<String> {
    let mut p = Parser::new(text);
    let s = p.string().ok()?;
    p.at_end().then_some(s)
}

/// What `json.loads(text)` found at the top level.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Loaded {
    Null,
    Other,
}

/// Whether `json.loads(text)` succeeds (its extensions included: `NaN`,
/// `Infinity`, `-Infinity`), and why not.
pub(crate) fn loads(text: &str) -> Result<Loaded, String> {
    let mut p = Parser::new(text);
    p.whitespace();
    let null = p.rest().starts_with(b"null");
    p.value(0)?;
    p.whitespace();
    if !p.at_end() {
        return Err(p.error("extra data"));
    }
    Ok(if null { Loaded::Null } else { Loaded::Other })
}

/// Python's C scanner fails with a RecursionError near its recursion limit
/// (1000); skyc stops a little earlier.
const MAX_DEPTH: usize = 900;

struct Parser<'a> {
    bytes: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            bytes: text.as_bytes(),
            i: 0,
        }
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.i..]
    }

    fn at_end(&self) -> bool {
        self.i == self.bytes.len()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.i).copied()
    }

    fn error(&self, what: &str) -> String {
        format!("{what} at character {}", self.i)
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &str) -> bool {
        let found = self.rest().starts_with(word.as_bytes());
        if found {
            self.i += word.len();
        }
        found
    }

    fn value(&mut self, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(drop),
            _ if ["null", "true", "false", "NaN", "Infinity", "-Infinity"]
                .iter()
                .any(|w| self.literal(w)) =>
            {
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error("expecting a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), String> {
        if self.open(b'}') {
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.error("expecting a property name in double quotes"));
            }
            self.string()?;
            self.whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error("expecting `:`"));
            }
            self.i += 1;
            self.whitespace();
            self.value(depth + 1)?;
            if self.next_or_close(b'}')? {
                return Ok(());
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), String> {
        if self.open(b']') {
            return Ok(());
        }
        loop {
            self.value(depth + 1)?;
            if self.next_or_close(b']')? {
                return Ok(());
            }
        }
    }

    /// Past an object's or array's opening bracket; whether it closes at
    /// once (`close`).
    fn open(&mut self, close: u8) -> bool {
        self.i += 1;
        self.whitespace();
        let empty = self.peek() == Some(close);
        if empty {
            self.i += 1;
        }
        empty
    }

    /// After a member: past a `,` (false) or the `close` that ends the
    /// object or array (true).
    fn next_or_close(&mut self, close: u8) -> Result<bool, String> {
        self.whitespace();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                self.whitespace();
                Ok(false)
            }
            Some(c) if c == close => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(self.error(&format!("expecting `,` or `{}`", close as char))),
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, each optional part
    /// taken only when complete (what follows is then an error).
    fn number(&mut self) -> Result<(), String> {
        let digits = |p: &mut Self| {
            let start = p.i;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.i += 1;
            }
            p.i - start
        };
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => {
                self.i = start;
                return Err(self.error("expecting a value"));
            }
        }
        let mark = self.i;
        if self.peek() == Some(b'.') {
            self.i += 1;
            if digits(self) == 0 {
                self.i = mark;
            }
        }
        let mark = self.i;
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                self.i = mark;
            }
        }
        Ok(())
    }

    /// A string at the cursor, strictly (no raw control characters).
    fn string(&mut self) -> Result<String, String> {
        if self.peek() != Some(b'"') {
            return Err(self.error("expecting a string"));
        }
        self.i += 1;
        let mut out = String::new();
        loop {
            let rest = &self.rest();
            let run = rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .ok_or_else(|| self.error("unterminated string"))?;
            // Runs end at ASCII bytes, so they are whole UTF-8 sequences.
            out.push_str(std::str::from_utf8(&rest[..run]).map_err(|_| self.error("bad text"))?);
            self.i += run;
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    self.escape(&mut out)?;
                }
                _ => return Err(self.error("invalid control character")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), String> {
        let c = self
            .peek()
            .ok_or_else(|| self.error("unterminated string"))?;
        self.i += 1;
        out.push(match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                let low = if (0xd800..0xdc00).contains(&unit) && self.rest().starts_with(b"\\u") {
                    let mark = self.i;
                    self.i += 2;
                    let low = self.hex4()?;
                    if (0xdc00..0xe000).contains(&low) {
                        Some(low)
                    } else {
                        self.i = mark;
                        None
                    }
                } else {
                    None
                };
                let code = match low {
                    Some(low) => 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00),
                    None => unit,
                };
                char::from_u32(code).unwrap_or('\u{fffd}')
            }
            _ => return Err(self.error("invalid escape")),
        });
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .rest()
            .get(..4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error("invalid \\uXXXX escape"))?;
        self.i += 4;
        u32::from_str_radix(digits, 16).map_err(|_| self.error("invalid \\uXXXX escape"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_escapes_like_python() {
        assert_eq!(dumps_str("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(dumps_str("é😀\u{7f}"), r#""\u00e9\ud83d\ude00\u007f""#);
    }

    #[test]
    fn loads_str_round_trips_and_refuses_broken_strings() {
        for s in ["", "plain", "q\"uote", "é😀", "tab\there"] {
            assert_eq!(loads_str(&dumps_str(s)).as_deref(), Some(s));
        }
        assert_eq!(loads_str(r#""a\nb""#).as_deref(), Some("a\nb"));
        assert_eq!(loads_str(r#""a"b""#), None);
        assert_eq!(loads_str("\"a\nb\""), None);
        assert_eq!(loads_str(r#""a\qb""#), None);
        assert_eq!(loads_str(r#""a\""#), None);
    }

    #[test]
    fn loads_accepts_what_python_accepts() {
        for ok in [
            "{}",
            " [1, -2.5e+3, \"x\", null, true, false] ",
            "NaN",
            "-Infinity",
            "{\"a\": {\"b\": [0]}}",
            "\"\\ud800\"",
        ] {
            assert!(loads(ok).is_ok(), "{ok}");
        }
        assert_eq!(loads(" null "), Ok(Loaded::Null));
        for bad in [
            "", "{bad", "[1,]", "01", "1.", "-", "{'a': 1}", "[1] x", "\"\t\"", "nul",
        ] {
            assert!(loads(bad).is_err(), "{bad}");
        }
        assert!(loads(&"[".repeat(2000)).is_err());
    }
}
