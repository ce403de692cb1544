//! `skyc`: check, build and run SkyPilot Job Groups.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
