//! Group hostname references in `run`, `setup` and `envs`:
//! `{task}-{i}.${SKYPILOT_JOBGROUP_NAME}` (braced or not) or
//! `{task}-{i}.{literal group name}`. SkyPilot resolves these only at run
//! time, so a typo in a task name or an index past `num_nodes` surfaces
//! hours in as a connection failure; skyc reports it at check.

use crate::suggest::{did_you_mean, some_of};
use crate::yaml::Node;
use crate::{Diagnostic, Rule, Source, Span};

/// One reference found in a text.
#[derive(Debug, PartialEq, Eq)]
pub struct Reference {
    /// Byte range of the task name within the text.
    pub task: std::ops::Range<usize>,
    /// Byte range of the node index within the text.
    pub index: std::ops::Range<usize>,
    /// The index, when written as a literal number.
    pub literal_index: Option<u64>,
}

const ENV_FORMS: [&str; 2] = ["${SKYPILOT_JOBGROUP_NAME}", "$SKYPILOT_JOBGROUP_NAME"];

fn is_host_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
}

/// Finds every `{task}-{i}.{group}` in `text`.
pub fn find_references(text: &str, group: &str) -> Vec<Reference> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(dot) = text[from..].find('.').map(|i| i + from) {
        from = dot + 1;
        let rest = &text[dot + 1..];
        let group_matches = ENV_FORMS.iter().any(|form| {
            rest.starts_with(form)
                // `$SKYPILOT_JOBGROUP_NAMEX` is another variable.
                && (form.ends_with('}')
                    || !rest.as_bytes().get(form.len()).is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_'))
        }) || (!group.is_empty()
            && rest.starts_with(group)
            && !rest.as_bytes().get(group.len()).copied().is_some_and(is_host_char));
        if !group_matches {
            continue;
        }
        let Some((index, literal_index)) = index_before(bytes, dot) else {
            continue;
        };
        // The index follows `-`; the task name is the host characters
        // before that dash.
        let dash = index.start - 1;
        let mut start = dash;
        while start > 0 && is_host_char(bytes[start - 1]) {
            start -= 1;
        }
        if start == dash {
            continue;
        }
        // A name glued to a variable (`${PREFIX}-0.`, `$P-0.`) is dynamic.
        if start > 0 && matches!(bytes[start - 1], b'$' | b'}' | b'{') {
            continue;
        }
        found.push(Reference {
            task: start..dash,
            index,
            literal_index,
        });
    }
    found
}

/// The node index ending right before `dot`, preceded by `-`: digits, or
/// a shell expansion (`${i}`, `$i`, `$((i+1))`), whose value is unknown.
fn index_before(bytes: &[u8], dot: usize) -> Option<(std::ops::Range<usize>, Option<u64>)> {
    let mut start = dot;
    while start > 0 && bytes[start - 1].is_ascii_digit() {
        start -= 1;
    }
    if start < dot {
        if start == 0 || bytes[start - 1] != b'-' {
            // A plain number (`v1.2.`), not an index after a dash.
            return None;
        }
        let text = std::str::from_utf8(&bytes[start..dot]).ok()?;
        return Some((start..dot, text.parse().ok()));
    }
    // `${i}` / `$((...))` / `$i` right before the dot.
    let end = dot;
    let begin = if bytes.get(end.checked_sub(1)?) == Some(&b'}') {
        let open = bytes[..end].iter().rposition(|&c| c == b'{')?;
        (open > 0 && bytes[open - 1] == b'$').then_some(open - 1)?
    } else if bytes.get(end - 1) == Some(&b')') {
        find_arith_open(bytes, end)?
    } else {
        let mut s = end;
        while s > 0 && (bytes[s - 1].is_ascii_alphanumeric() || bytes[s - 1] == b'_') {
            s -= 1;
        }
        (s < end && s > 0 && bytes[s - 1] == b'$').then_some(s - 1)?
    };
    (begin > 0 && bytes[begin - 1] == b'-').then_some((begin..end, None))
}

/// The `$((` that opens the `))` ending at `end`.
fn find_arith_open(bytes: &[u8], end: usize) -> Option<usize> {
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    if !text.ends_with("))") {
        return None;
    }
    text.rfind("$((")
}

/// The known tasks of a group: name and node count.
pub(crate) struct TaskTable<'a> {
    pub group: &'a str,
    pub tasks: Vec<(&'a str, u32)>,
    /// Node count by name (the first task of a name), for lookups that
    /// would be quadratic in a big group's references.
    nodes: std::collections::HashMap<&'a str, u32>,
}

impl<'a> TaskTable<'a> {
    pub(crate) fn new(group: &'a str, tasks: Vec<(&'a str, u32)>) -> Self {
        let mut nodes = std::collections::HashMap::with_capacity(tasks.len());
        for &(name, n) in &tasks {
            nodes.entry(name).or_insert(n);
        }
        Self {
            group,
            tasks,
            nodes,
        }
    }
}

/// Checks every reference in the string `node` (a `run`, `setup` or env
/// value); returns how many references it found.
pub(crate) fn check_text(
    source: &Source,
    node: &Node,
    text: &str,
    table: &TaskTable<'_>,
    out: &mut Vec<Diagnostic>,
) -> usize {
    let references = find_references(text, table.group);
    for r in &references {
        if out.len() >= crate::MAX_DIAGNOSTICS {
            // Locating each one is the costly part; none would be shown.
            break;
        }
        let name = &text[r.task.clone()];
        match table.nodes.get(name) {
            None => {
                let span = locate(source, node, text, r.task.clone());
                let mut d = Diagnostic::new(
                    Rule::UnknownHostTask,
                    span,
                    format!("no task named `{name}` in this group"),
                )
                .label("unknown task in this hostname");
                if let Some(s) = did_you_mean(name, table.tasks.iter().map(|(t, _)| *t)) {
                    d = d.did_you_mean(span, name, s);
                } else {
                    let names = table.tasks.iter().map(|(t, _)| *t);
                    d = d.help(format!("the group's tasks are: {}", some_of(names)));
                }
                out.push(d);
            }
            Some(nodes) => {
                if let Some(i) = r.literal_index.filter(|&i| i >= u64::from(*nodes)) {
                    let span = locate(source, node, text, r.index.clone());
                    let last = nodes.saturating_sub(1);
                    out.push(
                        Diagnostic::new(
                            Rule::HostIndexOutOfRange,
                            span,
                            format!(
                                "`{name}` has {nodes} node{}, so there is no `{name}-{i}`",
                                if *nodes == 1 { "" } else { "s" }
                            ),
                        )
                        .label(format!("node index out of range 0..={last}"))
                        .help(format!(
                            "use an index from 0 to {last}, or raise `num_nodes` of `{name}`"
                        )),
                    );
                }
            }
        }
    }
    references.len()
}

/// The source span of `range` within the string value of `node`: found
/// verbatim in the node's source text (true for block and plain scalars,
/// and quoted ones without escapes in the reference); the whole node
/// otherwise.
fn locate(source: &Source, node: &Node, text: &str, range: std::ops::Range<usize>) -> Span {
    let needle = &text[range.clone()];
    // Which occurrence of the line fragment around the match this is.
    let line_start = text[..range.start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[range.end..]
        .find('\n')
        .map_or(text.len(), |i| range.end + i);
    let fragment = &text[line_start..line_end];
    let nth = text[..line_start].matches(fragment).count();
    let raw = source.slice(node.span);
    if let Some((pos, _)) = raw.match_indices(fragment).nth(nth) {
        let at = pos + (range.start - line_start);
        if raw.get(at..at + needle.len()) == Some(needle) {
            return node.span.slice(at, at + needle.len());
        }
    }
    node.span
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(text: &str) -> Vec<(String, Option<u64>)> {
        find_references(text, "rlhf")
            .into_iter()
            .map(|r| (text[r.task].to_owned(), r.literal_index))
            .collect()
    }

    #[test]
    fn finds_every_form() {
        assert_eq!(
            refs("curl http://data-server-0.${SKYPILOT_JOBGROUP_NAME}:8000"),
            [("data-server".into(), Some(0))]
        );
        assert_eq!(
            refs("ping trainer-12.$SKYPILOT_JOBGROUP_NAME"),
            [("trainer".into(), Some(12))]
        );
        assert_eq!(refs("ping api-1.rlhf:80"), [("api".into(), Some(1))]);
        assert_eq!(
            refs("http://rollout-server-${i}.${SKYPILOT_JOBGROUP_NAME}:30001"),
            [("rollout-server".into(), None)]
        );
        assert_eq!(
            refs("x-$((N-1)).${SKYPILOT_JOBGROUP_NAME}"),
            [("x".into(), None)]
        );
    }

    #[test]
    fn ignores_lookalikes() {
        assert!(refs("${PREFIX}-0.${SKYPILOT_JOBGROUP_NAME}").is_empty());
        assert!(refs("v1.2.${SKYPILOT_JOBGROUP_NAME}").is_empty());
        assert!(refs("trainer-0.rlhfx").is_empty());
        assert!(refs("trainer-0.$SKYPILOT_JOBGROUP_NAME_X").is_empty());
        assert!(refs("echo ${SKYPILOT_JOBGROUP_NAME}").is_empty());
    }
}
