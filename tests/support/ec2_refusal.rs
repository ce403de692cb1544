//! A stand-in between skyc and the EC2 stand-in (moto) that plays EC2
//! out of capacity: while told to, it answers `RunInstances` as EC2 does
//! when a zone has no room (HTTP 500, `InsufficientInstanceCapacity`);
//! every other request, and every request once it is told to stop, goes
//! on to moto unchanged and moto's answer comes back. moto itself never
//! runs out of capacity. What it does not play: EC2's partial launches
//! (some instances of one call), and a refusal that depends on the zone
//! or instance type asked for.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

pub(crate) struct Ec2Refusal {
    /// Where skyc is pointed (`http://127.0.0.1:PORT`).
    pub(crate) endpoint: String,
    refuse: Arc<AtomicBool>,
    refused: Arc<AtomicU32>,
}

impl Ec2Refusal {
    /// In front of moto at `upstream` (`http://HOST:PORT`), refusing.
    pub(crate) fn start(upstream: &str) -> Self {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let endpoint = format!("http://{}", listener.local_addr().expect("its address"));
        let refuse = Arc::new(AtomicBool::new(true));
        let refused = Arc::new(AtomicU32::new(0));
        let (r, n) = (refuse.clone(), refused.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (r, n, upstream) = (r.clone(), n.clone(), upstream.clone());
                std::thread::spawn(move || serve(client, &upstream, &r, &n));
            }
        });
        Self {
            endpoint,
            refuse,
            refused,
        }
    }

    /// EC2 has room again.
    pub(crate) fn stop_refusing(&self) {
        self.refuse.store(false, Ordering::SeqCst);
    }

    /// How many launches were refused.
    pub(crate) fn refused(&self) -> u32 {
        self.refused.load(Ordering::SeqCst)
    }
}

/// One request per connection: the answer closes it.
fn serve(client: TcpStream, upstream: &str, refuse: &AtomicBool, refused: &AtomicU32) {
    let mut reader = BufReader::new(&client);
    let mut head = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
        if !lower.starts_with("connection:") {
            head.extend_from_slice(line.as_bytes());
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let launch = body
        .split(|&b| b == b'&')
        .any(|pair| pair == b"Action=RunInstances");
    let mut client = &client;
    if launch && refuse.load(Ordering::SeqCst) {
        refused.fetch_add(1, Ordering::SeqCst);
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
                   <Code>InsufficientInstanceCapacity</Code><Message>We currently do not have \
                   sufficient capacity in the Availability Zone you requested. Our system will \
                   be working on provisioning additional capacity.</Message></Error></Errors>\
                   <RequestID>skyc-test-refusal</RequestID></Response>";
        let _ = write!(
            client,
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/xml;charset=UTF-8\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{xml}",
            xml.len()
        );
        return;
    }
    let Ok(mut moto) = TcpStream::connect(upstream) else {
        return;
    };
    head.extend_from_slice(b"connection: close\r\n\r\n");
    if moto
        .write_all(&head)
        .and_then(|()| moto.write_all(&body))
        .is_err()
    {
        return;
    }
    let mut answer = Vec::new();
    if moto.read_to_end(&mut answer).is_ok() {
        let _ = client.write_all(&answer);
    }
}
