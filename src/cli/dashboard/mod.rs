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
    /// Answer one request of a controller's client (`METHOD URI`) on
    /// standard output, and exit.
    #[arg(long, hide = true, num_args = 2, value_names = ["METHOD", "URI"])]
    answer: Option<Vec<String>>,
    #[command(flatten)]
    state: StateArgs,
}

impl Args {
    /// Whether one request is answered (on a controller), rather than
    /// served.
    pub(crate) fn answers(&self) -> bool {
        self.answer.is_some()
    }
}

pub(crate) fn run(args: &Args) -> u8 {
    if let Some([method, uri]) = args.answer.as_deref() {
        return match args
            .state
            .local()
            .and_then(|dir| server::answer_client(&dir, method, uri, std::io::stdout().lock()))
        {
            Ok(()) => OK,
            Err(message) => {
                errln!("error: {message}");
                USAGE
            }
        };
    }
    match serve(args) {
        Ok(()) => OK,
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

fn serve(args: &Args) -> Result<(), String> {
    let (source, shown) = match args.state.remote()? {
        Some(remote) => {
            // Asked once before serving: a controller that is not there,
            // or whose skyc answers no page, is said now, not on the page.
            let mut connected = remote.connect()?;
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let asked = ["dashboard", "--answer", "GET", "/api/pools"].map(str::to_owned);
            let code = connected.run(&asked, &mut out, &mut err)?;
            if code != 0 {
                return Err(format!(
                    "the controller {remote}: {}",
                    String::from_utf8_lossy(&err).trim()
                ));
            }
            (
                server::Source::Controller(std::sync::Mutex::new(connected)),
                format!("the controller {remote}"),
            )
        }
        None => {
            let dir = local_dir(args)?;
            let shown = dir.display().to_string();
            (server::Source::Dir(dir), shown)
        }
    };
    let token = server::random_hex(32).map_err(|e| format!("/dev/urandom: {e}"))?;
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.port))
        .map_err(|e| format!("127.0.0.1:{}: {e}", args.port))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    // The URL alone on stdout, for scripts; the rest on stderr.
    outln!("http://127.0.0.1:{port}/?token={token}");
    errln!("skyc dashboard: serving {shown} on 127.0.0.1:{port} (Ctrl-C stops)");
    server::serve(listener, server::Shared { source, token }).map_err(|e| e.to_string())
}

/// The local state directory served, refused at once when it cannot be
/// read.
fn local_dir(args: &Args) -> Result<std::path::PathBuf, String> {
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
    Ok(dir)
}
