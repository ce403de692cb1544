//! Which group a runtime command is about: an id, a name (`-n NAME`, as
//! `sky jobs logs -n` takes), or the newest group.

use skyc_runtime::store::{GroupRow, Store};
use std::path::Path;

/// A group id on the command line. A name in its place is told about `-n`
/// rather than about digits.
pub(crate) fn group_id(s: &str) -> Result<i64, String> {
    s.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
        format!(
            "`{s}` is not a group id (ids are the numbers `skyc status` lists); \
             to pick a group by its name, use `-n {s}`"
        )
    })
}

/// `-n NAME`: groups by name.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct ByName {
    /// The group named NAME (the newest one of that name) instead of an ID.
    #[arg(short = 'n', long = "name", value_name = "NAME")]
    pub(crate) name: Option<String>,
}

/// Why no group was found: said to the user, and exit status 102.
pub(crate) struct Missing(pub(crate) String);

/// The group `id`, else the newest one named `name`, else the newest.
pub(crate) fn one(
    store: &Store,
    dir: &Path,
    id: Option<i64>,
    name: Option<&str>,
) -> Result<Result<GroupRow, Missing>, String> {
    let found = match (id, name) {
        (Some(id), _) => store.group(id),
        (None, Some(name)) => store.groups_named(name).map(|g| g.into_iter().next()),
        (None, None) => store.latest_group(),
    }
    .map_err(|e| e.to_string())?;
    Ok(found.ok_or_else(|| {
        Missing(match (id, name) {
            (Some(id), _) => format!("no group {id} in {}", dir.display()),
            (None, Some(name)) => format!("no group named `{name}` in {}", dir.display()),
            (None, None) => format!("no group has run with state directory {}", dir.display()),
        })
    }))
}
