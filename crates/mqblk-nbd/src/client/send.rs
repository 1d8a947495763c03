//! The send side of one NBD client connection: requests queued in a batch
//! go out together, in one `writev`, when the core rings the doorbell
//! (`queue_rq` with `last`, or `commit_rqs`).
//!
//! Request headers are encoded into one buffer. A write's payload is not
//! copied: its segments are gathered from the request itself, which sits
//! in its slot while the batch is written.

use std::io::{self, IoSlice, Write};

use mqblk_nbd_proto::Request;

use super::queue::Slot;

/// Slices gathered per `writev`.
const IOV: usize = 64;

/// Requests encoded and not yet sent.
#[derive(Debug)]
pub(super) struct TxBatch {
    /// Encoded headers, in submission order.
    hdrs: Vec<u8>,
    /// The writes among them: their tag, and where their header ends in
    /// `hdrs` (their payload goes right after it).
    writes: Vec<(u32, usize)>,
}

impl TxBatch {
    pub(super) fn new(depth: usize) -> TxBatch {
        TxBatch {
            hdrs: Vec::with_capacity(depth * mqblk_nbd_proto::transmission::REQUEST_LEN),
            writes: Vec::with_capacity(depth),
        }
    }

    /// Queue a request; `tag` names its slot if a payload follows it.
    pub(super) fn push(&mut self, req: &Request, payload_of: Option<u32>) {
        self.hdrs.extend_from_slice(&req.encode());
        if let Some(tag) = payload_of {
            self.writes.push((tag, self.hdrs.len()));
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.hdrs.is_empty()
    }

    /// Forget what is queued (the connection is gone).
    pub(super) fn clear(&mut self) {
        self.hdrs.clear();
        self.writes.clear();
    }

    /// Send everything queued, then empty the batch.
    pub(super) fn send<W: Write>(&mut self, sock: &mut W, slots: &[Slot]) -> io::Result<()> {
        let r = self.send_all(sock, slots);
        self.clear();
        r
    }

    fn send_all<W: Write>(&self, sock: &mut W, slots: &[Slot]) -> io::Result<()> {
        if self.writes.is_empty() {
            return sock.write_all(&self.hdrs);
        }
        let mut iov = [IoSlice::new(&[]); IOV];
        let mut n = 0;
        let mut from = 0;
        for &(tag, hdr_end) in &self.writes {
            gather(sock, &mut iov, &mut n, &self.hdrs[from..hdr_end])?;
            from = hdr_end;
            // A write's request stays in its slot until its reply, which
            // cannot come before this payload is sent.
            if let Some(rq) = slots.get(tag as usize).and_then(|s| s.rq.as_ref()) {
                for seg in rq.write_bufs() {
                    gather(sock, &mut iov, &mut n, seg)?;
                }
            }
        }
        gather(sock, &mut iov, &mut n, &self.hdrs[from..])?;
        write_all_vectored(sock, &mut iov[..n])
    }
}

/// Add `s` to the slices; send them first if they are full.
fn gather<'b, W: Write>(
    sock: &mut W,
    iov: &mut [IoSlice<'b>; IOV],
    n: &mut usize,
    s: &'b [u8],
) -> io::Result<()> {
    if s.is_empty() {
        return Ok(());
    }
    if *n == IOV {
        write_all_vectored(sock, &mut iov[..])?;
        *n = 0;
    }
    iov[*n] = IoSlice::new(s);
    *n += 1;
    Ok(())
}

/// `Write::write_all_vectored`, which is not stable yet.
fn write_all_vectored<W: Write>(sock: &mut W, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match sock.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `max` bytes per call, to exercise the
    /// partial-write paths.
    struct Trickle {
        out: Vec<u8>,
        max: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.max);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn headers_alone_go_out_in_order_through_partial_writes() {
        let mut b = TxBatch::new(8);
        let mut want = Vec::new();
        for i in 0..40u64 {
            let r = Request {
                cookie: i,
                offset: i * 4096,
                len: 4096,
                ..Request::default()
            };
            want.extend_from_slice(&r.encode());
            b.push(&r, None);
        }
        let mut w = Trickle {
            out: Vec::new(),
            max: 7,
        };
        b.send(&mut w, &[]).unwrap();
        assert_eq!(w.out, want);
        assert!(b.is_empty());
    }
}
