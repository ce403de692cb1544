//! The Linux system calls the agent makes, as safe functions.
//!
//! The agent links no C library (see the crate's documentation for why),
//! so it makes its system calls itself: one `asm!` per architecture, and a
//! safe function per call that passes only pointers to live Rust values.
//! This is the one module of skyc besides [`crate::start`] that allows
//! `unsafe` code. Numbers and flags are the kernel's ABI, which never
//! changes; they are the same on x86_64 and aarch64 except the call numbers.
#![allow(unsafe_code)]

use core::ffi::{CStr, c_char};

/// A failed system call's error number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const INTR: Errno = Errno(4);
    pub const CHILD: Errno = Errno(10);
    pub const AGAIN: Errno = Errno(11);

    /// What `strerror` says, for the errors starting a command can meet.
    pub fn message(self) -> &'static str {
        match self.0 {
            1 => "Operation not permitted",
            2 => "No such file or directory",
            7 => "Argument list too long",
            8 => "Exec format error",
            12 => "Cannot allocate memory",
            13 => "Permission denied",
            20 => "Not a directory",
            21 => "Is a directory",
            24 => "Too many open files",
            26 => "Text file busy",
            28 => "No space left on device",
            36 => "File name too long",
            40 => "Too many levels of symbolic links",
            _ => "system error",
        }
    }
}

pub type Result<T> = core::result::Result<T, Errno>;

#[cfg(target_arch = "x86_64")]
mod nr {
    pub(super) const READ: usize = 0;
    pub(super) const WRITE: usize = 1;
    pub(super) const CLOSE: usize = 3;
    pub(super) const LSEEK: usize = 8;
    pub(super) const RT_SIGPROCMASK: usize = 14;
    pub(super) const GETPID: usize = 39;
    pub(super) const CLONE: usize = 56;
    pub(super) const EXECVE: usize = 59;
    pub(super) const WAIT4: usize = 61;
    pub(super) const KILL: usize = 62;
    pub(super) const SETPGID: usize = 109;
    pub(super) const PRCTL: usize = 157;
    pub(super) const CLOCK_GETTIME: usize = 228;
    pub(super) const EXIT_GROUP: usize = 231;
    pub(super) const OPENAT: usize = 257;
    pub(super) const PPOLL: usize = 271;
    pub(super) const SIGNALFD4: usize = 289;
    pub(super) const DUP3: usize = 292;
    pub(super) const PIPE2: usize = 293;
    pub(super) const RENAMEAT2: usize = 316;
    pub(super) const PIDFD_OPEN: usize = 434;
}

#[cfg(target_arch = "aarch64")]
mod nr {
    pub(super) const READ: usize = 63;
    pub(super) const WRITE: usize = 64;
    pub(super) const CLOSE: usize = 57;
    pub(super) const LSEEK: usize = 62;
    pub(super) const RT_SIGPROCMASK: usize = 135;
    pub(super) const GETPID: usize = 172;
    pub(super) const CLONE: usize = 220;
    pub(super) const EXECVE: usize = 221;
    pub(super) const WAIT4: usize = 260;
    pub(super) const KILL: usize = 129;
    pub(super) const SETPGID: usize = 154;
    pub(super) const PRCTL: usize = 167;
    pub(super) const CLOCK_GETTIME: usize = 113;
    pub(super) const EXIT_GROUP: usize = 94;
    pub(super) const OPENAT: usize = 56;
    pub(super) const PPOLL: usize = 73;
    pub(super) const SIGNALFD4: usize = 74;
    pub(super) const DUP3: usize = 24;
    pub(super) const PIPE2: usize = 59;
    pub(super) const RENAMEAT2: usize = 276;
    pub(super) const PIDFD_OPEN: usize = 434;
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("skyc's node agent supports Linux on x86_64 and aarch64");

/// Makes system call `n` with up to six arguments (the kernel ignores the
/// ones a call does not take).
///
/// # Safety
/// Every pointer among the arguments must be valid for what call `n` does
/// with it.
#[cfg(target_arch = "x86_64")]
unsafe fn syscall(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the arguments; `syscall` clobbers
    // only rcx and r11 besides rax.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Makes system call `n` with up to six arguments.
///
/// # Safety
/// Every pointer among the arguments must be valid for what call `n` does
/// with it.
#[cfg(target_arch = "aarch64")]
unsafe fn syscall(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the arguments; `svc 0` returns in x0
    // and clobbers nothing else.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack),
        );
    }
    ret
}

fn check(ret: isize) -> Result<usize> {
    if (-4095..0).contains(&ret) {
        Err(Errno(-ret as i32))
    } else {
        Ok(ret as usize)
    }
}

/// A call whose arguments are plain numbers (file descriptors, pids, flags).
fn call(n: usize, a: [usize; 6]) -> Result<usize> {
    // SAFETY: callers pass no pointers through here.
    check(unsafe { syscall(n, a) })
}

fn args(a: &[usize]) -> [usize; 6] {
    let mut all = [0; 6];
    all[..a.len()].copy_from_slice(a);
    all
}

pub const O_RDONLY: u32 = 0;
pub const O_WRONLY: u32 = 0o1;
pub const O_CREAT: u32 = 0o100;
pub const O_TRUNC: u32 = 0o1000;
pub const O_APPEND: u32 = 0o2000;
pub const O_NONBLOCK: u32 = 0o4000;
pub const O_CLOEXEC: u32 = 0o2000000;
pub const O_PATH: u32 = 0o10000000;
const AT_FDCWD: isize = -100;

/// An open file descriptor, closed when dropped.
#[derive(Debug)]
pub struct Fd(i32);

impl Fd {
    pub fn raw(&self) -> i32 {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        let _ = call(nr::CLOSE, args(&[self.0 as usize]));
    }
}

fn openat(dir: isize, path: &CStr, flags: u32, mode: u32) -> Result<Fd> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let ret = unsafe {
        syscall(
            nr::OPENAT,
            args(&[
                dir as usize,
                path.as_ptr() as usize,
                (flags | O_CLOEXEC) as usize,
                mode as usize,
            ]),
        )
    };
    check(ret).map(|fd| Fd(fd as i32))
}

/// Opens `path` (close-on-exec).
pub fn open(path: &CStr, flags: u32, mode: u32) -> Result<Fd> {
    openat(AT_FDCWD, path, flags, mode)
}

/// Opens `name` in the directory `dir` (close-on-exec).
pub fn open_at(dir: &Fd, name: &CStr, flags: u32, mode: u32) -> Result<Fd> {
    openat(dir.0 as isize, name, flags, mode)
}

/// Renames `from` to `to`, both in `dir`, replacing `to` atomically.
pub fn rename_at(dir: &Fd, from: &CStr, to: &CStr) -> Result<()> {
    let d = dir.0 as usize;
    // SAFETY: both names are NUL-terminated strings that outlive the call.
    let ret = unsafe {
        syscall(
            nr::RENAMEAT2,
            args(&[d, from.as_ptr() as usize, d, to.as_ptr() as usize, 0]),
        )
    };
    check(ret).map(drop)
}

pub fn read(fd: &Fd, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let ret = unsafe {
        syscall(
            nr::READ,
            args(&[fd.0 as usize, buf.as_mut_ptr() as usize, buf.len()]),
        )
    };
    check(ret)
}

fn write_raw(fd: i32, buf: &[u8]) -> Result<usize> {
    // SAFETY: the kernel reads at most `buf.len()` bytes from `buf`.
    let ret = unsafe {
        syscall(
            nr::WRITE,
            args(&[fd as usize, buf.as_ptr() as usize, buf.len()]),
        )
    };
    check(ret)
}

/// Writes all of `buf`, across short writes and interruptions.
pub fn write_all(fd: &Fd, buf: &[u8]) -> Result<()> {
    write_all_raw(fd.0, buf)
}

fn write_all_raw(fd: i32, mut buf: &[u8]) -> Result<()> {
    while !buf.is_empty() {
        match write_raw(fd, buf) {
            Ok(0) => return Err(Errno(5)),
            Ok(n) => buf = &buf[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes to the agent's standard error (what the supervisor gave it).
pub fn write_stderr(buf: &[u8]) {
    let _ = write_all_raw(2, buf);
}

/// The file offset of `fd`; after a write to a file opened with
/// `O_APPEND`, the end of what that write appended.
pub fn offset(fd: &Fd) -> Result<u64> {
    const SEEK_CUR: usize = 1;
    call(nr::LSEEK, args(&[fd.0 as usize, 0, SEEK_CUR])).map(|o| o as u64)
}

/// A pipe (read end, write end), both close-on-exec.
pub fn pipe() -> Result<(Fd, Fd)> {
    let mut fds = [0i32; 2];
    // SAFETY: the kernel writes two ints into `fds`.
    let ret = unsafe {
        syscall(
            nr::PIPE2,
            args(&[fds.as_mut_ptr() as usize, O_CLOEXEC as usize]),
        )
    };
    check(ret).map(|_| (Fd(fds[0]), Fd(fds[1])))
}

pub const POLLIN: i16 = 0x1;
pub const POLLHUP: i16 = 0x10;

/// One entry of [`poll`], as the kernel lays it out.
#[repr(C)]
pub struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

impl PollFd {
    /// Waits for `fd` to be readable.
    pub fn readable(fd: &Fd) -> PollFd {
        PollFd {
            fd: fd.0,
            events: POLLIN,
            revents: 0,
        }
    }

    /// Whether the wait found anything (data, end of file, an error).
    pub fn ready(&self) -> bool {
        self.revents != 0
    }
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

/// Waits until one of `fds` is ready, or `timeout_ms` passed (forever when
/// `None`); the number of ready entries.
pub fn poll(fds: &mut [PollFd], timeout_ms: Option<u64>) -> Result<usize> {
    let timeout = timeout_ms.map(|ms| Timespec {
        sec: (ms / 1000) as i64,
        nsec: ((ms % 1000) * 1_000_000) as i64,
    });
    let timeout_ptr = timeout
        .as_ref()
        .map_or(0, |t| t as *const Timespec as usize);
    // SAFETY: `fds` is an array of `fds.len()` pollfd structures the kernel
    // may update; the timeout, when given, outlives the call; no signal mask.
    let ret = unsafe {
        syscall(
            nr::PPOLL,
            args(&[fds.as_mut_ptr() as usize, fds.len(), timeout_ptr, 0, 8]),
        )
    };
    check(ret)
}

pub fn getpid() -> i32 {
    call(nr::GETPID, [0; 6]).map_or(0, |p| p as i32)
}

/// Makes orphaned descendants of this process its children, so that it
/// can find and reap them.
pub fn set_child_subreaper() -> Result<()> {
    const PR_SET_CHILD_SUBREAPER: usize = 36;
    call(nr::PRCTL, args(&[PR_SET_CHILD_SUBREAPER, 1])).map(drop)
}

pub const SIGKILL: i32 = 9;
pub const SIGUSR1: i32 = 10;
pub const SIGTERM: i32 = 15;
const SIGCHLD: usize = 17;

/// Sends `sig` to process `pid`, or to process group `-pid`.
pub fn kill(pid: i32, sig: i32) -> Result<()> {
    call(nr::KILL, args(&[pid as isize as usize, sig as usize])).map(drop)
}

/// Reaps child `pid` (any child when -1) if it ended: its pid and wait
/// status; `None` when it still runs and `nohang`.
pub fn wait(pid: i32, nohang: bool) -> Result<Option<(i32, i32)>> {
    const WNOHANG: usize = 1;
    let mut status = 0i32;
    // SAFETY: the kernel writes one int into `status`; no rusage.
    let ret = unsafe {
        syscall(
            nr::WAIT4,
            args(&[
                pid as isize as usize,
                &mut status as *mut i32 as usize,
                if nohang { WNOHANG } else { 0 },
                0,
            ]),
        )
    };
    check(ret).map(|p| (p != 0).then_some((p as i32, status)))
}

/// A file descriptor that becomes readable when process `pid` ends.
pub fn pidfd_open(pid: i32) -> Result<Fd> {
    call(nr::PIDFD_OPEN, args(&[pid as usize, 0])).map(|fd| Fd(fd as i32))
}

fn sigmask(how: usize, mask: u64) -> Result<()> {
    // SAFETY: the kernel reads one 8-byte signal set; no old set wanted.
    let ret = unsafe {
        syscall(
            nr::RT_SIGPROCMASK,
            args(&[how, &mask as *const u64 as usize, 0, 8]),
        )
    };
    check(ret).map(drop)
}

/// Signals delivered as readable data instead of interruptions: `signals`
/// are blocked, and each one sent to the process can be read from the
/// returned descriptor (see [`read_signal`]).
pub fn signalfd(signals: &[i32]) -> Result<Fd> {
    const SIG_BLOCK: usize = 0;
    let mask = signals.iter().fold(0u64, |m, &s| m | 1 << (s - 1));
    sigmask(SIG_BLOCK, mask)?;
    // SAFETY: the kernel reads one 8-byte signal set.
    let ret = unsafe {
        syscall(
            nr::SIGNALFD4,
            args(&[
                usize::MAX, // -1: a new descriptor
                &mask as *const u64 as usize,
                8,
                (O_CLOEXEC | O_NONBLOCK) as usize,
            ]),
        )
    };
    check(ret).map(|fd| Fd(fd as i32))
}

/// The next signal waiting on a [`signalfd`] descriptor, if any.
pub fn read_signal(fd: &Fd) -> Option<i32> {
    // struct signalfd_siginfo: 128 bytes, the signal number first.
    let mut info = [0u8; 128];
    match read(fd, &mut info) {
        Ok(128) => Some(i32::from_ne_bytes([info[0], info[1], info[2], info[3]])),
        _ => None,
    }
}

fn clock_us(clock: usize) -> u64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: the kernel writes one timespec into `ts`.
    let ret = unsafe {
        syscall(
            nr::CLOCK_GETTIME,
            args(&[clock, &mut ts as *mut Timespec as usize]),
        )
    };
    match check(ret) {
        Ok(_) => ts.sec as u64 * 1_000_000 + ts.nsec as u64 / 1000,
        Err(_) => 0,
    }
}

/// Microseconds since the Unix epoch (`CLOCK_REALTIME`).
pub fn now_us() -> u64 {
    clock_us(0)
}

/// Microseconds on a clock that only goes forward (`CLOCK_MONOTONIC`).
pub fn monotonic_us() -> u64 {
    clock_us(1)
}

/// Ends the process.
pub fn exit(code: i32) -> ! {
    loop {
        let _ = call(nr::EXIT_GROUP, args(&[code as usize]));
    }
}

/// The process's arguments and environment as the kernel laid them out:
/// NULL-terminated arrays of NUL-terminated strings, alive for the whole
/// life of the process.
pub struct Args {
    argc: usize,
    argv: *const *const c_char,
    envp: *const *const c_char,
}

impl Args {
    /// # Safety
    /// `sp` must be the initial stack pointer the kernel handed to the
    /// program's entry point.
    #[cfg_attr(test, allow(dead_code))]
    pub(crate) unsafe fn from_stack(sp: *const usize) -> Args {
        // SAFETY: the kernel's layout at `sp`: argc, argv[0..argc], NULL,
        // envp..., NULL.
        unsafe {
            let argc = *sp;
            let argv = sp.add(1) as *const *const c_char;
            Args {
                argc,
                argv,
                envp: argv.add(argc + 1),
            }
        }
    }

    pub fn len(&self) -> usize {
        self.argc
    }

    pub fn is_empty(&self) -> bool {
        self.argc == 0
    }

    /// Argument `i`.
    pub fn get(&self, i: usize) -> Option<&'static CStr> {
        // SAFETY: `i < argc`, so `argv[i]` is a valid string pointer that
        // lives as long as the process.
        (i < self.argc).then(|| unsafe { CStr::from_ptr(*self.argv.add(i)) })
    }

    /// Starts `program` in a new process: arguments `from..` of this one,
    /// this process's environment, its own process group, signals
    /// unblocked, standard input inherited, standard output and error on
    /// `output`. Its pid; when `program` cannot be run, the new process
    /// writes why on `output` and exits with status 127.
    pub fn spawn(&self, program: &CStr, from: usize, output: &Fd) -> Result<i32> {
        if from >= self.argc {
            return Err(Errno(22));
        }
        // SAFETY: `clone` without CLONE_VM is `fork`: the child gets a copy
        // of this single-threaded process, which owns no lock or allocator
        // that a copy could find in an inconsistent state.
        let pid = check(unsafe { syscall(nr::CLONE, args(&[SIGCHLD])) })?;
        if pid != 0 {
            // Also in the parent, so the group exists before this returns:
            // a SIGTERM already waiting is passed on to the group at once,
            // and must not miss it (the child's own call may come later).
            // It may fail once the child has exec'd, which is fine: the
            // child made the group first.
            let _ = call(nr::SETPGID, [pid as usize, pid as usize, 0, 0, 0, 0]);
            return Ok(pid as i32);
        }
        // The child. Nothing here returns.
        let out = output.0 as usize;
        const SIG_SETMASK: usize = 2;
        let _ = sigmask(SIG_SETMASK, 0);
        let _ = call(nr::SETPGID, [0; 6]);
        let _ = call(nr::DUP3, args(&[out, 1, 0]));
        let _ = call(nr::DUP3, args(&[out, 2, 0]));
        // SAFETY: `program` is NUL-terminated; `argv.add(from)` is a tail
        // of the kernel's NULL-terminated argument array and `envp` its
        // environment array, both alive.
        let err = check(unsafe {
            syscall(
                nr::EXECVE,
                args(&[
                    program.as_ptr() as usize,
                    self.argv.add(from) as usize,
                    self.envp as usize,
                ]),
            )
        });
        if let Err(e) = err {
            for part in [
                b"skyc: cannot start `" as &[u8],
                program.to_bytes(),
                b"`: ",
                e.message().as_bytes(),
                b"\n",
            ] {
                let _ = write_all_raw(1, part);
            }
        }
        exit(127)
    }
}
