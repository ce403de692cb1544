//! What a C library would give the agent: the entry point, the memory
//! functions the compiler calls, and what a panic does. Only in the agent's
//! executable (not in unit tests, which use the standard library's).
#![allow(unsafe_code)]

use crate::sys;

/// The program's entry point: hands the kernel's initial stack (argc,
/// argv, envp) to [`entry`] with the stack aligned as the ABI requires.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
extern "C" fn _start() -> ! {
    core::arch::naked_asm!(
        "xor ebp, ebp",
        "mov rdi, rsp",
        "and rsp, -16",
        "call {entry}",
        "ud2",
        entry = sym entry,
    )
}

/// The program's entry point (the kernel aligns sp to 16 bytes).
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
extern "C" fn _start() -> ! {
    core::arch::naked_asm!(
        "mov x29, xzr",
        "mov x30, xzr",
        "mov x0, sp",
        "bl {entry}",
        "udf #0",
        entry = sym entry,
    )
}

extern "C" fn entry(sp: *const usize) -> ! {
    // SAFETY: `_start` passes the kernel's initial stack pointer.
    let args = unsafe { sys::Args::from_stack(sp) };
    sys::exit(crate::agent::main(&args))
}

/// A panic is a bug: say so where the supervisor logs, and end the agent
/// (its node is then lost, as when the agent is killed).
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    sys::write_stderr(b"skyc-agent: internal error (panic)\n");
    sys::exit(101)
}

/// Referenced by the precompiled `core`; never called, since panics abort.
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() {}

// The memory functions compiled code calls. Their loops use volatile
// accesses, which the compiler cannot turn back into calls to these same
// functions. The agent moves little memory: simple loops are enough.

/// # Safety
/// As C's `memcpy`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: as the caller promises.
    unsafe { memmove(dst, src, n) }
}

/// # Safety
/// As C's `memmove`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    let copy = |i: usize| {
        // SAFETY: `dst` and `src` are valid for `n` bytes and `i < n`.
        unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) }
    };
    // Copying in the direction away from an overlap.
    if (dst as usize) <= (src as usize) {
        (0..n).for_each(copy);
    } else {
        (0..n).rev().for_each(copy);
    }
    dst
}

/// # Safety
/// As C's `memset`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    for i in 0..n {
        // SAFETY: `dst` is valid for `n` bytes, as the caller promises.
        unsafe { dst.add(i).write_volatile(c as u8) };
    }
    dst
}

/// # Safety
/// As C's `memcmp`.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: both are valid for `n` bytes, as the caller promises.
        let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
    }
    0
}

/// # Safety
/// As C's `bcmp`.
#[unsafe(no_mangle)]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: as the caller promises.
    unsafe { memcmp(a, b, n) }
}

/// # Safety
/// As C's `strlen`.
#[unsafe(no_mangle)]
unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: `s` is NUL-terminated, as the caller promises.
    while unsafe { s.add(n).read_volatile() } != 0 {
        n += 1;
    }
    n
}
