//! Error codes, the per-thread last error message, and the guard that every
//! entry point runs in (no panic crosses the ABI).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use mqblk::error::InvalidKind;
use mqblk::{Error, Status};

/// What went wrong: every function that returns `int` returns `MQBLK_ERROR_OK`
/// (0) or one of these negative codes, and a completion's `ret` is one of
/// them too. `mqblk_strerror()` names a code; `mqblk_get_error_msg()` gives
/// the calling thread's last failure in full (device, offset, limit).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MqblkError {
    /// Success.
    Ok = 0,
    /// A pointer argument was NULL.
    Null = -1,
    /// An argument is invalid (a zero or unaligned length, too many
    /// segments, a length over 4 GiB).
    Inval = -2,
    /// The device spec string is malformed or names an unknown device.
    Spec = -3,
    /// The device could not be opened or set up.
    Setup = -4,
    /// The I/O runs past the end of the device.
    Range = -5,
    /// A buffer breaks the device's alignment (and bouncing is off).
    Align = -6,
    /// A write to a read-only device.
    ReadOnly = -7,
    /// The device does not support the operation.
    NotSupported = -8,
    /// The device reported an I/O error.
    Io = -9,
    /// The request timed out.
    Timeout = -10,
    /// The device is out of space.
    NoSpace = -11,
    /// The device was shut down.
    Shutdown = -12,
    /// Every slot of the queue holds a completion not collected yet: call
    /// `mqblk_queue_do_io()`, then submit again.
    Again = -13,
    /// Out of memory.
    NoMem = -14,
    /// A system call failed (the message names it).
    Os = -15,
    /// A bug inside libmqblk (a Rust panic, caught at the ABI).
    Internal = -16,
}

impl MqblkError {
    /// The code as C sees it.
    pub fn code(self) -> c_int {
        self as c_int
    }

    /// The code of a request's status.
    pub fn of_status(status: Status) -> MqblkError {
        match status {
            Status::Ok => MqblkError::Ok,
            Status::IoError | Status::Medium => MqblkError::Io,
            Status::Timeout => MqblkError::Timeout,
            Status::NoSpace => MqblkError::NoSpace,
            Status::NotSupported => MqblkError::NotSupported,
            Status::Invalid(k) => match k {
                InvalidKind::OutOfRange => MqblkError::Range,
                InvalidKind::Misaligned => MqblkError::Align,
                InvalidKind::ReadOnly => MqblkError::ReadOnly,
                InvalidKind::Unsupported => MqblkError::NotSupported,
                InvalidKind::BadLength
                | InvalidKind::ZeroLength
                | InvalidKind::TooManySegments
                | InvalidKind::Driver => MqblkError::Inval,
            },
            Status::Shutdown => MqblkError::Shutdown,
            Status::Resource => MqblkError::Again,
        }
    }

    /// The code of a core error.
    pub fn of_error(e: &Error) -> MqblkError {
        match e {
            Error::Spec { .. } => MqblkError::Spec,
            Error::Setup { .. } => MqblkError::Setup,
            other => MqblkError::of_status(other.status()),
        }
    }

    fn describe(code: c_int) -> *const c_char {
        match code {
            0 => cstr(b"success\0"),
            -1 => cstr(b"a pointer argument is NULL\0"),
            -2 => cstr(b"invalid argument\0"),
            -3 => cstr(b"invalid device spec\0"),
            -4 => cstr(b"the device could not be set up\0"),
            -5 => cstr(b"the I/O runs past the end of the device\0"),
            -6 => cstr(b"a buffer breaks the device's alignment\0"),
            -7 => cstr(b"the device is read-only\0"),
            -8 => cstr(b"operation not supported by the device\0"),
            -9 => cstr(b"I/O error\0"),
            -10 => cstr(b"the request timed out\0"),
            -11 => cstr(b"no space left on the device\0"),
            -12 => cstr(b"the device was shut down\0"),
            -13 => cstr(
                b"the queue is full of uncollected completions: collect them, then submit again\0",
            ),
            -14 => cstr(b"out of memory\0"),
            -15 => cstr(b"a system call failed\0"),
            -16 => cstr(b"internal error in libmqblk (a bug: please report it)\0"),
            _ => cstr(b"unknown mqblk error code\0"),
        }
    }
}

/// A static NUL-terminated string for C.
pub(crate) const fn cstr(s: &'static [u8]) -> *const c_char {
    s.as_ptr().cast()
}

/// A failure on its way to C: the code to return, and the message to keep
/// as the thread's last error.
#[derive(Debug)]
pub struct Failure {
    /// The code.
    pub code: MqblkError,
    /// What happened, in full.
    pub msg: String,
}

impl Failure {
    /// A failure with its own message.
    pub fn new(code: MqblkError, msg: impl Into<String>) -> Failure {
        Failure {
            code,
            msg: msg.into(),
        }
    }

    /// A NULL argument.
    pub fn null(func: &str, arg: &str) -> Failure {
        Failure::new(MqblkError::Null, format!("{func}: `{arg}` is NULL"))
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::new(MqblkError::of_error(&e), e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: &str) {
    // A message with a NUL inside is cut there rather than lost.
    let cut = msg.split('\0').next().unwrap_or_default();
    let c = CString::new(cut).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; the code is
    // still returned.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = c);
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with no message".to_string()
    }
}

/// Run an entry point's body: its failure becomes `fail(code)` plus the
/// thread's last error, and a panic becomes `MQBLK_ERROR_INTERNAL`.
pub fn guard<T>(
    func: &str,
    fail: impl FnOnce(MqblkError) -> T,
    body: impl FnOnce() -> Result<T, Failure>,
) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            set_last_error(&f.msg);
            fail(f.code)
        }
        Err(p) => {
            set_last_error(&format!(
                "{func}: internal error (Rust panic caught at the C boundary): {}",
                panic_message(p.as_ref())
            ));
            fail(MqblkError::Internal)
        }
    }
}

/// [`guard`] for the functions that return `int`: the code on failure.
pub fn entry(func: &str, body: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    guard(func, MqblkError::code, body)
}

/// The text of an error code (a static string; never NULL).
#[no_mangle]
pub extern "C" fn mqblk_strerror(err: c_int) -> *const c_char {
    MqblkError::describe(err)
}

/// The calling thread's last error message: which call failed and why,
/// naming the device, the offset and the limit. An empty string if no
/// call failed on this thread yet. The pointer is valid until the next
/// failing mqblk call on the same thread.
#[no_mangle]
pub extern "C" fn mqblk_get_error_msg() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|slot| slot.borrow().as_ptr())
            .unwrap_or(cstr(b"\0"))
    })
    .unwrap_or(cstr(b"\0"))
}

/// libmqblk's version, as "MAJOR.MINOR.PATCH" (a static string).
#[no_mangle]
pub extern "C" fn mqblk_version() -> *const c_char {
    const V: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    V.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn a_panic_becomes_an_internal_error_with_a_message() {
        let rc = entry("mqblk_test", || panic!("boom"));
        assert_eq!(rc, MqblkError::Internal.code());
        // SAFETY: the message is a NUL-terminated string owned by this thread.
        let msg = unsafe { CStr::from_ptr(mqblk_get_error_msg()) };
        assert!(msg.to_str().unwrap().contains("boom"));
    }

    #[test]
    fn every_code_has_its_own_text() {
        let mut seen = std::collections::HashSet::new();
        for code in -16..=0 {
            // SAFETY: strerror returns static NUL-terminated strings.
            let s = unsafe { CStr::from_ptr(mqblk_strerror(code)) };
            assert!(seen.insert(s.to_owned()), "code {code} repeats a text");
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(mqblk_strerror(-999)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown mqblk error code");
    }
}
