//! `skyc dashboard`: a local web page over a state directory, where
//! groups, their nodes, every attempt and the logs are seen live, and a
//! group can be cancelled. See docs/dashboard.md.
//!
//! `server.rs` is the HTTP side (loopback, the token), `api.rs` what is
//! served (read as `status` reads the store), `timeline.rs` the attempts
//! of each node from the event history, `assets/` the page (hand-written,
//! embedded).

mod api;
mod server;
mod timeline;

use super::exit::{OK, USAGE};
use super::out::{errln, outln};
use super::state::StateArgs;
use skyc_runtime::store::Store;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};

/// Serve a web page of the groups and pools of a state directory, live,
/// on 127.0.0.1. The URL printed carries a random token; a request
/// without it is refused.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The port on 127.0.0.1 (0: any free port).
    #[arg(long, value_name = "N", default_value_t = 0)]
    port: u16,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(args: &Args) -> u8 {
    match serve(args) {
        Ok(()) => OK,
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

fn serve(args: &Args) -> Result<(), String> {
    // Absolute, so the page says which directory it shows.
    let dir = std::path::absolute(args.state.dir()).map_err(|e| e.to_string())?;
    // Refuse at once what cannot be read (not a database, an older
    // schema); a directory where nothing has run yet gives an empty page
    // that fills in when a group runs. Nothing is created.
    match Store::open_read_only(&dir)? {
        Some(_) => {}
        None if dir.is_dir() || !dir.exists() => errln!(
            "skyc dashboard: no group has run with state directory {} yet; the page will show \
             them when one does",
            dir.display()
        ),
        None => return Err(format!("{}: not a directory", dir.display())),
    }
    let token = server::random_hex(32).map_err(|e| format!("/dev/urandom: {e}"))?;
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.port))
        .map_err(|e| format!("127.0.0.1:{}: {e}", args.port))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    // The URL alone on stdout, for scripts; the rest on stderr.
    outln!("http://127.0.0.1:{port}/?token={token}");
    errln!(
        "skyc dashboard: serving {} on 127.0.0.1:{port} (Ctrl-C stops)",
        dir.display()
    );
    server::serve(listener, server::Shared { dir, token }).map_err(|e| e.to_string())
}
