//! Shell quoting for every user value that reaches the batch script.
//!
//! Written by hand rather than through a template engine's escaper, with
//! two forms that are easy to check byte for byte:
//!
//! - `'...'` for text without control characters: bash gives no character
//!   a meaning inside it except `'` itself, written `'\''`;
//! - `$'...'` for text with control characters (newlines above all), with
//!   `\\`, `\'`, `\n`, `\t` and `\xHH` escapes, so that the value stays on
//!   one line of the script. sbatch rewrites a hetjob's script line by line
//!   and drops empty lines, which would eat blank lines inside a quoted
//!   multi-line value; a value on one line also never starts a line with
//!   `#SBATCH`.
//!
//! NUL cannot be carried by any shell string; callers reject it first.

/// Whether `name` can be a shell variable (`export NAME=...`): a letter or
/// `_`, then letters, digits and `_`.
pub fn is_variable_name(name: &str) -> bool {
    name.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
        && name.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

/// `s` as one bash word that expands to exactly `s`: bare when it holds
/// only characters no shell treats specially, quoted otherwise.
pub fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 3);
    if !s.chars().any(char::is_control) {
        out.push('\'');
        for c in s.chars() {
            if c == '\'' {
                out.push_str("'\\''");
            } else {
                out.push(c);
            }
        }
        out.push('\'');
        return out;
    }
    out.push_str("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            // C1 controls, as UTF-8 bytes.
            c if c.is_control() => {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A value a shell string cannot hold.
pub(super) fn has_nul(s: &str) -> bool {
    s.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn plain_words_stay_bare() {
        assert_eq!(quote("trainer-0.demo"), "trainer-0.demo");
        assert_eq!(quote("a=b,c:d/e"), "a=b,c:d/e");
    }

    #[test]
    fn everything_else_is_single_quoted() {
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("$(x) `y` \"z\""), "'$(x) `y` \"z\"'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("a\nb"), "$'a\\nb'");
        assert_eq!(
            quote("a'\\\n\t\r\u{85}"),
            "$'a\\'\\\\\\n\\t\\x0d\\xc2\\x85'"
        );
        assert_eq!(quote("~"), "'~'");
    }
}
