//! "Did you mean" for misspelled names.

/// The candidate closest to `word`, if it is close enough to be a likely
/// typo (the same cut-off spirit as Python's `difflib.get_close_matches`).
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word_lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| {
            let score =
                strsim::normalized_damerau_levenshtein(&word_lower, &c.to_ascii_lowercase());
            (score, c)
        })
        .filter(|&(score, _)| score >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
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
