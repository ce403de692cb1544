//! Plain-text tables: columns as wide as their widest cell, two spaces
//! apart, no trailing white space. A cell never breaks its row: control
//! characters (a multi-line error, say) become spaces.

/// A table under construction.
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|c| one_line(&c)).collect());
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `text` on one line: runs of white space and control characters become
/// one space.
pub(crate) fn one_line(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` cut to `max` characters, with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// How long ago `then_ms` was, as `sky jobs queue` says it: `12 secs ago`,
/// `1 min ago`, `3 hrs ago`, `2 days ago`.
pub(crate) fn ago(now_ms: i64, then_ms: i64) -> String {
    let secs = (now_ms - then_ms).max(0) / 1000;
    let (n, unit) = match secs {
        0..60 => (secs, "sec"),
        60..3600 => (secs / 60, "min"),
        3600..86400 => (secs / 3600, "hr"),
        _ => (secs / 86400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

/// Why something waits and for how long, for a DETAILS column:
/// `waiting 1m 5s: waiting for 1 cpu: ...` reads badly, so a reason that
/// says `waiting` itself is given its duration first.
pub(crate) fn waiting(now_ms: i64, why: &str, since_ms: i64) -> String {
    let why = truncate(&one_line(why), 100);
    waiting_phrase(&why, Some(&duration(now_ms - since_ms)))
}

/// `waiting[ how_long]: why`, or, for a reason that says `waiting`
/// itself, the reason with `how_long` after its first word.
pub(crate) fn waiting_phrase(why: &str, how_long: Option<&str>) -> String {
    let how_long = how_long.map(|d| format!(" {d}")).unwrap_or_default();
    match why.strip_prefix("waiting ") {
        Some(rest) => format!("waiting{how_long} {rest}"),
        None => format!("waiting{how_long}: {why}"),
    }
}

/// A duration as `45s`, `1m 5s`, `2h 3m`, `1d 4h`.
pub(crate) fn duration(ms: i64) -> String {
    let secs = ms.max(0) / 1000;
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_rows_stay_one_line() {
        let mut t = Table::new(&["ID", "NAME", "STATUS"]);
        t.row(vec!["1".into(), "a".into(), "FAILED".into()]);
        t.row(vec![
            "12".into(),
            "long-name\nwith a\tbreak".into(),
            String::new(),
        ]);
        assert_eq!(
            t.render(),
            "ID  NAME                    STATUS\n\
             1   a                       FAILED\n\
             12  long-name with a break\n"
        );
    }

    #[test]
    fn times_read_like_sky_jobs_queue() {
        assert_eq!(ago(10_000, 9_000), "1 sec ago");
        assert_eq!(ago(100_000, 0), "1 min ago");
        assert_eq!(ago(7_200_000, 0), "2 hrs ago");
        assert_eq!(ago(0, 5_000), "0 secs ago");
        assert_eq!(duration(45_900), "45s");
        assert_eq!(duration(65_000), "1m 5s");
        assert_eq!(duration(7_380_000), "2h 3m");
        assert_eq!(duration(100_000_000), "1d 3h");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
