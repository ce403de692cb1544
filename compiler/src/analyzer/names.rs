//! Naming rules: what SkyPilot accepts, and what a hostname needs.

/// A Job Group or header task name as `_load_job_group` checks it: only
/// letters, digits, `-` and `_`. (SkyPilot's check is Unicode-aware; skyc
/// takes ASCII only, since the name becomes a hostname.)
pub(crate) fn is_group_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `Task.validate_name`: `[a-zA-Z0-9]+(?:[._-]{1,2}[a-zA-Z0-9]+)*`, i.e.
/// starts and ends with a letter or digit, with runs of at most two
/// separators between.
pub(crate) fn is_task_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.is_empty() || !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return false;
    }
    let mut run = 0;
    for &c in b {
        if c.is_ascii_alphanumeric() {
            run = 0;
        } else if matches!(c, b'.' | b'_' | b'-') {
            run += 1;
            if run > 2 {
                return false;
            }
        } else {
            return false;
        }
    }
    true
}

/// An RFC 1123 label: lower-case letters, digits and `-`, starting and
/// ending with a letter or digit, at most 63 characters.
pub fn is_dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The DNS label a name would become: lower-cased, `_` and `.` to `-`.
pub(crate) fn dns_suggestion(name: &str) -> String {
    name.to_ascii_lowercase()
        .chars()
        .map(|c| if c == '_' || c == '.' { '-' } else { c })
        .collect::<String>()
        .trim_matches('-')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names() {
        for ok in ["a", "trainer", "ppo-trainer", "a.b", "a__b", "a-_b", "A1"] {
            assert!(is_task_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a_", "a---b", "a b", "a/b", "ä"] {
            assert!(!is_task_name(bad), "{bad}");
        }
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("rollout-server"));
        assert!(!is_dns_label("Trainer"));
        assert!(!is_dns_label("my_task"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert_eq!(dns_suggestion("My_Task"), "my-task");
    }
}
