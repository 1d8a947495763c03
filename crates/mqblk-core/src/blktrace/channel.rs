//! A context's trace buffer (Linux's per-CPU relay channel under
//! blktrace): a ring of bytes that one producer, the context, fills with
//! records, and that a drainer writes out to the context's file in
//! batches, one `writev` a batch.
//!
//! Below the recorder, which is the producer. The producer takes no lock
//! and makes no call: it copies a record in and publishes the new head
//! with one release store. Draining (the session's flusher every few
//! milliseconds, the producer itself when the ring is three quarters
//! full, the control plane at stop) holds the sink's lock, writes out
//! what was published and releases it by moving the tail. The ring is
//! allocated once, when the context starts tracing.

use std::io::{IoSlice, Write};
use std::ptr::NonNull;

use super::event::{BlkIoTrace, HEADER_BYTES, RECORD_MAX};

// std's atomics and lock, not the loom shim's: the trace is not part of
// what the loom models check.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Where a channel's bytes go, and what came of it.
pub(crate) struct Sink {
    /// The context's file (`None` once closed, or after a write failed).
    out: Option<Box<dyn Write + Send>>,
    /// What names the file in messages.
    name: String,
    /// Bytes written out.
    written: u64,
    /// The first write error.
    error: Option<String>,
    /// Closed already (by the session's stop, or its context).
    closed: bool,
}

/// What a closed channel wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Closed {
    pub(crate) bytes: u64,
    pub(crate) lost: u64,
    pub(crate) error: Option<String>,
    /// Completions whose driver stamped its time, and the sum of their
    /// delays from that time to the context's reap.
    pub(crate) reaped: u64,
    pub(crate) reap_delay_ns: u64,
}

/// What the closed channels of one session wrote, added up as each
/// closes (its context stops tracing, or the session stops).
#[derive(Debug, Default)]
pub(crate) struct Totals {
    bytes: AtomicU64,
    lost: AtomicU64,
    reaped: AtomicU64,
    reap_delay_ns: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl Totals {
    /// Count a closed channel.
    pub(crate) fn add(&self, c: Closed) {
        self.bytes.fetch_add(c.bytes, Ordering::Relaxed);
        self.lost.fetch_add(c.lost, Ordering::Relaxed);
        self.reaped.fetch_add(c.reaped, Ordering::Relaxed);
        self.reap_delay_ns
            .fetch_add(c.reap_delay_ns, Ordering::Relaxed);
        if let Some(e) = c.error {
            self.errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(e);
        }
    }

    /// Bytes written.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Records dropped.
    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// The mean delay from a driver's completion to its context's reap,
    /// over the completions whose time the driver stamped.
    pub(crate) fn reap_delay_ns(&self) -> Option<u64> {
        let n = self.reaped.load(Ordering::Relaxed);
        (n > 0).then(|| self.reap_delay_ns.load(Ordering::Relaxed) / n)
    }

    /// The write errors, one per file that had one.
    pub(crate) fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// One producer's ring.
pub(crate) struct Channel {
    buf: NonNull<u8>,
    cap: u64,
    /// Bytes the producer has published (it only grows).
    head: AtomicU64,
    /// Bytes written out or dropped (it only grows, up to `head`); moved
    /// only by a drainer holding `sink`.
    tail: AtomicU64,
    /// Records the producer could not keep: the ring was full and its
    /// drain busy elsewhere.
    lost: AtomicU64,
    /// Completions with a driver's time, and their summed reap delays
    /// (written by the producer only, read when the channel closes).
    reaped: AtomicU64,
    reap_delay_ns: AtomicU64,
    sink: Mutex<Sink>,
}

// SAFETY: the ring's bytes are reached only through `put` (the one
// producer, on `[head, tail + cap)`, which no drainer reads) and through
// `drain_locked` (one drainer at a time, under `sink`, on `[tail, head)`,
// which the producer does not write until the tail moves past it); the
// release store of `head` orders the producer's copies before a drainer's
// reads, and the release store of `tail` orders a drainer's reads before
// the producer's next copies there. Everything else is atomics or under
// the mutex.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Channel {
    /// A completion reaped `delay_ns` after its driver finished it. Called
    /// by the producer only.
    pub(crate) fn count_reap(&self, delay_ns: u64) {
        let n = self.reaped.load(Ordering::Relaxed);
        self.reaped.store(n + 1, Ordering::Relaxed);
        let d = self.reap_delay_ns.load(Ordering::Relaxed);
        self.reap_delay_ns
            .store(d.saturating_add(delay_ns), Ordering::Relaxed);
    }

    /// A ring of `cap_bytes` (rounded up to a power of two) writing to
    /// `out`, named `name` in messages. Control plane: allocates.
    pub(crate) fn new(cap_bytes: usize, out: Box<dyn Write + Send>, name: String) -> Channel {
        let cap = cap_bytes
            .max(crate::blktrace::event::RECORD_MAX)
            .next_power_of_two();
        let buf = Box::into_raw(vec![0u8; cap].into_boxed_slice()) as *mut u8;
        Channel {
            // SAFETY: `Box::into_raw` never returns null.
            buf: unsafe { NonNull::new_unchecked(buf) },
            cap: cap as u64,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            reaped: AtomicU64::new(0),
            reap_delay_ns: AtomicU64::new(0),
            sink: Mutex::new(Sink {
                out: Some(out),
                name,
                written: 0,
                error: None,
                closed: false,
            }),
        }
    }

    /// The ring's size in bytes.
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.cap
    }

    /// How far drainers have come (the producer may reuse bytes below
    /// `tail + capacity`).
    #[inline]
    pub(crate) fn tail(&self) -> u64 {
        self.tail.load(Ordering::Acquire)
    }

    /// Copy `rec` into the ring at byte `head` (wrapping at the end).
    ///
    /// # Safety
    ///
    /// Only the channel's one producer calls this, and only with
    /// `head + rec.len() <= tail + capacity` for a `tail` it read from
    /// [`Channel::tail`], and `head` its own count of bytes put so far: the
    /// bytes written are then published by no one and read by no drainer.
    #[inline]
    pub(crate) unsafe fn put(&self, head: u64, rec: &[u8]) {
        debug_assert!(rec.len() as u64 <= self.cap);
        let start = (head & (self.cap - 1)) as usize;
        let first = rec.len().min(self.cap as usize - start);
        // SAFETY: `start + first <= cap` and `rec.len() - first <= start`
        // (the record wraps only past the end), both inside the ring; by
        // the caller's promise no one else touches these bytes now.
        unsafe {
            std::ptr::copy_nonoverlapping(rec.as_ptr(), self.buf.as_ptr().add(start), first);
            std::ptr::copy_nonoverlapping(
                rec.as_ptr().add(first),
                self.buf.as_ptr(),
                rec.len() - first,
            );
        }
    }

    /// Write record `rec`, then `pdu`, at byte `head`: straight into the
    /// ring, or through a copy when it wraps at the end.
    ///
    /// # Safety
    ///
    /// As for [`Channel::put`], with `HEADER_BYTES + pdu.len()` bytes free.
    #[inline(always)]
    pub(crate) unsafe fn put_record(&self, head: u64, rec: &BlkIoTrace, pdu: &[u8]) {
        let start = (head & (self.cap - 1)) as usize;
        if start + HEADER_BYTES + pdu.len() > self.cap as usize {
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.put_wrapped(head, rec, pdu) };
        }
        // SAFETY: the record fits before the ring's end (checked above);
        // by the caller's promise no one else touches these bytes now.
        unsafe {
            let dst = self.buf.as_ptr().add(start);
            rec.write_to(dst);
            if !pdu.is_empty() {
                std::ptr::copy_nonoverlapping(pdu.as_ptr(), dst.add(HEADER_BYTES), pdu.len());
            }
        }
    }

    /// `put_record` of a record that wraps at the ring's end.
    ///
    /// # Safety
    ///
    /// As for [`Channel::put_record`].
    #[cold]
    #[inline(never)]
    unsafe fn put_wrapped(&self, head: u64, rec: &BlkIoTrace, pdu: &[u8]) {
        let mut b = [0u8; RECORD_MAX];
        let n = rec.encode(pdu, &mut b);
        // SAFETY: the caller's promise, passed on.
        unsafe { self.put(head, &b[..n]) };
    }

    /// Make the bytes up to `head` visible to drainers.
    #[inline]
    pub(crate) fn publish(&self, head: u64) {
        self.head.store(head, Ordering::Release);
    }

    /// Count `n` records the producer dropped.
    #[cold]
    pub(crate) fn add_lost(&self, n: u64) {
        self.lost.fetch_add(n, Ordering::Relaxed);
    }

    /// Write out what was published, unless another drainer is at it
    /// (the producer, which must not wait). True if this drained.
    pub(crate) fn try_drain(&self) -> bool {
        match self.sink.try_lock() {
            Ok(mut s) => {
                self.drain_locked(&mut s);
                true
            }
            Err(std::sync::TryLockError::Poisoned(p)) => {
                self.drain_locked(&mut p.into_inner());
                true
            }
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// Write out what was published (the flusher, and the control plane).
    pub(crate) fn drain(&self) {
        let mut s = self.lock_sink();
        self.drain_locked(&mut s);
    }

    /// Write out what was published and close the file; later records
    /// are dropped as they are drained. Returns what the channel wrote,
    /// the first time.
    pub(crate) fn close(&self) -> Option<Closed> {
        let mut s = self.lock_sink();
        self.drain_locked(&mut s);
        if std::mem::replace(&mut s.closed, true) {
            return None;
        }
        if let Some(mut out) = s.out.take() {
            if let Err(e) = out.flush() {
                note_error(&mut s, e);
            }
        }
        Some(Closed {
            bytes: s.written,
            lost: self.lost.load(Ordering::Relaxed),
            error: s.error.clone(),
            reaped: self.reaped.load(Ordering::Relaxed),
            reap_delay_ns: self.reap_delay_ns.load(Ordering::Relaxed),
        })
    }

    fn lock_sink(&self) -> MutexGuard<'_, Sink> {
        self.sink.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn drain_locked(&self, s: &mut Sink) {
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Relaxed);
        if head == tail {
            return;
        }
        debug_assert!(head - tail <= self.cap);
        let (a, b) = self.published(tail, head);
        if let Some(out) = s.out.as_mut() {
            match write_both(&mut **out, a, b) {
                Ok(()) => s.written += head - tail,
                Err(e) => {
                    s.out = None;
                    note_error(s, e);
                }
            }
        }
        self.tail.store(head, Ordering::Release);
    }

    /// The published, undrained bytes `[from, to)`, as the ring's tail
    /// end and the wrapped start.
    fn published(&self, from: u64, to: u64) -> (&[u8], &[u8]) {
        let start = (from & (self.cap - 1)) as usize;
        let len = (to - from) as usize;
        let first = len.min(self.cap as usize - start);
        // SAFETY: both ranges are inside the ring; the bytes were
        // published (the acquire load of `head` in the caller) and the
        // producer does not write them until the tail moves past them,
        // which only the caller, holding the sink, does after these slices
        // are dropped.
        unsafe {
            (
                std::slice::from_raw_parts(self.buf.as_ptr().add(start), first),
                std::slice::from_raw_parts(self.buf.as_ptr(), len - first),
            )
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: `buf` came from `Box::into_raw` of a boxed slice of
        // `cap` bytes in `new`, and is freed only here.
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.buf.as_ptr(),
                self.cap as usize,
            ))
        });
    }
}

/// Say the first write error of a channel once; its later records are
/// dropped.
#[cold]
fn note_error(s: &mut Sink, e: std::io::Error) {
    if s.error.is_none() {
        let msg = format!("{}: {e}", s.name);
        eprintln!("mqblk: blktrace: cannot write {msg}; the rest of its events are dropped");
        s.error = Some(msg);
    }
}

/// Write `a` then `b`, with as few `writev` calls as the file takes.
fn write_both(out: &mut dyn Write, mut a: &[u8], mut b: &[u8]) -> std::io::Result<()> {
    while !a.is_empty() || !b.is_empty() {
        let n = match out.write_vectored(&[IoSlice::new(a), IoSlice::new(b)]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    /// A sink the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<StdMutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            // Short writes, to walk `write_both`'s loop.
            let n = b.len().min(100);
            self.0.lock().unwrap().extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the producer does: wait for room (here by draining), put,
    /// publish.
    fn produce(ch: &Channel, head: &mut u64, rec: &[u8]) {
        if *head + rec.len() as u64 - ch.tail() > ch.capacity() {
            ch.drain();
        }
        assert!(*head + rec.len() as u64 - ch.tail() <= ch.capacity());
        // SAFETY: this test is the one producer and checked the room.
        unsafe { ch.put(*head, rec) };
        *head += rec.len() as u64;
        ch.publish(*head);
    }

    #[test]
    fn records_come_out_in_order_across_the_wrap() {
        let out = Shared::default();
        let ch = Channel::new(256, Box::new(out.clone()), "t".into());
        assert_eq!(ch.capacity(), 256);
        let mut head = 0;
        let mut want = Vec::new();
        for i in 0..100u8 {
            // Records of 48, 56 and 64 bytes, so they straddle the end.
            let rec = vec![i; 48 + 8 * (i as usize % 3)];
            want.extend_from_slice(&rec);
            produce(&ch, &mut head, &rec);
            if i % 7 == 0 {
                assert!(ch.try_drain());
            }
        }
        let c = ch.close().unwrap();
        assert_eq!(ch.close(), None);
        assert_eq!(c.bytes, want.len() as u64);
        assert_eq!(c.lost, 0);
        assert_eq!(*out.0.lock().unwrap(), want);
        // Closed: what comes later is dropped, not written.
        produce(&ch, &mut head, &[1; 48]);
        ch.drain();
        assert_eq!(out.0.lock().unwrap().len(), want.len());
    }

    /// Under Miri (whose race detector checks the ring's protocol) with
    /// fewer records.
    #[test]
    fn a_drainer_on_another_thread_sees_every_byte_once() {
        let records: u32 = if cfg!(miri) { 60 } else { 5000 };
        let out = Shared::default();
        let ch = Arc::new(Channel::new(512, Box::new(out.clone()), "t".into()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = {
            let (ch, stop) = (ch.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    ch.drain();
                    std::thread::yield_now();
                }
            })
        };
        let mut head = 0;
        let mut want = Vec::new();
        for i in 0..records {
            let rec: Vec<u8> = (0..48).map(|k| (i as u8).wrapping_add(k)).collect();
            want.extend_from_slice(&rec);
            while head + 48 - ch.tail() > ch.capacity() {
                std::thread::yield_now();
            }
            // SAFETY: the one producer, with room checked above.
            unsafe { ch.put(head, &rec) };
            head += 48;
            ch.publish(head);
        }
        stop.store(true, Ordering::Relaxed);
        d.join().unwrap();
        ch.close();
        assert!(*out.0.lock().unwrap() == want);
    }

    #[test]
    fn a_failed_write_is_said_once_and_drops_the_rest() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let ch = Channel::new(128, Box::new(Full), "x.blktrace.0".into());
        let mut head = 0;
        for _ in 0..10 {
            produce(&ch, &mut head, &[0; 48]);
        }
        let c = ch.close().unwrap();
        assert_eq!(c.bytes, 0);
        assert!(c.error.unwrap().starts_with("x.blktrace.0: "));
    }
}
