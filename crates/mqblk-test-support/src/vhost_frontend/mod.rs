//! A minimal virtio-blk driver over vhost-user, for tests: the part of a
//! VMM that a vhost-user-blk backend talks to, with nothing of a guest
//! kernel's care. It lays out guest memory in two memfd regions with a
//! hole, sets up N split virtqueues in it, and then puts on a queue any
//! chain of descriptors a test builds (direct or indirect, any address,
//! length, flags and next) and waits, bounded, for the used element or
//! for none (a ring the device marked broken). Helpers build the good
//! requests: read, write, flush, discard, write-zeroes, get-id.
//!
//! Files by call order: this face; `connection` (the vhost-user control
//! messages); `blk` (virtio-blk's formats); `vring` (one split ring);
//! `memory` (the guest memory); `error`.

mod blk;
mod connection;
mod error;
mod memory;
mod vring;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use blk::{
    header, req, segment, segment_bytes, status, BlkConfig, SECTOR_BYTES, SEGMENT_UNMAP,
};
pub use error::FrontendError;
pub use memory::{GuestMem, Layout, HOLE_BYTES, INDIRECT_TABLES, QUEUE_SIZE_MAX, SEGMENTS_BYTES};
pub use vhost::vhost_user::message::VhostUserProtocolFeatures;
/// virtio's constants (feature bits and the like), for the tests' checks.
pub use virtio_bindings;
pub use virtio_bindings::virtio_blk::virtio_blk_discard_write_zeroes;
pub use vring::{flags, linked, Desc, Used};

use connection::{Control, Negotiated};
use vring::SplitRing;

/// How the frontend sets itself up.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Queues to set up (at most the backend's).
    pub num_queues: u16,
    /// Descriptors per queue (a power of two, at most [`QUEUE_SIZE_MAX`]).
    pub queue_size: u16,
    /// Ack EVENT_IDX when offered.
    pub event_idx: bool,
    /// Ack INDIRECT_DESC when offered.
    pub indirect: bool,
    /// The least data area per queue, in bytes (grown to hold a segment
    /// past the device's SIZE_MAX).
    pub data_bytes: u64,
    /// The longest wait for a vhost-user reply.
    pub reply_max: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            num_queues: 2,
            queue_size: 128,
            event_idx: true,
            indirect: true,
            data_bytes: 0x20_0000,
            reply_max: Duration::from_secs(10),
        }
    }
}

/// What a device did with a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A used element came back and the status byte holds `status`.
    Status {
        /// The status byte.
        status: u8,
        /// The used element's length.
        len: u32,
    },
    /// A used element came back but the status byte the test watches was
    /// not written (or there is none it could be).
    UsedNoStatus {
        /// The used element's length.
        len: u32,
    },
    /// No used element within the wait: the device dropped the chain or
    /// marked the ring broken.
    NoAnswer,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Status { status: s, len } => {
                write!(f, "{} (used len {len})", status::name(*s))
            }
            Outcome::UsedNoStatus { len } => write!(f, "used (len {len}) with no status written"),
            Outcome::NoAnswer => write!(f, "no answer (ring broken)"),
        }
    }
}

/// A request as a well-behaved driver lays it out.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// The header's type ([`req`]).
    pub req_type: u32,
    /// The header's sector.
    pub sector: u64,
    /// Its data buffer: length, and whether the device writes it.
    pub data: Option<(u32, bool)>,
    /// The data buffer is the segments' area (discard, write-zeroes).
    pub at_segments: bool,
}

impl Request {
    /// A request with no data.
    pub fn new(req_type: u32, sector: u64) -> Request {
        Request {
            req_type,
            sector,
            data: None,
            at_segments: false,
        }
    }

    /// With a data buffer of `len` bytes that the device writes (or reads).
    pub fn data(mut self, len: u32, device_writes: bool) -> Request {
        self.data = Some((len, device_writes));
        self
    }
}

/// A connected, set-up frontend.
pub struct VhostBlk {
    socket: PathBuf,
    control: Control,
    mem: GuestMem,
    rings: Vec<SplitRing>,
    negotiated: Negotiated,
}

impl VhostBlk {
    /// Connect to the backend on `socket` and set up `opts.num_queues`
    /// queues.
    pub fn connect(socket: &Path, opts: Options) -> Result<VhostBlk, FrontendError> {
        let mut control = Control::connect(socket, opts.num_queues, opts.reply_max)?;
        let negotiated = control.negotiate(opts.event_idx, opts.indirect)?;
        if u64::from(opts.num_queues) > negotiated.backend_queues {
            return Err(FrontendError::Backend {
                socket: socket.to_path_buf(),
                what: format!(
                    "has {} queues, fewer than the {} asked for",
                    negotiated.backend_queues, opts.num_queues
                ),
            });
        }
        if opts.queue_size > QUEUE_SIZE_MAX || !opts.queue_size.is_power_of_two() {
            return Err(FrontendError::ChainTooLong {
                queue: 0,
                descs: usize::from(opts.queue_size),
                room: usize::from(QUEUE_SIZE_MAX),
            });
        }
        // Room for one segment past SIZE_MAX, page-aligned, up to 64 MiB.
        let past_size_max = (u64::from(negotiated.config.size_max) + 0x2000).min(0x400_0000);
        let data_bytes = opts.data_bytes.max(past_size_max).next_multiple_of(0x1000);
        let layout = Layout {
            num_queues: opts.num_queues,
            data_bytes,
        };
        let mem = GuestMem::new(layout)?;
        control.set_mem_table(&mem)?;
        let mut rings = Vec::with_capacity(usize::from(opts.num_queues));
        for q in 0..opts.num_queues {
            let ring = SplitRing::new(
                q,
                opts.queue_size,
                layout.desc_gpa(q),
                layout.avail_gpa(q),
                layout.used_gpa(q),
            )?;
            control.set_up_ring(&mem, &ring)?;
            rings.push(ring);
        }
        Ok(VhostBlk {
            socket: socket.to_path_buf(),
            control,
            mem,
            rings,
            negotiated,
        })
    }

    /// The socket it is connected to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The device's config space.
    pub fn config(&self) -> BlkConfig {
        self.negotiated.config
    }

    /// The virtio features acked.
    pub fn features(&self) -> u64 {
        self.negotiated.features
    }

    /// The protocol features acked.
    pub fn protocol_features(&self) -> VhostUserProtocolFeatures {
        self.negotiated.protocol
    }

    /// Where everything is in guest memory.
    pub fn layout(&self) -> Layout {
        self.mem.layout
    }

    /// The guest memory (to put headers, data and segments in, and read
    /// them back).
    pub fn mem(&self) -> &GuestMem {
        &self.mem
    }

    /// Queue `q`'s size.
    pub fn queue_size(&mut self, q: u16) -> Result<u16, FrontendError> {
        Ok(self.ring(q)?.size)
    }

    fn ring(&mut self, q: u16) -> Result<&mut SplitRing, FrontendError> {
        Ok(self.mem_and_ring(q)?.1)
    }

    /// The guest memory and queue `q`'s ring, borrowed together.
    fn mem_and_ring(&mut self, q: u16) -> Result<(&GuestMem, &mut SplitRing), FrontendError> {
        let num_queues = self.rings.len() as u16;
        let ring = self
            .rings
            .get_mut(usize::from(q))
            .ok_or(FrontendError::NoQueue {
                queue: q,
                num_queues,
            })?;
        Ok((&self.mem, ring))
    }

    /// Write `descs` as queue `q`'s indirect table `slot` (below
    /// [`INDIRECT_TABLES`]): the address and length an INDIRECT
    /// descriptor names.
    pub fn put_indirect(
        &mut self,
        q: u16,
        slot: u16,
        descs: &[Desc],
    ) -> Result<(u64, u32), FrontendError> {
        let (mem, ring) = self.mem_and_ring(q)?;
        if slot >= INDIRECT_TABLES {
            return Err(FrontendError::ChainTooLong {
                queue: q,
                descs: descs.len(),
                room: 0,
            });
        }
        ring.put_indirect(mem, mem.layout.indirect_gpa(q, slot), slot, descs)
    }

    /// Put `descs` in queue `q`'s descriptor table from slot 0, publish
    /// `head`, move the avail index on by `avail_advance`, and kick.
    pub fn submit_raw(
        &mut self,
        q: u16,
        descs: &[Desc],
        head: u16,
        avail_advance: u16,
    ) -> Result<(), FrontendError> {
        let (mem, ring) = self.mem_and_ring(q)?;
        ring.put_descs(mem, 0, descs)?;
        ring.publish(mem, head, avail_advance)?;
        ring.kick()
    }

    /// Wait at most `max` for queue `q`'s next used element.
    pub fn wait_used(&mut self, q: u16, max: Duration) -> Result<Option<Used>, FrontendError> {
        let (mem, ring) = self.mem_and_ring(q)?;
        ring.wait_used(mem, max)
    }

    /// Submit `descs` (head at slot 0) on queue `q`, with the status byte
    /// the test watches at `status_gpa` (marked unwritten first, if it is
    /// in guest memory), and wait at most `max` for the answer. A queue
    /// that got [`Outcome::NoAnswer`] is not to be used again on this
    /// connection.
    pub fn exchange(
        &mut self,
        q: u16,
        descs: &[Desc],
        status_gpa: Option<u64>,
        max: Duration,
    ) -> Result<Outcome, FrontendError> {
        self.exchange_raw(q, descs, 0, 1, status_gpa, max)
    }

    /// As [`VhostBlk::exchange`], with the head and the avail index's step
    /// given.
    pub fn exchange_raw(
        &mut self,
        q: u16,
        descs: &[Desc],
        head: u16,
        avail_advance: u16,
        status_gpa: Option<u64>,
        max: Duration,
    ) -> Result<Outcome, FrontendError> {
        let status_gpa = status_gpa.filter(|&g| self.mem.contains(g));
        if let Some(g) = status_gpa {
            self.mem.put(g, status::UNWRITTEN)?;
        }
        self.submit_raw(q, descs, head, avail_advance)?;
        let Some(used) = self.wait_used(q, max)? else {
            return Ok(Outcome::NoAnswer);
        };
        let s = match status_gpa {
            Some(g) => self.mem.get::<u8>(g)?,
            None => status::UNWRITTEN,
        };
        Ok(if s == status::UNWRITTEN {
            Outcome::UsedNoStatus { len: used.len }
        } else {
            Outcome::Status {
                status: s,
                len: used.len,
            }
        })
    }

    /// A well-behaved request on queue `q`: its header at the queue's
    /// header address, its data (if any) at the data or segments area, its
    /// status at the status address.
    pub fn request(&mut self, q: u16, r: Request, max: Duration) -> Result<Outcome, FrontendError> {
        let layout = self.mem.layout;
        self.ring(q)?;
        self.mem
            .put_bytes(layout.header_gpa(q), &header(r.req_type, r.sector))?;
        let descs = blk::good_chain(&layout, q, r.data, r.at_segments);
        self.exchange(q, &descs, Some(layout.status_gpa(q)), max)
    }

    /// `request`, failing unless the status is OK.
    fn request_ok(
        &mut self,
        op: &'static str,
        q: u16,
        r: Request,
        max: Duration,
    ) -> Result<(), FrontendError> {
        match self.request(q, r, max)? {
            Outcome::Status {
                status: status::OK, ..
            } => Ok(()),
            Outcome::NoAnswer => Err(FrontendError::NoAnswer {
                op,
                sector: r.sector,
                queue: q,
                waited: max,
            }),
            other => Err(FrontendError::NotOk {
                op,
                sector: r.sector,
                queue: q,
                outcome: other.to_string(),
            }),
        }
    }

    /// Stop queue `q` (GET_VRING_BASE) and set it up again, empty, as a
    /// driver does when it resets its device: the ring's indexes back to
    /// 0 in memory, new kick and call eventfds.
    pub fn reset_ring(&mut self, q: u16) -> Result<(), FrontendError> {
        let size = self.ring(q)?.size;
        self.control.stop_ring(q)?;
        let l = self.mem.layout;
        // The avail and used rings' idx fields (after their 2-byte flags).
        self.mem.store_u16(l.avail_gpa(q) + 2, 0)?;
        self.mem.store_u16(l.used_gpa(q) + 2, 0)?;
        let ring = SplitRing::new(q, size, l.desc_gpa(q), l.avail_gpa(q), l.used_gpa(q))?;
        self.control.set_up_ring(&self.mem, &ring)?;
        self.rings[usize::from(q)] = ring;
        Ok(())
    }

    /// Read `len` bytes at `sector` on queue `q`.
    pub fn read(
        &mut self,
        q: u16,
        sector: u64,
        len: u32,
        max: Duration,
    ) -> Result<Vec<u8>, FrontendError> {
        let r = Request::new(req::IN, sector).data(len, true);
        self.request_ok("read", q, r, max)?;
        self.mem
            .get_bytes(self.mem.layout.data_gpa(q), len as usize)
    }

    /// Write `data` at `sector` on queue `q`.
    pub fn write(
        &mut self,
        q: u16,
        sector: u64,
        data: &[u8],
        max: Duration,
    ) -> Result<(), FrontendError> {
        self.ring(q)?;
        self.mem.put_bytes(self.mem.layout.data_gpa(q), data)?;
        let r = Request::new(req::OUT, sector).data(data.len() as u32, false);
        self.request_ok("write", q, r, max)
    }

    /// Flush on queue `q`.
    pub fn flush(&mut self, q: u16, max: Duration) -> Result<(), FrontendError> {
        self.request_ok("flush", q, Request::new(req::FLUSH, 0), max)
    }

    fn segments_request(
        &mut self,
        op: &'static str,
        req_type: u32,
        q: u16,
        segs: &[virtio_blk_discard_write_zeroes],
        max: Duration,
    ) -> Result<(), FrontendError> {
        self.ring(q)?;
        let bytes = segment_bytes(segs);
        self.mem
            .put_bytes(self.mem.layout.segments_gpa(q), &bytes)?;
        let sector = segs.first().map_or(0, |s| s.sector);
        let mut r = Request::new(req_type, sector).data(bytes.len() as u32, false);
        r.at_segments = true;
        self.request_ok(op, q, r, max)
    }

    /// Discard `segs` on queue `q`.
    pub fn discard(
        &mut self,
        q: u16,
        segs: &[virtio_blk_discard_write_zeroes],
        max: Duration,
    ) -> Result<(), FrontendError> {
        self.segments_request("discard", req::DISCARD, q, segs, max)
    }

    /// Write zeroes over `segs` on queue `q`.
    pub fn write_zeroes(
        &mut self,
        q: u16,
        segs: &[virtio_blk_discard_write_zeroes],
        max: Duration,
    ) -> Result<(), FrontendError> {
        self.segments_request("write-zeroes", req::WRITE_ZEROES, q, segs, max)
    }

    /// The device's id string (up to 20 bytes, NUL-padded) from queue `q`.
    pub fn get_id(&mut self, q: u16, max: Duration) -> Result<Vec<u8>, FrontendError> {
        let r = Request::new(req::GET_ID, 0).data(20, true);
        self.request_ok("get-id", q, r, max)?;
        self.mem.get_bytes(self.mem.layout.data_gpa(q), 20)
    }

    /// GET_VRING_BASE on every queue (the backend stops them), then close
    /// the socket.
    pub fn disconnect(mut self) -> Result<(), FrontendError> {
        for q in 0..self.rings.len() as u16 {
            self.control.stop_ring(q)?;
        }
        Ok(())
    }
}
