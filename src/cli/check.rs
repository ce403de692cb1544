//! `skyc check FILE...`: validate files, print diagnostics.

use super::out::{errln, out};
use super::{INVALID, OK, USAGE, input, parse_env, report};
use clap::ValueEnum;
use skyc_compiler::render::{Format, render};
use skyc_compiler::{Compilation, Options, compile};
use std::io::IsTerminal;

/// Check Job Group (or task) files against the schema and every rule.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Files to check; `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// How to print diagnostics.
    #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
    format: OutputFormat,
    /// Give an environment variable a value, as `sky jobs launch --env` does.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// When to colour human output.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    color: Color,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum OutputFormat {
    Human,
    Json,
    Sarif,
    Github,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Color {
    Auto,
    Always,
    Never,
}

impl Color {
    pub(crate) fn enabled(self) -> bool {
        match self {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => {
                std::io::stderr().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        }
    }
}

pub(crate) fn run(args: &Args) -> u8 {
    let options = Options {
        env: args.env.clone(),
    };
    let mut compilations: Vec<Compilation> = Vec::new();
    let mut io_failed = false;
    for path in &args.files {
        match input::read(path) {
            Ok((name, bytes)) => compilations.push(compile(&name, &bytes, &options)),
            Err(message) => {
                errln!("error: {message}");
                io_failed = true;
            }
        }
    }
    let failed = compilations.iter().any(Compilation::has_errors);
    let format = match args.format {
        // People read diagnostics on stderr; the summary closes them, and
        // at a terminal a clean check says so, as linters do.
        OutputFormat::Human => {
            report::human(&compilations, args.color.enabled(), report::at_terminal());
            None
        }
        OutputFormat::Json => Some(Format::Json),
        OutputFormat::Sarif => Some(Format::Sarif),
        OutputFormat::Github => Some(Format::Github),
    };
    if let Some(format) = format {
        out!("{}", render(format, &compilations));
    }
    if io_failed {
        USAGE
    } else if failed {
        INVALID
    } else {
        OK
    }
}
