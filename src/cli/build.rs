//! `skyc build FILE --target T`: lower a group to a target's artifacts.

use super::check::Color;
use super::{INVALID, OK, USAGE, input, parse_env};
use clap::ValueEnum;
use skyc_compiler::render::{Format, render};
use skyc_compiler::{Options, compile};
use skyc_targets::slurm::{self, SbatchOption};
use std::io::Write;

/// Lower a Job Group to what a target runs.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The Job Group (or task) file; `-` reads standard input.
    #[arg(value_name = "FILE")]
    file: String,
    /// What to build.
    #[arg(long, value_enum)]
    target: Target,
    /// Give an environment variable a value, as `sky jobs launch --env` does.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// When to colour diagnostics.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    color: Color,
    /// Write the output to this file instead of standard output.
    #[arg(short, long, value_name = "PATH")]
    out: Option<std::path::PathBuf>,
    /// Slurm: the partition of every component.
    #[arg(long, value_name = "NAME", value_parser = sbatch_value, help_heading = "Slurm")]
    partition: Option<String>,
    /// Slurm: the account of every component.
    #[arg(long, value_name = "NAME", value_parser = sbatch_value, help_heading = "Slurm")]
    account: Option<String>,
    /// Slurm: the job's time limit, in sbatch's `--time` forms.
    #[arg(long, value_name = "TIME", value_parser = sbatch_value, help_heading = "Slurm")]
    time: Option<String>,
    /// Slurm: an extra option for every component, as `KEY[=VALUE]`.
    #[arg(long = "sbatch-option", value_name = "KEY[=VALUE]", value_parser = sbatch_option,
          help_heading = "Slurm")]
    sbatch_options: Vec<SbatchOption>,
    /// Seconds between SIGTERM and SIGKILL when an auxiliary is terminated.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    grace: u64,
}

fn sbatch_value(s: &str) -> Result<String, String> {
    if skyc_targets::slurm::is_safe_value(s) {
        Ok(s.to_owned())
    } else {
        Err("only letters, digits and `_.:/=,@%+-[]*` are safe on an #SBATCH line".to_owned())
    }
}

fn sbatch_option(s: &str) -> Result<SbatchOption, String> {
    SbatchOption::parse(s).map_err(|e| e.to_string())
}

#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// skyc's intermediate representation, as JSON.
    Ir,
    /// A Slurm batch script: one heterogeneous job, one component per task.
    Slurm,
}

pub(crate) fn run(args: &Args) -> u8 {
    let (name, bytes) = match input::read(&args.file) {
        Ok(read) => read,
        Err(message) => {
            eprintln!("error: {message}");
            return USAGE;
        }
    };
    let options = Options {
        env: args.env.clone(),
    };
    let mut compilation = compile(&name, &bytes, &options);
    let output = compilation.group.as_ref().map(|group| match args.target {
        Target::Ir => {
            let mut json = serde_json::to_string_pretty(group).unwrap_or_default();
            json.push('\n');
            Some(json)
        }
        Target::Slurm => {
            let built = slurm::build(
                group,
                &slurm::Options {
                    partition: args.partition.clone(),
                    account: args.account.clone(),
                    time: args.time.clone(),
                    sbatch_options: args.sbatch_options.clone(),
                    grace_secs: args.grace,
                },
            );
            // Lowering findings are reported like the compiler's own.
            compilation.diagnostics.extend(built.diagnostics);
            built.script
        }
    });
    let diagnostics = render(
        Format::Human {
            color: args.color.enabled(),
        },
        std::slice::from_ref(&compilation),
    );
    let _ = std::io::stderr().write_all(diagnostics.as_bytes());
    let Some(Some(text)) = output else {
        return INVALID;
    };
    let written = match &args.out {
        Some(path) => std::fs::write(path, &text).map_err(|e| format!("{}: {e}", path.display())),
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| e.to_string()),
    };
    if let Err(message) = written {
        eprintln!("error: {message}");
        return USAGE;
    }
    OK
}
