//! The command line as a controller's client: a state directory named
//! `k8s://NAMESPACE[@CONTEXT]` or `aws://REGION` (`--state-dir` or
//! `$SKYC_STATE_DIR`) is the controller's there (docs/controller.md).
//! `status`, `logs`, `cancel`, `pool status|down` and `pool apply
//! --workers` run on the controller as they would here (`skyc controller
//! answer`); `run`, `run --pool` and `pool apply FILE` plan here and
//! submit there (`skyc controller accept`); `dashboard` serves here what
//! the controller answers; `logs --controller` is the controller's own
//! log.

use super::exit::{OK, USAGE};
use super::out::errln;
use skyc_runtime::controller::remote::Remote;
use std::ffi::OsString;

/// The controller the command line's state directory names, if it names
/// one: `--state-dir`'s value, else `$SKYC_STATE_DIR`.
pub(crate) fn named(args: &[OsString]) -> Option<Result<Remote, String>> {
    let given = state_dir_arg(args).or_else(|| std::env::var_os("SKYC_STATE_DIR"))?;
    Remote::parse(given.to_str()?)
}

/// The value of the last `--state-dir` in `args`.
fn state_dir_arg(args: &[OsString]) -> Option<OsString> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--state-dir" {
            found = it.next().cloned();
        } else if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--state-dir=")) {
            found = Some(v.into());
        }
    }
    found
}

/// `args` (the program's, without its name) without `--state-dir`: the
/// controller gives its own.
pub(crate) fn without_state_dir(args: &[OsString]) -> Result<Vec<String>, String> {
    let mut kept = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            // The rest is not the command line's options.
            kept.push("--".to_owned());
            for a in it.by_ref() {
                kept.push(
                    a.to_str()
                        .ok_or_else(|| format!("{}: not UTF-8", a.to_string_lossy()))?
                        .to_owned(),
                );
            }
            break;
        }
        if a == "--state-dir" {
            it.next();
            continue;
        }
        let a = a
            .to_str()
            .ok_or_else(|| format!("{}: not UTF-8", a.to_string_lossy()))?;
        if !a.starts_with("--state-dir=") {
            kept.push(a.to_owned());
        }
    }
    Ok(kept)
}

/// Runs the command line `args` on the controller, its output here; its
/// exit status is the command's.
pub(crate) fn forward(remote: &Remote, args: &[OsString]) -> u8 {
    let args = match without_state_dir(args) {
        Ok(args) => args,
        Err(message) => {
            errln!("error: {message}");
            return USAGE;
        }
    };
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    match remote.run(&args, &mut stdout, &mut stderr) {
        Ok(code) => u8::try_from(code).unwrap_or(USAGE),
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// `skyc logs --controller` of a controller: its leading replica's log.
pub(crate) fn controller_log(remote: &Remote, follow: bool) -> u8 {
    match remote.controller_log(follow, &mut std::io::stdout()) {
        Ok(()) => OK,
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_state_dir_is_found_and_left_out() {
        let args = os(&["status", "--state-dir", "k8s://team", "--json"]);
        assert_eq!(state_dir_arg(&args), Some("k8s://team".into()));
        assert_eq!(without_state_dir(&args).unwrap(), ["status", "--json"]);
        let args = os(&["logs", "--state-dir=k8s://a@b", "3"]);
        assert_eq!(state_dir_arg(&args), Some("k8s://a@b".into()));
        assert_eq!(without_state_dir(&args).unwrap(), ["logs", "3"]);
        assert_eq!(state_dir_arg(&os(&["status"])), None);
    }
}
