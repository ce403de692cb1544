//! How a backend's threads and tasks hand reports to the supervisor's
//! `poll(2)` loop: a channel, and a byte in a pipe whose read end is the
//! backend's [`Backend::wake_fd`](crate::backend::Backend::wake_fd).

use crate::backend::Report;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, mpsc};

/// The backend's end: what the supervisor drains.
pub struct Outbox {
    reports: mpsc::Receiver<(i64, Report)>,
    wake: OwnedFd,
    post: Post,
}

/// The senders' end, to clone into threads and tasks.
#[derive(Clone)]
pub struct Post {
    tx: mpsc::Sender<(i64, Report)>,
    wake: Arc<OwnedFd>,
}

/// Where one group's reports go: the channel, then a byte in the pipe.
#[derive(Clone)]
pub struct Out {
    pub gid: i64,
    post: Post,
}

impl Outbox {
    pub fn new() -> io::Result<Self> {
        let (read, write) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::NONBLOCK | rustix::pipe::PipeFlags::CLOEXEC,
        )?;
        let (tx, reports) = mpsc::channel();
        Ok(Self {
            reports,
            wake: read,
            post: Post {
                tx,
                wake: Arc::new(write),
            },
        })
    }

    pub fn post(&self) -> Post {
        self.post.clone()
    }

    /// Every report sent so far ([`Backend::drain`](crate::backend::Backend::drain)).
    pub fn drain(&self) -> Vec<(i64, Report)> {
        let mut buf = [0u8; 256];
        while matches!(rustix::io::read(&self.wake, &mut buf), Ok(n) if n > 0) {}
        self.reports.try_iter().collect()
    }

    /// Readable once a report waits.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }
}

impl Post {
    pub fn out(&self, gid: i64) -> Out {
        Out {
            gid,
            post: self.clone(),
        }
    }
}

impl Out {
    pub fn send(&self, report: Report) {
        if self.post.tx.send((self.gid, report)).is_ok() {
            // A full pipe already wakes the reader.
            let _ = rustix::io::write(&*self.post.wake, &[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_arrive_in_order_and_wake_the_reader() {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let outbox = Outbox::new().unwrap();
        let (a, b) = (outbox.post().out(1), outbox.post().out(2));
        a.send(Report::Settled);
        b.send(Report::Job("j".into()));
        let fd = outbox.wake_fd();
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let readable = || poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&zero)).unwrap();
        assert_eq!(readable(), 1);
        assert_eq!(
            outbox.drain(),
            vec![(1, Report::Settled), (2, Report::Job("j".into()))]
        );
        assert!(outbox.drain().is_empty());
        assert_eq!(readable(), 0);
    }
}
