//! A TCP relay in front of a test's stand-in service that the test can
//! hold: while held, nothing passes either way (requests under way stall
//! as behind a dead link), and everything passes again once released.
//! It stands in for a network that fails at the moment the test chooses;
//! it does not cover resets, partial writes or latency.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub(crate) struct Relay {
    port: u16,
    held: Arc<AtomicBool>,
    /// The upstream's scheme (`http`, `https`).
    scheme: String,
}

impl Relay {
    /// A relay to `upstream` (`scheme://host:port`), on a free loopback
    /// port.
    pub(crate) fn to(upstream: &str) -> Relay {
        let (scheme, rest) = upstream.split_once("://").expect("scheme://host:port");
        let addr = rest.trim_end_matches('/').to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let held = Arc::new(AtomicBool::new(false));
        let h = held.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&addr) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let held = h.clone();
                    std::thread::spawn(move || pump(from, to, &held));
                }
            }
        });
        Relay {
            port,
            held,
            scheme: scheme.to_owned(),
        }
    }

    /// Where clients reach the upstream through the relay.
    pub(crate) fn endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }

    pub(crate) fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    pub(crate) fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` while the relay is not held.
fn pump(mut from: TcpStream, mut to: TcpStream, held: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        while held.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Read before the hold, sent after it.
        while held.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}
