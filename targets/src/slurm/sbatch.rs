//! Validated `#SBATCH` options.
//!
//! sbatch reads `#SBATCH` lines itself, without a shell: it splits on
//! white space, strips `"`/`'` quotes and backslashes, treats `#` as a
//! comment, and takes any line containing `hetjob` or `packjob` (in any
//! case, anywhere) as a component separator. Quoting cannot protect a value
//! there, so a value is allowed only when it is made of characters none of
//! those rules touches; anything else is refused, never escaped.

use std::fmt;

/// One `--name[=value]` on an `#SBATCH` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbatchOption {
    name: String,
    value: Option<String>,
}

/// Options skyc sets itself from the IR (or that would break the hetjob
/// or the lifecycle), so a user may not set them.
const RESERVED: &[&str] = &[
    "array",
    "chdir",
    "cpus-per-task",
    "error",
    "export",
    "export-file",
    "get-user-env",
    "gpus",
    "gpus-per-node",
    "gpus-per-task",
    "gres",
    "hetjob",
    "input",
    "job-name",
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "no-kill",
    "no-requeue",
    "nodes",
    "ntasks",
    "ntasks-per-node",
    "open-mode",
    "output",
    "packjob",
    "parsable",
    "requeue",
    "test-only",
    "wait",
    "wrap",
];

/// Why a name or value cannot go on an `#SBATCH` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SbatchError {
    /// Not a long option name (`[a-z][a-z0-9-]*`, at least 2 characters).
    BadName(String),
    /// An option skyc sets itself.
    Reserved(String),
    /// A value with characters sbatch would reinterpret.
    BadValue { name: String, value: String },
}

impl fmt::Display for SbatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SbatchError::BadName(name) => write!(
                f,
                "`{}` is not an sbatch long option name (letters, digits and `-`, as in `mail-type`)",
                name.escape_debug()
            ),
            SbatchError::Reserved(name) => {
                write!(
                    f,
                    "`--{name}` is set by skyc from the group and cannot be overridden"
                )
            }
            SbatchError::BadValue { name, value } => write!(
                f,
                "`{}` cannot be the value of `--{name}` on an #SBATCH line: only letters, digits and \
                 `_.:/=,@%+-[]*` are safe there, and never the words `hetjob` or `packjob`",
                value.escape_debug()
            ),
        }
    }
}

impl SbatchOption {
    /// `--name`, or `--name=value`, checked.
    pub fn new(name: &str, value: Option<&str>) -> Result<Self, SbatchError> {
        let name = name.strip_prefix("--").unwrap_or(name);
        let name_ok = name.len() >= 2
            && name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok {
            return Err(SbatchError::BadName(name.to_owned()));
        }
        if RESERVED.contains(&name) || name.starts_with("het") || name.starts_with("pack") {
            return Err(SbatchError::Reserved(name.to_owned()));
        }
        if let Some(value) = value
            && !is_safe_value(value)
        {
            return Err(SbatchError::BadValue {
                name: name.to_owned(),
                value: value.to_owned(),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            value: value.map(str::to_owned),
        })
    }

    /// An option skyc itself writes (`partition`, `account`, `time`): the
    /// value is checked, the name is trusted.
    pub(crate) fn own(name: &'static str, value: &str) -> Result<Self, SbatchError> {
        if !is_safe_value(value) {
            return Err(SbatchError::BadValue {
                name: name.to_owned(),
                value: value.to_owned(),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            value: Some(value.to_owned()),
        })
    }

    /// `KEY`, `KEY=VALUE`, `--KEY` or `--KEY=VALUE`, as `--sbatch-option`
    /// takes it.
    pub fn parse(s: &str) -> Result<Self, SbatchError> {
        match s.split_once('=') {
            Some((name, value)) => Self::new(name, Some(value)),
            None => Self::new(s, None),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The `#SBATCH` line.
    pub fn line(&self) -> String {
        match &self.value {
            Some(v) => format!("#SBATCH --{}={v}", self.name),
            None => format!("#SBATCH --{}", self.name),
        }
    }
}

/// A value safe on an `#SBATCH` line: non-empty, at most 1024 bytes, from
/// a set with no white space, quote, backslash or `#`, and without the
/// words that split a hetjob.
pub fn is_safe_value(value: &str) -> bool {
    let chars_ok = !value.is_empty()
        && value.len() <= 1024
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:/=,@%+-[]*".contains(&b));
    let lower = value.to_ascii_lowercase();
    chars_ok && !lower.contains("hetjob") && !lower.contains("packjob")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_options() {
        let o = SbatchOption::parse("mail-type=END,FAIL").unwrap();
        assert_eq!(o.line(), "#SBATCH --mail-type=END,FAIL");
        assert_eq!(
            SbatchOption::parse("--exclusive").unwrap().line(),
            "#SBATCH --exclusive"
        );
        assert_eq!(
            SbatchOption::parse("constraint=[rack1*2]").unwrap().line(),
            "#SBATCH --constraint=[rack1*2]"
        );
    }

    #[test]
    fn refuses_what_sbatch_would_reread() {
        for bad in [
            "comment=a b",
            "comment=a#b",
            "comment=\"x\"",
            "comment='x'",
            "comment=a\\b",
            "comment=a\nb",
            "comment=my-HetJob",
            "comment=packjob",
            "comment=",
            "comment=$(id)",
        ] {
            assert!(
                matches!(SbatchOption::parse(bad), Err(SbatchError::BadValue { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            SbatchOption::parse("x"),
            Err(SbatchError::BadName(_))
        ));
        assert!(matches!(
            SbatchOption::parse("Mail=1"),
            Err(SbatchError::BadName(_))
        ));
        assert!(matches!(
            SbatchOption::parse("nodes=3"),
            Err(SbatchError::Reserved(_))
        ));
        assert!(matches!(
            SbatchOption::parse("het-group=1"),
            Err(SbatchError::Reserved(_))
        ));
    }
}
