//! What a panic does in skyc: it is a bug, and the process ends at once
//! (abort), as if it had crashed. A supervisor or a dashboard never runs on
//! with one of its threads gone; everything a supervisor does is in its
//! store, and the next one carries on from there. The language server is
//! the exception: it answers the request that panicked with an error and
//! serves the next one (skyc-lsp catches the unwind).

/// Makes every later panic abort the process, after the usual message.
pub(crate) fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// Back to Rust's own behaviour: a panic unwinds, and a caller that
/// catches it goes on.
pub(crate) fn unwind_on_panic() {
    drop(std::panic::take_hook());
}
