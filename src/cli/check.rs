//! `skyc check FILE...`: validate files, print diagnostics.

use super::{INVALID, OK, USAGE, input, parse_env};
use clap::ValueEnum;
use skyc_compiler::render::{Format, render};
use skyc_compiler::{Compilation, Options, Severity, compile};
use std::io::{IsTerminal, Write};

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
                eprintln!("error: {message}");
                io_failed = true;
            }
        }
    }
    let format = match args.format {
        OutputFormat::Human => Format::Human {
            color: args.color.enabled(),
        },
        OutputFormat::Json => Format::Json,
        OutputFormat::Sarif => Format::Sarif,
        OutputFormat::Github => Format::Github,
    };
    let rendered = render(format, &compilations);
    let failed = compilations.iter().any(Compilation::has_errors);
    if matches!(args.format, OutputFormat::Human) {
        // People read diagnostics on stderr; the summary closes them.
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(rendered.as_bytes());
        let count = |s: Severity| {
            compilations
                .iter()
                .flat_map(|c| &c.diagnostics)
                .filter(|d| d.severity == s)
                .count()
        };
        let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
        if errors + warnings > 0 {
            let _ = writeln!(
                err,
                "{}: {} error{}, {} warning{} in {} file{}",
                if failed { "failed" } else { "ok" },
                errors,
                plural(errors),
                warnings,
                plural(warnings),
                compilations.len(),
                plural(compilations.len()),
            );
        }
    } else {
        let _ = std::io::stdout().lock().write_all(rendered.as_bytes());
    }
    if io_failed {
        USAGE
    } else if failed {
        INVALID
    } else {
        OK
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
