//! Shell quoting for every user value that reaches the batch script.
//!
//! Single quotes, written by hand rather than through a template engine's
//! escaper: inside `'...'` bash gives no character a meaning except `'`
//! itself, so the one rule (`'` becomes `'\''`) is the whole escaper and
//! is easy to check byte for byte. NUL cannot be carried by any shell
//! string; callers reject it first (see [`has_nul`]).

/// `s` as one bash word that expands to exactly `s`: bare when it holds
/// only characters no shell treats specially, single-quoted otherwise.
pub fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        return s.to_owned();
    }
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
        assert_eq!(quote("a\nb"), "'a\nb'");
        assert_eq!(quote("~"), "'~'");
    }
}
