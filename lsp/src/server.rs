//! The server: the LSP lifecycle (initialize, shutdown, exit), documents,
//! and one handler per request, on one thread.
//!
//! Messages are handled in the order they come. Diagnostics are published
//! once the queue is drained, so a burst of `didChange`s while a large file
//! compiles costs one compilation, of the latest text.

use crate::diagnostics::Style;
use crate::document::Document;
use crate::transport::{self, Incoming};
use crate::{actions, completion, definition, diagnostics, hover};
use lsp_server::{ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, LogMessage,
    Notification as _, PublishDiagnostics,
};
use lsp_types::request::{
    CodeActionRequest, Completion, GotoDefinition, HoverRequest, Request as _,
};
use lsp_types::{
    CodeActionKind, CodeActionOptions, CodeActionProviderCapability, CompletionOptions,
    InitializeParams, InitializeResult, LogMessageParams, MessageType, OneOf, PositionEncodingKind,
    PublishDiagnosticsParams, ServerCapabilities, ServerInfo, TextDocumentSyncCapability,
    TextDocumentSyncKind, Uri,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use skyc_compiler::Options;
use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::sync_channel;

/// How the server ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// `exit` after `shutdown`: LSP's exit status 0.
    Clean,
    /// `exit` without `shutdown`, or the input ended before `shutdown`:
    /// LSP's 1.
    Abrupt,
    /// The input could not be read as LSP messages.
    Protocol(String),
}

/// Messages handled before queued diagnostics are published, at most:
/// a client that never pauses still sees them.
const BATCH: usize = 64;

/// Serves LSP on `input` and `output` until `exit` or the input's end.
/// `options` are the compiler's (`--env`).
pub fn serve(input: impl Read + Send + 'static, output: impl Write, options: Options) -> Exit {
    let (to_server, from_reader) = sync_channel(BATCH);
    // The reader blocks on input; it is not joined, so a client that
    // never closes its end cannot keep the server from exiting.
    std::thread::spawn(move || transport::read_loop(BufReader::new(input), &to_server));
    let mut server = Server {
        out: output,
        state: State::Uninitialized,
        documents: HashMap::new(),
        dirty: Vec::new(),
        options,
        style: Style::default(),
    };
    loop {
        let Ok(first) = from_reader.recv() else {
            // The client closed the input: after `shutdown`, as good as `exit`.
            return if server.state == State::ShuttingDown {
                Exit::Clean
            } else {
                Exit::Abrupt
            };
        };
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(incoming) = next.take() {
            if let Some(exit) = server.handle(incoming) {
                return exit;
            }
            handled += 1;
            if handled < BATCH {
                // Empty or closed: publish now (a closed input ends at
                // the next `recv`).
                next = from_reader.try_recv().ok();
            }
        }
        if let Err(e) = server.publish() {
            return Exit::Protocol(format!("cannot write standard output: {e}"));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Uninitialized,
    Running,
    ShuttingDown,
}

struct Server<W> {
    out: W,
    state: State,
    documents: HashMap<Uri, Document>,
    /// Documents whose diagnostics are to be published, in order.
    dirty: Vec<Uri>,
    options: Options,
    style: Style,
}

impl<W: Write> Server<W> {
    /// Handles one message; `Some` when the server is to stop.
    fn handle(&mut self, incoming: Incoming) -> Option<Exit> {
        let written = match incoming {
            Incoming::Message(Message::Request(request)) => self.request(request),
            Incoming::Message(Message::Notification(n)) if n.method == "exit" => {
                return Some(if self.state == State::ShuttingDown {
                    Exit::Clean
                } else {
                    Exit::Abrupt
                });
            }
            Incoming::Message(Message::Notification(n)) => self.notification(n),
            // The server sends no requests, so expects no responses.
            Incoming::Message(Message::Response(_)) => Ok(()),
            Incoming::Invalid { id, code, message } => match id {
                Some(id) => self.send(Response::new_err(id, code as i32, message)),
                None => transport::write_error_without_id(&mut self.out, code, &message),
            },
            Incoming::Fatal(why) => return Some(Exit::Protocol(why)),
        };
        written
            .err()
            .map(|e| Exit::Protocol(format!("cannot write standard output: {e}")))
    }

    fn request(&mut self, request: Request) -> io::Result<()> {
        let id = request.id.clone();
        match (self.state, request.method.as_str()) {
            (State::Uninitialized, "initialize") => {
                let params: InitializeParams = match parse(request.params) {
                    Ok(p) => p,
                    Err(e) => return self.send(invalid_params(id, &e)),
                };
                self.style.related_information = params
                    .capabilities
                    .text_document
                    .and_then(|t| t.publish_diagnostics)
                    .and_then(|p| p.related_information)
                    .unwrap_or(false);
                self.state = State::Running;
                self.reply(id, &initialize_result())
            }
            (State::Uninitialized, _) => self.send(Response::new_err(
                id,
                ErrorCode::ServerNotInitialized as i32,
                "the server is not initialized yet".to_owned(),
            )),
            (State::ShuttingDown, _) => self.send(Response::new_err(
                id,
                ErrorCode::InvalidRequest as i32,
                "the server is shutting down".to_owned(),
            )),
            (State::Running, "initialize") => self.send(Response::new_err(
                id,
                ErrorCode::InvalidRequest as i32,
                "the server is already initialized".to_owned(),
            )),
            (State::Running, "shutdown") => {
                self.state = State::ShuttingDown;
                self.reply(id, &())
            }
            (State::Running, method) => {
                let method = method.to_owned();
                // A handler reads documents only; if one ever panicked,
                // the request fails and the server goes on.
                let answer =
                    catch_unwind(AssertUnwindSafe(|| self.answer(&method, request.params)));
                match answer {
                    Ok(Ok(value)) => self.send(Response::new_ok(id, value)),
                    Ok(Err((code, message))) => {
                        self.send(Response::new_err(id, code as i32, message))
                    }
                    Err(_) => self.send(Response::new_err(
                        id,
                        ErrorCode::InternalError as i32,
                        format!("skyc failed while answering {method}"),
                    )),
                }
            }
        }
    }

    /// The result of a request other than the lifecycle's.
    fn answer(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, (ErrorCode, String)> {
        let invalid = |e: String| (ErrorCode::InvalidParams, e);
        let value = match method {
            Completion::METHOD => {
                let p: lsp_types::CompletionParams = parse(params).map_err(invalid)?;
                let at = p.text_document_position;
                let items = self
                    .documents
                    .get(&at.text_document.uri)
                    .map(|d| completion::complete(d, at.position))
                    .unwrap_or_default();
                to_json(&items)
            }
            HoverRequest::METHOD => {
                let p: lsp_types::HoverParams = parse(params).map_err(invalid)?;
                let at = p.text_document_position_params;
                let hover = self
                    .documents
                    .get(&at.text_document.uri)
                    .and_then(|d| hover::hover(d, at.position));
                to_json(&hover)
            }
            GotoDefinition::METHOD => {
                let p: lsp_types::GotoDefinitionParams = parse(params).map_err(invalid)?;
                let at = p.text_document_position_params;
                let uri = &at.text_document.uri;
                let location = self
                    .documents
                    .get(uri)
                    .and_then(|d| definition::definition(d, uri, at.position));
                to_json(&location)
            }
            CodeActionRequest::METHOD => {
                let p: lsp_types::CodeActionParams = parse(params).map_err(invalid)?;
                let uri = &p.text_document.uri;
                let actions = self
                    .documents
                    .get(uri)
                    .map(|d| actions::quick_fixes(d, uri, p.range, self.style))
                    .unwrap_or_default();
                to_json(&actions)
            }
            _ => {
                return Err((
                    ErrorCode::MethodNotFound,
                    format!("skyc lsp does not handle {method}"),
                ));
            }
        };
        Ok(value)
    }

    fn notification(&mut self, n: Notification) -> io::Result<()> {
        // Before `initialize`, notifications are dropped (LSP 3.17).
        if self.state == State::Uninitialized {
            return Ok(());
        }
        match n.method.as_str() {
            DidOpenTextDocument::METHOD => {
                let p: lsp_types::DidOpenTextDocumentParams = match parse(n.params) {
                    Ok(p) => p,
                    Err(e) => return self.log(MessageType::ERROR, &e),
                };
                let doc = p.text_document;
                let document = Document::new(doc.text, doc.version, self.options.clone());
                // The tasks of the text as opened, for completing names
                // once an edit breaks the YAML.
                if document.is_readable() {
                    let _ = document.outline();
                }
                self.documents.insert(doc.uri.clone(), document);
                self.mark(doc.uri);
                Ok(())
            }
            DidChangeTextDocument::METHOD => {
                let p: lsp_types::DidChangeTextDocumentParams = match parse(n.params) {
                    Ok(p) => p,
                    Err(e) => return self.log(MessageType::ERROR, &e),
                };
                let uri = p.text_document.uri;
                let Some(document) = self.documents.get_mut(&uri) else {
                    let message =
                        format!("didChange for {}, which is not open: ignored", uri.as_str());
                    return self.log(MessageType::WARNING, &message);
                };
                document.change(p.text_document.version, p.content_changes);
                self.mark(uri);
                Ok(())
            }
            DidCloseTextDocument::METHOD => {
                let p: lsp_types::DidCloseTextDocumentParams = match parse(n.params) {
                    Ok(p) => p,
                    Err(e) => return self.log(MessageType::ERROR, &e),
                };
                let uri = p.text_document.uri;
                self.dirty.retain(|u| *u != uri);
                if self.documents.remove(&uri).is_some() {
                    // Closed files keep no diagnostics.
                    self.notify::<PublishDiagnostics>(&PublishDiagnosticsParams::new(
                        uri,
                        Vec::new(),
                        None,
                    ))?;
                }
                Ok(())
            }
            // `initialized`, `didSave`, `$/cancelRequest` (every request is
            // answered before the next is read), `$/setTrace`, and
            // notifications this server does not know.
            _ => Ok(()),
        }
    }

    fn mark(&mut self, uri: Uri) {
        if !self.dirty.contains(&uri) {
            self.dirty.push(uri);
        }
    }

    /// Publishes the diagnostics of every document changed since last time.
    fn publish(&mut self) -> io::Result<()> {
        for uri in std::mem::take(&mut self.dirty) {
            let Some(document) = self.documents.get(&uri) else {
                continue;
            };
            let style = self.style;
            let found = catch_unwind(AssertUnwindSafe(|| diagnostics::of(document, &uri, style)));
            let version = Some(document.version);
            match found {
                Ok(diagnostics) => self.notify::<PublishDiagnostics>(
                    &PublishDiagnosticsParams::new(uri, diagnostics, version),
                )?,
                Err(_) => self.log(
                    MessageType::ERROR,
                    &format!("skyc failed to check {}", uri.as_str()),
                )?,
            }
        }
        Ok(())
    }

    fn log(&mut self, typ: MessageType, message: &str) -> io::Result<()> {
        self.notify::<LogMessage>(&LogMessageParams {
            typ,
            message: format!("skyc: {message}"),
        })
    }

    fn notify<N: lsp_types::notification::Notification>(
        &mut self,
        params: &N::Params,
    ) -> io::Result<()> {
        self.send(Notification::new(N::METHOD.to_owned(), params))
    }

    fn reply(&mut self, id: RequestId, result: &impl Serialize) -> io::Result<()> {
        self.send(Response::new_ok(id, result))
    }

    fn send(&mut self, message: impl Into<Message>) -> io::Result<()> {
        transport::write(&mut self.out, message.into())
    }
}

fn initialize_result() -> InitializeResult {
    InitializeResult {
        capabilities: ServerCapabilities {
            position_encoding: Some(PositionEncodingKind::UTF16),
            text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
            completion_provider: Some(CompletionOptions {
                trigger_characters: Some(vec![" ".into(), "[".into(), ",".into()]),
                ..CompletionOptions::default()
            }),
            hover_provider: Some(lsp_types::HoverProviderCapability::Simple(true)),
            definition_provider: Some(OneOf::Left(true)),
            code_action_provider: Some(CodeActionProviderCapability::Options(CodeActionOptions {
                code_action_kinds: Some(vec![CodeActionKind::QUICKFIX]),
                ..CodeActionOptions::default()
            })),
            ..ServerCapabilities::default()
        },
        server_info: Some(ServerInfo {
            name: "skyc".to_owned(),
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        }),
    }
}

fn parse<T: DeserializeOwned>(params: serde_json::Value) -> Result<T, String> {
    serde_json::from_value(params).map_err(|e| format!("invalid params: {e}"))
}

fn invalid_params(id: RequestId, message: &str) -> Response {
    Response::new_err(id, ErrorCode::InvalidParams as i32, message.to_owned())
}

fn to_json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}
