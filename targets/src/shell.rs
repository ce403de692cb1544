//! Shell quoting, for every user value that reaches a shell: the Slurm
//! batch script, the cloud boot script, the commands the AWS runtime runs
//! on a node over SSH.
//!
//! Written by hand rather than through a template engine's escaper, with
//! forms that are easy to check byte for byte:
//!
//! - `'...'` for text without control characters: no POSIX shell gives a
//!   character a meaning inside it except `'` itself, written `'\''`
//!   ([`single_quoted`], which also carries newlines, for a script handed
//!   to a login shell whole);
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
    if !s.chars().any(char::is_control) {
        return single_quoted(s);
    }
    let mut out = String::with_capacity(s.len() + 3);
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

/// `s` in single quotes, each `'` written `'\''`: one word for any POSIX
/// shell, every byte literal (newlines too).
pub fn single_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// A value a shell string cannot hold.
pub(crate) fn has_nul(s: &str) -> bool {
    s.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::{is_variable_name, quote, single_quoted};

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

    #[test]
    fn single_quoting_keeps_every_byte_literal() {
        assert_eq!(single_quoted(""), "''");
        assert_eq!(single_quoted("plain"), "'plain'");
        assert_eq!(single_quoted("it's"), "'it'\\''s'");
        assert_eq!(single_quoted("a\nb $x `y`"), "'a\nb $x `y`'");
    }

    /// What `sh` makes of each quoted word is the text itself: no
    /// expansion, no second word, no command run.
    #[test]
    fn quoted_words_read_back_exactly() {
        let hostile = [
            "",
            "a b",
            "$(touch /tmp/skyc-pwned)",
            "`id`",
            "'; echo pwned; '",
            "it's \"quoted\" \\ $HOME *",
            "line\nbreak\ttab\r",
            "\u{85}unicode ü",
            "-n",
            "~root",
        ];
        for s in hostile {
            for (q, shell) in [(single_quoted(s), "sh"), (quote(s), "bash")] {
                let out = std::process::Command::new(shell)
                    .arg("-c")
                    .arg(format!("printf '%s' {q}"))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{q}");
                assert_eq!(String::from_utf8(out.stdout).unwrap(), s, "{q}");
            }
        }
    }

    #[test]
    fn variable_names() {
        assert!(is_variable_name("HF_TOKEN"));
        assert!(is_variable_name("_x1"));
        assert!(!is_variable_name("1x"));
        assert!(!is_variable_name("a-b"));
        assert!(!is_variable_name("a b"));
        assert!(!is_variable_name(""));
    }
}
