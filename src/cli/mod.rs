//! The command line: one module per subcommand, one per target's options
//! (`local`, `slurm`, `k8s`, `aws`), and what they share (input, output,
//! reports, selection, tables, following logs).

mod aws;
mod aws_controller;
mod build;
mod cancel;
mod catalog;
mod check;
mod completions;
mod controller;
mod crash;
mod dashboard;
mod exit;
mod files;
mod follow;
mod history;
mod input;
mod jobs;
mod k8s;
mod local;
mod logs;
mod lsp;
pub(crate) mod out;
mod pool;
mod remote;
mod report;
mod run;
mod schema;
mod select;
mod sky_config;
mod slurm;
mod state;
mod status;
mod storage;
mod table;
mod target;
mod volume;

use clap::{Parser, Subcommand};
use out::errln;
use std::process::ExitCode;

pub(crate) use exit::{INVALID, OK, USAGE};

#[derive(Parser)]
#[command(
    name = "skyc",
    version,
    about = "Compiler and runtime for SkyPilot Job Groups",
    long_about = "skyc checks SkyPilot Job Group files, lowers them to a Kubernetes JobSet, \
                  a Slurm batch script or AWS and GCP instance specs, and runs them on this \
                  machine, on a Slurm cluster, on Kubernetes or on AWS EC2; pools of warm \
                  workers run jobs on this machine; `skyc dashboard` shows it all on a page.",
    after_help = "Exit status: 0 success; 1 the file has errors; 2 bad usage or I/O; for `run` \
                  and `logs`: 100 the group FAILED, 101 not finished, 102 no such group, \
                  103 CANCELLED."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Check(check::Args),
    Build(build::Args),
    Run(run::Args),
    Status(status::Args),
    Logs(logs::Args),
    Cancel(cancel::Args),
    Dashboard(dashboard::Args),
    /// Pools of warm workers that jobs are submitted to.
    #[command(subcommand)]
    Pool(pool::Command),
    /// Volumes that tasks mount, made beforehand.
    #[command(subcommand)]
    Volume(volume::Command),
    /// The buckets skyc made for the groups' storage.
    #[command(subcommand)]
    Storage(storage::Command),
    /// skyc's controller: the supervisor where the groups run.
    #[command(subcommand)]
    Controller(controller::Command),
    Schema(schema::Args),
    Completions(completions::Args),
    Lsp(lsp::Args),
}

pub(crate) fn main() -> ExitCode {
    crash::abort_on_panic();
    // The supervisor, started by skyc itself: dispatched before argument
    // parsing.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).and_then(|a| a.to_str()) == Some("__supervise") {
        return internal_supervise(&args[2..]);
    }
    // A local node's files, set in place before its command starts.
    if args.get(1).and_then(|a| a.to_str()) == Some(skyc_runtime::files::node::ARG) {
        let error = skyc_runtime::files::node::main(&args[2..]);
        errln!("skyc: {error}");
        return ExitCode::from(INVALID);
    }
    // The supervisor's helper that starts node agents.
    if args.get(1).and_then(|a| a.to_str()) == Some(skyc_runtime::local::spawner::ARG) {
        return match skyc_runtime::local::spawner::serve() {
            Ok(()) => ExitCode::from(OK),
            Err(e) => {
                errln!("skyc spawn helper: {e}");
                ExitCode::from(INVALID)
            }
        };
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { USAGE } else { OK });
        }
    };
    // A controller's state directory: the command acts there.
    if let Some(remote) = remote::named(&args[1..])
        && let Some(code) = through_controller(&cli.command, remote, &args[1..])
    {
        return ExitCode::from(code);
    }
    ExitCode::from(dispatch(cli.command))
}

/// What a command does when its state directory names a controller's:
/// `None` for those that act here (`run` submits there itself; those
/// with no state take no notice of it).
fn through_controller(
    command: &Command,
    remote: Result<skyc_runtime::controller::remote::Remote, String>,
    args: &[std::ffi::OsString],
) -> Option<u8> {
    if matches!(
        command,
        Command::Check(_)
            | Command::Build(_)
            | Command::Schema(_)
            | Command::Completions(_)
            | Command::Lsp(_)
    ) {
        return None;
    }
    let remote = match remote {
        Ok(remote) => remote,
        Err(message) => {
            errln!("error: {message}");
            return Some(USAGE);
        }
    };
    let remote = &remote;
    match command {
        Command::Check(_)
        | Command::Build(_)
        | Command::Run(_)
        | Command::Controller(_)
        | Command::Schema(_)
        | Command::Completions(_)
        | Command::Lsp(_) => None,
        // A file is planned here, then submitted there.
        Command::Pool(pool::Command::Apply(apply)) if apply.has_file() => None,
        // Served here, each request answered there.
        Command::Dashboard(dashboard) if !dashboard.answers() => None,
        Command::Logs(logs) if logs.controller() => {
            Some(remote::controller_log(remote, logs.follows()))
        }
        Command::Status(_)
        | Command::Logs(_)
        | Command::Cancel(_)
        | Command::Pool(
            pool::Command::Status(_) | pool::Command::Down(_) | pool::Command::Apply(_),
        ) => Some(remote::forward(remote, args)),
        Command::Dashboard(_) | Command::Volume(_) | Command::Storage(_) => {
            let name = args
                .iter()
                .take_while(|a| !a.to_string_lossy().starts_with('-'))
                .take(2)
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ");
            errln!(
                "error: `skyc {name}` does not act through a controller yet: give it a local \
                 --state-dir (docs/controller.md)"
            );
            Some(USAGE)
        }
    }
}

/// Runs a parsed command line.
fn dispatch(command: Command) -> u8 {
    match command {
        Command::Check(args) => check::run(&args),
        Command::Build(args) => build::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Logs(args) => logs::run(&args),
        Command::Cancel(args) => cancel::run(&args),
        Command::Dashboard(args) => dashboard::run(&args),
        Command::Pool(command) => pool::run(&command),
        Command::Volume(command) => volume::run(&command),
        Command::Storage(command) => storage::run(&command),
        Command::Controller(command) => controller::run(&command),
        Command::Schema(args) => schema::run(&args),
        Command::Completions(args) => completions::run(&args),
        Command::Lsp(args) => {
            crash::unwind_on_panic();
            lsp::run(&args)
        }
    }
}

/// `--env KEY=VALUE`.
pub(crate) fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))?;
    let valid = k
        .bytes()
        .enumerate()
        .all(|(i, b)| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()));
    if k.is_empty() || !valid {
        return Err(format!("`{k}` is not an environment variable name"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// `skyc __supervise DIR`: the supervisor of a state directory.
fn internal_supervise(args: &[std::ffi::OsString]) -> ExitCode {
    let Some(dir) = args.first() else {
        return ExitCode::from(USAGE);
    };
    match skyc_runtime::supervisor::main(std::path::Path::new(dir)) {
        Ok(()) => ExitCode::from(OK),
        Err(e) => {
            errln!("skyc supervisor: {e}");
            ExitCode::from(INVALID)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every command's `--help`, as users read it: what a change to the
    /// argument types must leave as it is (or show in review).
    #[test]
    fn every_commands_help() {
        fn walk(cmd: &mut clap::Command, path: &str, out: &mut String) {
            let help = cmd.render_long_help().to_string();
            out.push_str(&format!("===== {path} --help\n{help}\n"));
            let names: Vec<String> = cmd
                .get_subcommands()
                .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                .map(|c| c.get_name().to_owned())
                .collect();
            for name in names {
                let sub = cmd.find_subcommand_mut(&name).expect("listed");
                walk(sub, &format!("{path} {name}"), out);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let mut out = String::new();
        walk(&mut cmd, "skyc", &mut out);
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots/cli"));
        settings.set_prepend_module_to_snapshot(false);
        settings.bind(|| insta::assert_snapshot!("help", out));
    }
}
