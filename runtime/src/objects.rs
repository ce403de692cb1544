//! Object transfers over HTTP that the S3 and GCS clients share: an
//! upload's body streamed from its [`Source`], and a download streamed to
//! a file, checked against the size its listing gave.

use crate::aws::ec2::client::Error;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

/// A request's body.
pub type Body = BoxBody<Bytes, io::Error>;

/// What an object's bytes are written by: called once per try of its
/// upload, on a thread of its own.
pub type Source = std::sync::Arc<dyn Fn(&mut dyn Write) -> io::Result<()> + Send + Sync>;

/// A body held in memory.
pub fn full(bytes: Bytes) -> Body {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

/// The chunk a streamed body is sent in.
const CHUNK: usize = 1 << 20;

/// The largest error answer read.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Receives the answer `fetch` gives into `to` (an existing file,
/// truncated first): the object `key` of `size` bytes as listed. Fails
/// when other than `size` bytes come, when the answer stops for `idle`
/// (however large the object: a stalled answer, not a slow one), or with
/// `refused` for an answer that is not a success.
pub async fn download<F, E>(
    fetch: F,
    idle: Duration,
    (key, size, to): (&str, u64, &Path),
    unreachable: impl Fn(String) -> Error,
    refused: impl Fn(u16, &[u8]) -> Error,
) -> Result<(), Error>
where
    F: std::future::Future<Output = Result<http::Response<Incoming>, E>>,
    E: std::error::Error + 'static,
{
    let local = |e: io::Error| Error::Request(format!("{}: {e}", to.display()));
    let resp = tokio::time::timeout(idle, fetch)
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", idle.as_secs())))?
        .map_err(|e| unreachable(crate::aws::ec2::client::root_cause(&e)))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    if !(200..300).contains(&status) {
        let bytes = Limited::new(body, MAX_ERROR_BODY)
            .collect()
            .await
            .map_err(|e| unreachable(format!("the answer broke off: {e}")))?
            .to_bytes();
        return Err(refused(status, &bytes));
    }
    // Made (empty) before: a try starts it over.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(to)
        .map_err(local)?;
    let mut got = 0u64;
    loop {
        let frame = tokio::time::timeout(idle, body.frame())
            .await
            .map_err(|_| unreachable(format!("`{key}` stopped coming for {} s", idle.as_secs())))?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| unreachable(format!("the answer broke off: {e}")))?;
        if let Ok(data) = frame.into_data() {
            got += data.len() as u64;
            if got > size {
                break;
            }
            file.write_all(&data).map_err(local)?;
        }
    }
    if got != size {
        return Err(unreachable(format!(
            "`{key}` is {size} bytes as listed, and {got} came"
        )));
    }
    Ok(())
}

/// A body written by `source` on a thread of its own, a chunk at a time
/// (two chunks queued at most). A failed write ends the body with its
/// error, so the request fails rather than sending short.
pub fn stream(source: Source) -> Body {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(2);
    std::thread::spawn(move || {
        let mut w = Chunks {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        let result = source(&mut w).and_then(|()| w.flush());
        if let Err(e) = result {
            let _ = tx.blocking_send(Err(e));
        }
    });
    let frames = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|chunk| chunk.map(|r| r.map(Frame::data)))
    });
    StreamBody::new(frames).boxed()
}

/// A writer that sends what it is given in [`CHUNK`]s.
struct Chunks {
    tx: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl Write for Chunks {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.flush()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the request ended"))
    }
}
