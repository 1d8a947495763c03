//! A server connection's replies waiting to be written, in completion
//! order, and how much of them the socket took. Below the connection's
//! state (`state.rs`), which holds one [`OutQueue`], and beside the wire
//! (`wire.rs`), which it does not use: `reply.rs` gathers the queue's
//! slices and writes them. It knows nothing of the connection around it:
//! a reply that leaves the queue is handed back to the caller, which
//! returns its data buffer.

use std::collections::VecDeque;
use std::io::IoSlice;

use mqblk_core::IoBuf;
use mqblk_nbd_proto::transmission::OFFSET_DATA_PREFIX_LEN;

/// Slices per writev.
pub(super) const IOV_BATCH: usize = 64;

/// One reply waiting to be written.
pub(super) enum Out {
    /// A header-only reply (simple reply, or a small chunk).
    Small { buf: [u8; 32], len: u8 },
    /// Read data: the header (simple or `OFFSET_DATA` prefix), then `len`
    /// bytes of `data`.
    Data {
        prefix: [u8; OFFSET_DATA_PREFIX_LEN],
        prefix_len: u8,
        data: IoBuf,
        len: u32,
    },
    /// A sparse read: chunk headers in `headers`, and `pieces` of
    /// (header start, header len, data start, data len) into it and `data`.
    Sparse {
        headers: Vec<u8>,
        pieces: Vec<[u32; 4]>,
        data: IoBuf,
    },
    /// A variable-size reply (error chunk with a message, block status).
    Bytes(Vec<u8>),
}

impl Out {
    fn for_each_part<'a>(&'a self, mut f: impl FnMut(&'a [u8]) -> bool) {
        match self {
            Out::Small { buf, len } => {
                f(&buf[..*len as usize]);
            }
            Out::Data {
                prefix,
                prefix_len,
                data,
                len,
            } => {
                if f(&prefix[..*prefix_len as usize]) {
                    f(&data.as_slice()[..*len as usize]);
                }
            }
            Out::Sparse {
                headers,
                pieces,
                data,
            } => {
                for p in pieces {
                    let h = &headers[p[0] as usize..(p[0] + p[1]) as usize];
                    if !f(h) {
                        return;
                    }
                    if p[3] > 0 && !f(&data.as_slice()[p[2] as usize..(p[2] + p[3]) as usize]) {
                        return;
                    }
                }
            }
            Out::Bytes(v) => {
                f(v);
            }
        }
    }

    fn len(&self) -> usize {
        let mut n = 0;
        self.for_each_part(|p| {
            n += p.len();
            true
        });
        n
    }
}

/// The replies queued on one connection.
#[derive(Default)]
pub(super) struct OutQueue {
    items: VecDeque<Out>,
    /// Bytes of `items.front()` already written.
    pos: usize,
    /// Bytes of the queued `Small` and `Bytes` replies (errors, block
    /// status, the handshake's last reply): those that hold no data
    /// buffer, bounded apart.
    meta_bytes: usize,
}

impl OutQueue {
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(super) fn meta_bytes(&self) -> usize {
        self.meta_bytes
    }

    /// Queue a reply with data (`Data` or `Sparse`).
    pub(super) fn push(&mut self, o: Out) {
        debug_assert!(matches!(o, Out::Data { .. } | Out::Sparse { .. }));
        self.items.push_back(o);
    }

    pub(super) fn push_bytes(&mut self, v: Vec<u8>) {
        self.meta_bytes += v.len();
        self.items.push_back(Out::Bytes(v));
    }

    pub(super) fn push_small(&mut self, b: &[u8]) {
        debug_assert!(b.len() <= 32);
        self.meta_bytes += b.len();
        let mut buf = [0u8; 32];
        buf[..b.len()].copy_from_slice(b);
        self.items.push_back(Out::Small {
            buf,
            len: b.len() as u8,
        });
    }

    /// Take the first reply off the queue, written or not.
    pub(super) fn pop_front(&mut self) -> Option<Out> {
        let o = self.items.pop_front()?;
        match &o {
            Out::Small { len, .. } => self.meta_bytes -= *len as usize,
            Out::Bytes(v) => self.meta_bytes -= v.len(),
            Out::Data { .. } | Out::Sparse { .. } => {}
        }
        Some(o)
    }

    /// The unwritten bytes, as up to [`IOV_BATCH`] slices from the front
    /// of the queue. Returns how many slices were filled.
    pub(super) fn gather<'a>(&'a self, iov: &mut [IoSlice<'a>; IOV_BATCH]) -> usize {
        let mut n = 0;
        let mut skip = self.pos;
        for item in self.items.iter() {
            item.for_each_part(|part| {
                if part.is_empty() {
                    return true;
                }
                if skip >= part.len() {
                    skip -= part.len();
                    return true;
                }
                if n == IOV_BATCH {
                    return false;
                }
                iov[n] = IoSlice::new(&part[skip..]);
                skip = 0;
                n += 1;
                true
            });
            if n == IOV_BATCH {
                break;
            }
        }
        n
    }

    /// The socket took `written` more bytes.
    pub(super) fn wrote(&mut self, written: usize) {
        self.pos += written;
    }

    /// Take the next reply that is all written off the queue.
    pub(super) fn pop_written(&mut self) -> Option<Out> {
        let Some(front) = self.items.front() else {
            self.pos = 0;
            return None;
        };
        let l = front.len();
        if self.pos < l {
            return None;
        }
        self.pos -= l;
        self.pop_front()
    }
}
