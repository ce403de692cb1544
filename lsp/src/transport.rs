//! The wire: `Content-Length` framed JSON-RPC messages on a byte stream.
//!
//! lsp-server's own stdio transport allocates whatever `Content-Length`
//! says and ends the connection on the first body that is not a message;
//! this reader bounds every line and body and turns a bad body into an
//! error reply, so one malformed message costs that message only.

use lsp_server::{ErrorCode, Message, RequestId};
use serde_json::Value;
use std::io::{self, BufRead, Read, Write};
use std::sync::mpsc::SyncSender;

/// The largest message body read. A document a quarter of this size is
/// already past the compiler's 4 MiB limit, even escaped as JSON.
pub(crate) const MAX_BODY: usize = 64 << 20;
/// The longest header line; real ones are about 30 bytes.
const MAX_HEADER_LINE: u64 = 1024;
/// Header lines per message (`Content-Length`, `Content-Type`).
const MAX_HEADER_LINES: usize = 32;

/// What the reader hands the server.
#[derive(Debug)]
pub(crate) enum Incoming {
    Message(Message),
    /// A body that is not a JSON-RPC message: answered with an error,
    /// with the request's id when one could be read.
    Invalid {
        id: Option<RequestId>,
        code: ErrorCode,
        message: String,
    },
    /// The framing is lost: the stream cannot be read on.
    Fatal(String),
}

/// Reads messages until the stream ends, an `exit` notification is read,
/// the framing is lost, or the server stops listening.
pub(crate) fn read_loop(mut input: impl BufRead, to_server: &SyncSender<Incoming>) {
    loop {
        let incoming = match read_frame(&mut input) {
            Ok(None) => return,
            Ok(Some(Frame::Body(body))) => parse(&body),
            Ok(Some(Frame::TooLarge(len))) => Incoming::Invalid {
                id: None,
                code: ErrorCode::InvalidRequest,
                message: format!(
                    "a message of {len} bytes is larger than the {} MiB skyc lsp reads; it was skipped",
                    MAX_BODY >> 20
                ),
            },
            Err(Broken(message)) => Incoming::Fatal(message),
        };
        let stop = match &incoming {
            Incoming::Message(Message::Notification(n)) => n.method == "exit",
            Incoming::Fatal(_) => true,
            _ => false,
        };
        if to_server.send(incoming).is_err() || stop {
            return;
        }
    }
}

enum Frame {
    Body(Vec<u8>),
    /// A body over [`MAX_BODY`], skipped.
    TooLarge(usize),
}

/// The framing is lost (or the stream failed), with why.
struct Broken(String);

/// One frame; `None` at the end of the stream between messages.
fn read_frame(input: &mut impl BufRead) -> Result<Option<Frame>, Broken> {
    let mut length: Option<usize> = None;
    let mut lines = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input
            .by_ref()
            .take(MAX_HEADER_LINE)
            .read_until(b'\n', &mut line)
            .map_err(|e| Broken(format!("cannot read standard input: {e}")))?;
        if n == 0 {
            return if lines == 0 && length.is_none() {
                Ok(None)
            } else {
                Err(Broken("the input ended inside a message header".to_owned()))
            };
        }
        if line.last() != Some(&b'\n') {
            return Err(Broken(format!(
                "a header line longer than {MAX_HEADER_LINE} bytes"
            )));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if lines == 0 {
                // Tolerated between messages.
                continue;
            }
            break;
        }
        lines += 1;
        if lines > MAX_HEADER_LINES {
            return Err(Broken(format!("more than {MAX_HEADER_LINES} header lines")));
        }
        let Some((name, value)) = text.split_once(':') else {
            return Err(Broken(format!("a malformed header line: {text:?}")));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let value = value.trim();
            length = Some(value.parse().map_err(|_| {
                Broken(format!("a Content-Length that is not a number: {value:?}"))
            })?);
        }
    }
    let Some(length) = length else {
        return Err(Broken("a message header without Content-Length".to_owned()));
    };
    if length > MAX_BODY {
        let skipped = io::copy(&mut input.by_ref().take(length as u64), &mut io::sink())
            .map_err(|e| Broken(format!("cannot read standard input: {e}")))?;
        if skipped < length as u64 {
            return Err(Broken("the input ended inside a message".to_owned()));
        }
        return Ok(Some(Frame::TooLarge(length)));
    }
    let mut body = Vec::new();
    input
        .by_ref()
        .take(length as u64)
        .read_to_end(&mut body)
        .map_err(|e| Broken(format!("cannot read standard input: {e}")))?;
    if body.len() < length {
        return Err(Broken("the input ended inside a message".to_owned()));
    }
    Ok(Some(Frame::Body(body)))
}

/// A body as a message, or why it is not one.
fn parse(body: &[u8]) -> Incoming {
    if let Ok(message) = serde_json::from_slice::<Message>(body) {
        return Incoming::Message(message);
    }
    match serde_json::from_slice::<Value>(body) {
        Err(e) => Incoming::Invalid {
            id: None,
            code: ErrorCode::ParseError,
            message: format!("the message is not JSON: {e}"),
        },
        Ok(value) => {
            let id = match value.get("id") {
                Some(Value::Number(n)) => n
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .map(RequestId::from),
                Some(Value::String(s)) => Some(RequestId::from(s.clone())),
                _ => None,
            };
            Incoming::Invalid {
                id,
                code: ErrorCode::InvalidRequest,
                message: "the message is not a JSON-RPC request, response or notification"
                    .to_owned(),
            }
        }
    }
}

/// Writes a message, framed, and flushes it.
pub(crate) fn write(out: &mut impl Write, message: Message) -> io::Result<()> {
    message.write(out)
}

/// Writes an error reply to a message whose id could not be read: JSON-RPC
/// answers those with `"id": null`, which lsp-server's `Response` cannot
/// carry.
pub(crate) fn write_error_without_id(
    out: &mut impl Write,
    code: ErrorCode,
    message: &str,
) -> io::Result<()> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code as i32, "message": message},
    })
    .to_string();
    write!(out, "Content-Length: {}\r\n\r\n{body}", body.len())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    fn read_all(input: &[u8]) -> Vec<String> {
        let (tx, rx) = sync_channel(64);
        read_loop(input, &tx);
        drop(tx);
        rx.iter()
            .map(|i| match i {
                Incoming::Message(Message::Request(r)) => format!("request {}", r.method),
                Incoming::Message(Message::Notification(n)) => format!("notification {}", n.method),
                Incoming::Message(Message::Response(_)) => "response".to_owned(),
                Incoming::Invalid { id, code, .. } => format!("invalid {id:?} {}", code as i32),
                Incoming::Fatal(why) => format!("fatal {why}"),
            })
            .collect()
    }

    fn frame(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    #[test]
    fn a_bad_body_costs_that_message_only() {
        let input = [
            frame(r#"{"jsonrpc":"2.0","id":1,"method":"a"}"#),
            frame("{not json"),
            frame(r#"{"jsonrpc":"2.0","id":7,"params":[]}"#),
            frame(r#"{"jsonrpc":"2.0","method":"b"}"#),
        ]
        .concat();
        assert_eq!(
            read_all(input.as_bytes()),
            [
                "request a",
                "invalid None -32700",
                "invalid Some(RequestId(I32(7))) -32600",
                "notification b"
            ]
        );
    }

    #[test]
    fn an_oversized_body_is_skipped_unread() {
        let huge = MAX_BODY + 1;
        let mut input = format!("Content-Length: {huge}\r\n\r\n").into_bytes();
        input.resize(input.len() + huge, b' ');
        input.extend(frame(r#"{"jsonrpc":"2.0","method":"b"}"#).bytes());
        assert_eq!(read_all(&input), ["invalid None -32600", "notification b"]);
    }

    #[test]
    fn lost_framing_ends_the_stream() {
        assert_eq!(
            read_all(b"Content-Length: x\r\n\r\n{}"),
            ["fatal a Content-Length that is not a number: \"x\""]
        );
        assert_eq!(
            read_all(b"Content-Type: a\r\n\r\n{}"),
            ["fatal a message header without Content-Length"]
        );
        let long = format!("X-Long: {}\r\n", "a".repeat(2000));
        assert!(read_all(long.as_bytes())[0].starts_with("fatal a header line longer"));
        assert_eq!(
            read_all(b"Content-Length: 10\r\n\r\n{}"),
            ["fatal the input ended inside a message"]
        );
        assert!(read_all(b"").is_empty());
        // `exit` is the last message read.
        let input = [frame(r#"{"jsonrpc":"2.0","method":"exit"}"#), frame("{}")].concat();
        assert_eq!(read_all(input.as_bytes()), ["notification exit"]);
    }
}
