//! `skyc build FILE --target T`: lower a group to a target's artifacts.

use super::check::Color;
use super::{INVALID, OK, USAGE, input, parse_env};
use clap::ValueEnum;
use skyc_compiler::render::{Format, render};
use skyc_compiler::{Options, compile};
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
}

#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// skyc's intermediate representation, as JSON.
    Ir,
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
    let compilation = compile(&name, &bytes, &options);
    let diagnostics = render(
        Format::Human {
            color: args.color.enabled(),
        },
        std::slice::from_ref(&compilation),
    );
    let _ = std::io::stderr().write_all(diagnostics.as_bytes());
    let Some(group) = &compilation.group else {
        return INVALID;
    };
    match args.target {
        Target::Ir => {
            let mut json = serde_json::to_string_pretty(group).unwrap_or_default();
            json.push('\n');
            if std::io::stdout().write_all(json.as_bytes()).is_err() {
                return USAGE;
            }
        }
    }
    OK
}
