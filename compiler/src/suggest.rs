//! "Did you mean" for misspelled names.

/// The candidate closest to `word`, if it is close enough to be a likely
/// typo (the same cut-off spirit as Python's `difflib.get_close_matches`).
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word_lower = word.to_ascii_lowercase();
    let word_len = word.chars().count();
    candidates
        .into_iter()
        // The score is at most shorter / longer length: skip candidates that
        // cannot reach the cut-off, which for a hostile 1 MB word are also
        // the costly ones.
        .filter(|c| {
            let len = c.chars().count();
            5 * word_len.min(len) >= 3 * word_len.max(len)
        })
        .map(|c| {
            let score =
                strsim::normalized_damerau_levenshtein(&word_lower, &c.to_ascii_lowercase());
            (score, c)
        })
        .filter(|&(score, _)| score >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `names` joined with `, `, at most ten of them and how many more: a help
/// line, not a dump (with 100,000 tasks and a diagnostic per unknown name,
/// listing them all costs gigabytes).
pub(crate) fn some_of<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    const SHOWN: usize = 10;
    let total = names.len();
    let mut list = names.take(SHOWN).collect::<Vec<_>>().join(", ");
    if total > SHOWN {
        list.push_str(&format!(", and {} more", total - SHOWN));
    }
    list
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn suggests_close_names_only() {
        let fields = ["run", "setup", "resources", "num_nodes", "envs"];
        assert_eq!(did_you_mean("runn", fields), Some("run"));
        assert_eq!(did_you_mean("resouces", fields), Some("resources"));
        assert_eq!(did_you_mean("num-nodes", fields), Some("num_nodes"));
        assert_eq!(did_you_mean("zzz", fields), None);
    }
}
