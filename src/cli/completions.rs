//! `skyc completions SHELL`: a completion script for a shell.

use super::OK;
use clap::CommandFactory;
use clap_complete::Shell;

/// Print a shell completion script (e.g. `skyc completions bash >
/// /etc/bash_completion.d/skyc`, or `source <(skyc completions zsh)`).
#[derive(clap::Args)]
pub(crate) struct Args {
    #[arg(value_enum, value_name = "SHELL")]
    shell: Shell,
}

pub(crate) fn run(args: &Args) -> u8 {
    let mut command = super::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "skyc", &mut script);
    super::out::out!("{}", String::from_utf8_lossy(&script));
    OK
}
