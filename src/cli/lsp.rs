//! `skyc lsp`: the language server, over standard input and output.

use super::out::{errln, stdout};
use super::{INVALID, OK, USAGE, parse_env};
use skyc_compiler::Options;
use skyc_lsp::Exit;

/// Run the language server (LSP 3.17 over standard input and output), for
/// editors: diagnostics as you type, completion, hover, go to definition
/// and "did you mean" fixes.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Talk over standard input and output (the only transport; accepted
    /// because editors' LSP clients pass it).
    #[arg(long)]
    stdio: bool,
    /// Give an environment variable a value, as `skyc check --env` does
    /// (an `envs` entry left empty is otherwise an error).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
}

/// Exit status as LSP asks: 0 after `shutdown` and `exit`, 1 on `exit`
/// (or the input's end) without `shutdown`; 2 when the input is not LSP.
pub(crate) fn run(args: &Args) -> u8 {
    let _ = args.stdio;
    let options = Options {
        env: args.env.clone(),
    };
    match skyc_lsp::serve(std::io::stdin(), stdout(), options) {
        Exit::Clean => OK,
        Exit::Abrupt => INVALID,
        Exit::Protocol(why) => {
            errln!("skyc lsp: {why}");
            USAGE
        }
    }
}
