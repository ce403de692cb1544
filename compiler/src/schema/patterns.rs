//! The schemas' `pattern`s as plain Rust matchers, for skyc's own validator.
//!
//! Building a `regex` at run time cost more than the rest of `skyc check`
//! of a small file (the Unicode case-insensitive alternations most: 2 M
//! instructions for `infra` alone), so the validator's copies of the schemas
//! (`compiler/validator-schemas/`) name a `format` implemented here instead
//! of each `pattern`. `schemas/` keeps the patterns: editors read those.
//! Tests check that each matcher accepts exactly what its pattern's regex
//! does, and that the copies are `schemas/` with this substitution only.

#[cfg(test)]
type Matcher = fn(&str) -> bool;

/// `(pattern, format name, matcher)`: each `pattern` of `schemas/`. The
/// `validator` attributes in schema.rs name the same formats.
#[cfg(test)]
pub(super) const PATTERNS: &[(&str, &str, Matcher)] = &[
    (r"^[A-Za-z0-9_-]+$", "skyc-group-name", group_name),
    (r"^[0-9]+[smhdwSMHDW]?\n?$", "skyc-delay", delay),
    (
        "^(?i:aws|azure|gcp|ibm|lambda|scp|oci|kubernetes|runpod|vast|vsphere|cudo|fluidstack|paperspace|primeintellect|do|nebius|ssh|slurm|hyperbolic|seeweb|shadeform|yotta|mithril|verda)$",
        "skyc-cloud",
        cloud,
    ),
    (
        r"^(?:(?i:(aws|azure|gcp|ibm|lambda|scp|oci|runpod|vast|vsphere|cudo|fluidstack|paperspace|primeintellect|do|nebius|ssh|slurm|hyperbolic|seeweb|shadeform|yotta|mithril|verda))(?:/[^/]+(?:/[^/]+)?)?|\*(?:/[^/]+(?:/[^/]+)?)?|(?i:kubernetes|k8s)(?:/.+)?)$",
        "skyc-infra",
        infra,
    ),
    (
        "^[0-9]+(kb|ki|mb|mi|gb|gi|tb|ti|pb|pi|KB|KI|MB|MI|GB|GI|TB|TI|PB|PI|Kb|Ki|Mb|Mi|Gb|Gi|Tb|Ti|Pb|Pi)?$",
        "skyc-size",
        size,
    ),
    (
        r"^(?:(?i:(aws|azure|gcp|ibm|lambda|scp|oci|runpod|vast|vsphere|cudo|fluidstack|paperspace|primeintellect|do|nebius|ssh|slurm|hyperbolic|seeweb|shadeform|yotta|mithril|verda))(?:/[^/]+(?:/[^/]+)?)?|(?i:kubernetes|k8s)(?:/.+)?)$",
        "skyc-volume-infra",
        volume_infra,
    ),
    ("^[0-9]+(m|h|d|w|M|H|D|W)?$", "skyc-minutes", minutes),
    (
        "^(?i:jobs_and_ssh|jobs|none)$",
        "skyc-autostop-mode",
        autostop_mode,
    ),
    ("^(?i:dynamic_fallback)$", "skyc-spot-placer", spot_placer),
    (
        "^(?i:round_robin|least_load|instance_aware_least_load)$",
        "skyc-load-balancing",
        load_balancing,
    ),
    (
        "^(?i:S3|GCS|AZURE|R2|IBM|OCI|NEBIUS|COREWEAVE|VASTDATA|HF|VOLUME)$",
        "skyc-store",
        store,
    ),
    (
        "^(?i:MOUNT|COPY|MOUNT_CACHED)$",
        "skyc-storage-mode",
        storage_mode,
    ),
    (
        "^(?i:MODEL_CHECKPOINT_RO|MODEL_CHECKPOINT_RW|DATASET_RO|DATASET_RW)$",
        "skyc-volume-type",
        volume_type,
    ),
    ("^[0-9]+(b|k|m|g|t|p|B|K|M|G|T|P)?$", "skyc-bytes", bytes),
    (
        r"^(?:(?:[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:ms|[smhdwMy]))+|([-+]?(?:\d+(?:\.\d+)?|\.\d+)))$",
        "skyc-duration",
        duration,
    ),
    (
        "^(?:[-a-z0-9]+/)?[-a-z0-9]+$",
        "skyc-volume-name",
        volume_name,
    ),
    (r"^[^\n]*$", "skyc-one-line", one_line),
    (
        "^[a-zA-Z0-9._-][a-zA-Z0-9./_-]*$",
        "skyc-relative-path",
        relative_path,
    ),
];

const CLOUDS: [&str; 24] = [
    "aws",
    "azure",
    "gcp",
    "ibm",
    "lambda",
    "scp",
    "oci",
    "runpod",
    "vast",
    "vsphere",
    "cudo",
    "fluidstack",
    "paperspace",
    "primeintellect",
    "do",
    "nebius",
    "ssh",
    "slurm",
    "hyperbolic",
    "seeweb",
    "shadeform",
    "yotta",
    "mithril",
    "verda",
];

/// `(?i:word)` as the `regex` crate reads it: Unicode simple case folding,
/// under which `k` also matches KELVIN SIGN and `s` LATIN SMALL LETTER LONG S.
fn ci_eq(s: &str, word: &str) -> bool {
    let mut chars = s.chars();
    for w in word.chars() {
        let Some(c) = chars.next() else {
            return false;
        };
        let same = c.eq_ignore_ascii_case(&w)
            || (c == '\u{212A}' && w.eq_ignore_ascii_case(&'k'))
            || (c == '\u{17F}' && w.eq_ignore_ascii_case(&'s'));
        if !same {
            return false;
        }
    }
    chars.next().is_none()
}

fn ci_any(s: &str, words: &[&str]) -> bool {
    words.iter().any(|w| ci_eq(s, w))
}

/// `^[0-9]+` and the rest of `s`.
fn digits_then(s: &str) -> Option<&str> {
    let rest = s.trim_start_matches(|c: char| c.is_ascii_digit());
    (rest.len() < s.len()).then_some(rest)
}

pub(super) fn group_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(super) fn delay(s: &str) -> bool {
    let Some(rest) = digits_then(s) else {
        return false;
    };
    let rest = rest.strip_suffix('\n').unwrap_or(rest);
    rest.is_empty() || (rest.len() == 1 && "smhdwSMHDW".contains(rest))
}

pub(super) fn cloud(s: &str) -> bool {
    ci_any(s, &CLOUDS) || ci_eq(s, "kubernetes")
}

pub(super) fn infra(s: &str) -> bool {
    let (head, tail) = s.split_at(s.find('/').unwrap_or(s.len()));
    if ci_any(head, &["kubernetes", "k8s"]) {
        // `(?:/.+)?`: `.` is anything but a newline.
        return tail.is_empty() || (tail.len() > 1 && !tail.contains('\n'));
    }
    if head == "*" || ci_any(head, &CLOUDS) {
        // `(?:/[^/]+(?:/[^/]+)?)?`
        return tail.is_empty() || {
            let mut parts = tail[1..].split('/');
            let region = parts.next().is_some_and(|p| !p.is_empty());
            let zone = parts.next().is_none_or(|p| !p.is_empty());
            region && zone && parts.next().is_none()
        };
    }
    false
}

/// A volume's `infra`: a task's, without the `*` wildcard.
pub(super) fn volume_infra(s: &str) -> bool {
    !s.starts_with('*') && infra(s)
}

pub(super) fn size(s: &str) -> bool {
    match digits_then(s).map(str::as_bytes) {
        Some([]) => true,
        Some(&[a, b]) => {
            let unit = b"kmgtp".contains(&a.to_ascii_lowercase());
            let base = b"bi".contains(&b.to_ascii_lowercase());
            // `kb`, `KB` and `Kb`, but not `kB`.
            unit && base && (a.is_ascii_uppercase() || b.is_ascii_lowercase())
        }
        _ => false,
    }
}

fn one_of_suffix(s: &str, units: &str) -> bool {
    digits_then(s).is_some_and(|rest| rest.is_empty() || (rest.len() == 1 && units.contains(rest)))
}

pub(super) fn minutes(s: &str) -> bool {
    one_of_suffix(s, "mhdwMHDW")
}

pub(super) fn bytes(s: &str) -> bool {
    one_of_suffix(s, "bkmgtpBKMGTP")
}

pub(super) fn autostop_mode(s: &str) -> bool {
    ci_any(s, &["jobs_and_ssh", "jobs", "none"])
}

pub(super) fn spot_placer(s: &str) -> bool {
    ci_eq(s, "dynamic_fallback")
}

pub(super) fn load_balancing(s: &str) -> bool {
    ci_any(
        s,
        &["round_robin", "least_load", "instance_aware_least_load"],
    )
}

pub(super) fn store(s: &str) -> bool {
    ci_any(
        s,
        &[
            "S3",
            "GCS",
            "AZURE",
            "R2",
            "IBM",
            "OCI",
            "NEBIUS",
            "COREWEAVE",
            "VASTDATA",
            "HF",
            "VOLUME",
        ],
    )
}

pub(super) fn storage_mode(s: &str) -> bool {
    ci_any(s, &["MOUNT", "COPY", "MOUNT_CACHED"])
}

pub(super) fn volume_type(s: &str) -> bool {
    ci_any(
        s,
        &[
            "MODEL_CHECKPOINT_RO",
            "MODEL_CHECKPOINT_RW",
            "DATASET_RO",
            "DATASET_RW",
        ],
    )
}

/// `[-+]?(?:\d+(?:\.\d+)?|\.\d+)` at the start of `s`: the rest, if any.
/// Greedy is exact here: what may follow a number (a unit, the end) starts
/// with neither a digit nor a `.`.
fn number(s: &str) -> Option<&str> {
    fn fraction(s: &str) -> Option<&str> {
        s.strip_prefix('.').and_then(digits_then)
    }
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    match digits_then(s) {
        Some(rest) => Some(fraction(rest).unwrap_or(rest)),
        None => fraction(s),
    }
}

pub(super) fn duration(s: &str) -> bool {
    let Some(rest) = number(s) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    // `(?:NUMBER(?:ms|[smhdwMy]))+`; `ms` first: no number starts with `s`.
    let mut rest = s;
    while !rest.is_empty() {
        let Some(after) = number(rest) else {
            return false;
        };
        rest = match after.strip_prefix("ms") {
            Some(r) => r,
            None => match after.chars().next() {
                Some(c) if "smhdwMy".contains(c) => &after[1..],
                _ => return false,
            },
        };
    }
    true
}

pub(super) fn volume_name(s: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b == b'-' || b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    match s.split_once('/') {
        Some((a, b)) => part(a) && part(b),
        None => part(s),
    }
}

pub(super) fn one_line(s: &str) -> bool {
    !s.contains('\n')
}

pub(super) fn relative_path(s: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b"._-".contains(&b);
    match s.as_bytes() {
        [first, rest @ ..] => ok(*first) && rest.iter().all(|&b| ok(b) || b == b'/'),
        [] => false,
    }
}

#[cfg(test)]
mod tests {
    use super::PATTERNS;
    use proptest::prelude::*;
    use std::sync::LazyLock;

    /// Each pattern as the `regex` crate ran it before: translated from
    /// ECMA-262 as jsonschema's `validator` macro does.
    static REGEXES: LazyLock<Vec<regex::Regex>> = LazyLock::new(|| {
        PATTERNS
            .iter()
            .map(|(pattern, ..)| {
                regex::Regex::new(&jsonschema_regex::to_rust_regex(pattern).unwrap()).unwrap()
            })
            .collect()
    });

    /// Pieces of values: every enum word in several cases, the characters
    /// Unicode case folding adds (KELVIN SIGN, LONG S), numbers, units and
    /// separators.
    fn pieces() -> Vec<String> {
        let mut words: Vec<String> = Vec::new();
        for (pattern, ..) in PATTERNS {
            for word in pattern.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.len() > 1 {
                    words.push(word.to_owned());
                }
            }
        }
        let mut pieces = Vec::new();
        for w in words {
            pieces.push(w.to_ascii_uppercase());
            pieces.push(w.to_ascii_lowercase());
            let mut chars = w.chars();
            let first = chars.next().map(|c| c.to_ascii_uppercase());
            pieces.push(first.into_iter().chain(chars).collect());
            pieces.push(
                w.replace(['k', 'K'], "\u{212A}")
                    .replace(['s', 'S'], "\u{17F}"),
            );
        }
        for p in [
            "",
            "0",
            "7",
            "42",
            "1.5",
            ".5",
            "-",
            "+",
            ".",
            "/",
            "//",
            "*",
            "\n",
            "a",
            "é",
            " ",
            "_",
            "-",
            "k8s",
            "K8S",
            "\u{212A}8\u{17F}",
            "b",
            "k",
            "m",
            "g",
            "t",
            "p",
            "B",
            "K",
            "M",
            "G",
            "T",
            "P",
            "i",
            "I",
            "kb",
            "kB",
            "Kb",
            "KB",
            "ki",
            "Ki",
            "ms",
            "s",
            "h",
            "d",
            "w",
            "y",
            "M",
            "S",
            "H",
            "D",
            "W",
            "us-east-1",
            "zone-a",
            "ctx",
        ] {
            pieces.push(p.to_owned());
        }
        pieces
    }

    /// Every concatenation of up to three of these, against every pattern:
    /// the shapes the random pieces above seldom reach.
    #[test]
    fn matchers_agree_with_the_regexes_on_every_short_value() {
        let pieces = [
            "",
            "aws",
            "AwS",
            "do",
            "kubernetes",
            "K8S",
            "\u{212A}8\u{17F}",
            "\u{212A}ubernetes",
            "\u{17F}\u{17F}h",
            "jobs",
            "jobs_and_ssh",
            "NONE",
            "mount",
            "Mount_Cached",
            "s3",
            "dataset_ro",
            "round_robin",
            "dynamic_fallback",
            "/",
            "/x",
            "/x/y",
            "//",
            "*",
            "\n",
            ".",
            "-",
            "+",
            "0",
            "42",
            "1.5",
            ".5",
            "kb",
            "kB",
            "Kb",
            "KI",
            "ms",
            "s",
            "m",
            "M",
            "y",
            "h",
            "b",
            "P",
            "_",
            "é",
            " ",
        ];
        let mut value = String::new();
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    value.clear();
                    value.extend([a, b, c]);
                    for ((pattern, name, matcher), regex) in PATTERNS.iter().zip(REGEXES.iter()) {
                        assert_eq!(
                            matcher(&value),
                            regex.is_match(&value),
                            "{name} ({pattern}) on {value:?}"
                        );
                    }
                }
            }
        }
    }

    fn values() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(pieces()), 0..6).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn matchers_agree_with_the_regexes(value in values()) {
            for ((pattern, name, matcher), regex) in PATTERNS.iter().zip(REGEXES.iter()) {
                prop_assert_eq!(
                    matcher(&value), regex.is_match(&value),
                    "{} ({}) on {:?}", name, pattern, value
                );
            }
        }
    }
}
