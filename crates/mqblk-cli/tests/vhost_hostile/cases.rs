//! The hostile cases: each builds its chain on a new frontend's queue and
//! names what it may get.

use mqblk_test_support::vhost_frontend::{
    flags, header, linked, req, segment, segment_bytes, status, BlkConfig, Desc, Layout, VhostBlk,
    SECTOR_BYTES, SEGMENTS_BYTES,
};

/// What a case may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// This status byte.
    Status(u8),
    /// No used element: the ring is broken.
    Broken,
}

pub(crate) const OK: Expect = Expect::Status(status::OK);
pub(crate) const IOERR: Expect = Expect::Status(status::IOERR);
pub(crate) const UNSUPP: Expect = Expect::Status(status::UNSUPP);
pub(crate) const BROKEN: Expect = Expect::Broken;

/// What a case puts on the queue.
pub(crate) struct Sent {
    pub(crate) descs: Vec<Desc>,
    pub(crate) head: u16,
    pub(crate) avail_advance: u16,
    /// Where the status byte is, if anywhere the device could write it.
    pub(crate) status_gpa: Option<u64>,
}

/// What a case needs to build its chain.
pub(crate) struct Ctx<'a> {
    pub(crate) fe: &'a mut VhostBlk,
    pub(crate) l: Layout,
    pub(crate) cfg: BlkConfig,
    pub(crate) q: u16,
}

impl Ctx<'_> {
    /// Put a header (`req_type`, `sector`) at the queue's header address.
    pub(crate) fn header(&mut self, req_type: u32, sector: u64) -> u64 {
        let at = self.l.header_gpa(self.q);
        self.fe
            .mem()
            .put_bytes(at, &header(req_type, sector))
            .expect("write a header");
        at
    }

    pub(crate) fn status(&self) -> u64 {
        self.l.status_gpa(self.q)
    }

    pub(crate) fn data(&self) -> u64 {
        self.l.data_gpa(self.q)
    }

    /// A chain of `bufs` linked from slot 0, head 0, the status where the
    /// last buffer is when it is the queue's status address.
    pub(crate) fn chain(&self, bufs: &[(u64, u32, bool)]) -> Sent {
        let status_gpa = bufs.last().map(|b| b.0).filter(|&a| a == self.status());
        Sent {
            descs: linked(0, bufs),
            head: 0,
            avail_advance: 1,
            status_gpa,
        }
    }

    /// A read of `len` bytes at `sector` into the data area.
    pub(crate) fn read(&mut self, sector: u64, len: u32) -> Sent {
        let h = self.header(req::IN, sector);
        self.chain(&[
            (h, 16, false),
            (self.data(), len, true),
            (self.status(), 1, true),
        ])
    }

    /// A request of `req_type` whose data is `segs` at the segments' area.
    pub(crate) fn segments(&mut self, req_type: u32, sector: u64, bytes: &[u8]) -> Sent {
        let at = self.l.segments_gpa(self.q);
        self.fe.mem().put_bytes(at, bytes).expect("write segments");
        let h = self.header(req_type, sector);
        self.chain(&[
            (h, 16, false),
            (at, bytes.len() as u32, false),
            (self.status(), 1, true),
        ])
    }

    /// The discard granularity in sectors (at least a block).
    pub(crate) fn discard_align(&self) -> u64 {
        let block = u64::from(self.cfg.blk_size.max(512)) / SECTOR_BYTES;
        u64::from(self.cfg.discard_sector_alignment)
            .max(block)
            .max(1)
    }

    /// An indirect table of `descs` in slot `slot`, and a direct INDIRECT
    /// descriptor naming it (with `len` overriding its length).
    pub(crate) fn indirect(&mut self, slot: u16, descs: &[Desc], len: Option<u32>) -> Desc {
        let (at, n) = self
            .fe
            .put_indirect(self.q, slot, descs)
            .expect("write an indirect table");
        Desc::new(at, len.unwrap_or(n), flags::INDIRECT, 0)
    }
}

/// One hostile case: its name, what it may get, and its chain (or why
/// the device makes it impossible).
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) expect: &'static [Expect],
    pub(crate) build: fn(&mut Ctx) -> Result<Sent, String>,
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "read into data past the end of guest memory",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                Ok(c.chain(&[
                    (h, 16, false),
                    (c.l.end_gpa(), 4096, true),
                    (c.status(), 1, true),
                ]))
            },
        },
        Case {
            name: "read into data in the hole between the regions",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                let hole = c.l.hole_gpa() + 0x1000;
                Ok(c.chain(&[(h, 16, false), (hole, 4096, true), (c.status(), 1, true)]))
            },
        },
        Case {
            name: "write from data that runs from a region into the hole",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::OUT, 0);
                let straddle = c.l.hole_gpa() - 2048;
                Ok(c.chain(&[
                    (h, 16, false),
                    (straddle, 4096, false),
                    (c.status(), 1, true),
                ]))
            },
        },
        Case {
            name: "status byte past the end of guest memory",
            expect: &[BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                Ok(c.chain(&[
                    (h, 16, false),
                    (c.data(), 4096, true),
                    (c.l.end_gpa() + 16, 1, true),
                ]))
            },
        },
        Case {
            name: "status byte in the hole",
            expect: &[BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                Ok(c.chain(&[
                    (h, 16, false),
                    (c.data(), 4096, true),
                    (c.l.hole_gpa(), 1, true),
                ]))
            },
        },
        Case {
            name: "header past the end of guest memory",
            expect: &[IOERR, BROKEN],
            build: |c| Ok(c.chain(&[(c.l.end_gpa(), 16, false), (c.status(), 1, true)])),
        },
        Case {
            name: "header in the hole",
            expect: &[IOERR, BROKEN],
            build: |c| Ok(c.chain(&[(c.l.hole_gpa() + 64, 16, false), (c.status(), 1, true)])),
        },
        Case {
            name: "a header and no status byte",
            expect: &[BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                Ok(c.chain(&[(h, 16, false)]))
            },
        },
        Case {
            name: "a status byte and no header",
            expect: &[IOERR, BROKEN],
            build: |c| Ok(c.chain(&[(c.status(), 1, true)])),
        },
        Case {
            name: "a header of 8 bytes",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                Ok(c.chain(&[(h, 8, false), (c.data(), 512, true), (c.status(), 1, true)]))
            },
        },
        Case {
            name: "a header the device may write",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                Ok(c.chain(&[(h, 16, true), (c.status(), 1, true)]))
            },
        },
        Case {
            name: "a read into a buffer the device may only read",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                Ok(c.chain(&[
                    (h, 16, false),
                    (c.data(), 4096, false),
                    (c.status(), 1, true),
                ]))
            },
        },
        Case {
            name: "a write from a buffer the device may write",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::OUT, 0);
                Ok(c.chain(&[
                    (h, 16, false),
                    (c.data(), 4096, true),
                    (c.status(), 1, true),
                ]))
            },
        },
        Case {
            name: "a status byte the device may only read",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                Ok(c.chain(&[(h, 16, false), (c.status(), 1, false)]))
            },
        },
        Case {
            name: "a loop in next",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                let mut s =
                    c.chain(&[(h, 16, false), (c.data(), 512, true), (c.status(), 1, true)]);
                // The status descriptor goes on to the header again.
                s.descs[2] = Desc::new(c.status(), 1, flags::WRITE | flags::NEXT, 0);
                Ok(s)
            },
        },
        Case {
            name: "next past the queue size",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                let size = c.fe.queue_size(c.q).map_err(|e| e.to_string())?;
                let mut s = c.chain(&[(h, 16, false), (c.status(), 1, true)]);
                s.descs[0] = Desc::new(h, 16, flags::NEXT, size + 5);
                Ok(s)
            },
        },
        Case {
            name: "a head past the queue size",
            expect: &[BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                let size = c.fe.queue_size(c.q).map_err(|e| e.to_string())?;
                let mut s = c.chain(&[(h, 16, false), (c.status(), 1, true)]);
                s.head = size + 3;
                s.status_gpa = None;
                Ok(s)
            },
        },
        Case {
            name: "an indirect table inside an indirect table",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                let inner = linked(0, &[(h, 16, false), (c.status(), 1, true)]);
                let to_inner = c.indirect(1, &inner, None);
                let outer = c.indirect(0, &[to_inner], None);
                Ok(Sent {
                    descs: vec![outer],
                    head: 0,
                    avail_advance: 1,
                    status_gpa: Some(c.status()),
                })
            },
        },
        Case {
            name: "an indirect table of 40 bytes (not a multiple of 16)",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                let table = linked(0, &[(h, 16, false), (c.status(), 1, true)]);
                let d = c.indirect(0, &table, Some(40));
                Ok(Sent {
                    descs: vec![d],
                    head: 0,
                    avail_advance: 1,
                    status_gpa: Some(c.status()),
                })
            },
        },
        Case {
            name: "an indirect table past the end of guest memory",
            expect: &[BROKEN],
            build: |c| {
                let d = Desc::new(c.l.end_gpa(), 32, flags::INDIRECT, 0);
                Ok(Sent {
                    descs: vec![d],
                    head: 0,
                    avail_advance: 1,
                    status_gpa: None,
                })
            },
        },
        Case {
            name: "an indirect table in the hole",
            expect: &[BROKEN],
            build: |c| {
                let d = Desc::new(c.l.hole_gpa() + 0x100, 32, flags::INDIRECT, 0);
                Ok(Sent {
                    descs: vec![d],
                    head: 0,
                    avail_advance: 1,
                    status_gpa: None,
                })
            },
        },
        Case {
            name: "an indirect descriptor that also has NEXT (the device may ignore NEXT)",
            expect: &[OK, IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::FLUSH, 0);
                let table = linked(0, &[(h, 16, false), (c.status(), 1, true)]);
                let t = c.indirect(0, &table, None);
                let d = Desc::new(t.addr().0, t.len(), flags::INDIRECT | flags::NEXT, 1);
                let extra = Desc::new(c.status(), 1, flags::WRITE, 0);
                Ok(Sent {
                    descs: vec![d, extra],
                    head: 0,
                    avail_advance: 1,
                    status_gpa: Some(c.status()),
                })
            },
        },
        Case {
            name: "a data buffer whose address plus length overflows u64",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                Ok(c.chain(&[
                    (h, 16, false),
                    (u64::MAX - 1023, 4096, true),
                    (c.status(), 1, true),
                ]))
            },
        },
        Case {
            name: "data buffers whose lengths add up past u32",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let h = c.header(req::IN, 0);
                let d = c.data();
                Ok(c.chain(&[
                    (h, 16, false),
                    (d, 0xffff_f000, true),
                    (d, 0xffff_f000, true),
                    (c.status(), 1, true),
                ]))
            },
        },
        Case {
            name: "a data segment longer than SIZE_MAX",
            expect: &[IOERR, BROKEN],
            build: |c| {
                if c.cfg.size_max == 0 {
                    return Err("the device names no SIZE_MAX".into());
                }
                let len = c.cfg.size_max.saturating_add(4096);
                if u64::from(len) > c.l.data_bytes {
                    return Err(format!("SIZE_MAX {} is past the data area", c.cfg.size_max));
                }
                Ok(c.read(0, len))
            },
        },
        Case {
            name: "more data segments than SEG_MAX",
            expect: &[IOERR, BROKEN],
            build: |c| {
                let n = c.cfg.seg_max as usize + 1;
                if c.cfg.seg_max == 0 || n + 2 > 512 || (n as u64) * 512 > c.l.data_bytes {
                    return Err(format!(
                        "SEG_MAX {} does not fit a test table",
                        c.cfg.seg_max
                    ));
                }
                let h = c.header(req::IN, 0);
                let mut bufs = vec![(h, 16, false)];
                bufs.extend((0..n).map(|i| (c.data() + 512 * i as u64, 512, true)));
                bufs.push((c.status(), 1, true));
                let table = linked(0, &bufs);
                let d = c.indirect(0, &table, None);
                Ok(Sent {
                    descs: vec![d],
                    head: 0,
                    avail_advance: 1,
                    status_gpa: Some(c.status()),
                })
            },
        },
        Case {
            name: "an unknown request type (0xdead)",
            expect: &[UNSUPP],
            build: |c| {
                let h = c.header(0xdead, 0);
                Ok(c.chain(&[(h, 16, false), (c.data(), 512, true), (c.status(), 1, true)]))
            },
        },
        Case {
            name: "the legacy SCSI request type (2)",
            expect: &[UNSUPP],
            build: |c| {
                let h = c.header(2, 0);
                Ok(c.chain(&[(h, 16, false), (c.status(), 1, true)]))
            },
        },
        Case {
            name: "a read past the end of the device",
            expect: &[IOERR],
            build: |c| Ok(c.read(c.cfg.capacity_sectors - 1, 4096)),
        },
        Case {
            name: "a read at a sector whose byte offset overflows u64",
            expect: &[IOERR],
            build: |c| Ok(c.read(u64::MAX - 7, 4096)),
        },
        Case {
            name: "a write past the end of the device",
            expect: &[IOERR],
            build: |c| {
                let h = c.header(req::OUT, c.cfg.capacity_sectors - 1);
                Ok(c.chain(&[
                    (h, 16, false),
                    (c.data(), 4096, false),
                    (c.status(), 1, true),
                ]))
            },
        },
        Case {
            name: "a discard past the end of the device",
            expect: &[IOERR],
            build: |c| {
                let a = c.discard_align();
                let seg = segment(c.cfg.capacity_sectors - a, 2 * a as u32, 0);
                Ok(c.segments(req::DISCARD, seg.sector, &segment_bytes(&[seg])))
            },
        },
        Case {
            name: "a write-zeroes past the end of the device",
            expect: &[IOERR],
            build: |c| {
                let a = c.discard_align();
                let seg = segment(c.cfg.capacity_sectors - a, 2 * a as u32, 0);
                Ok(c.segments(req::WRITE_ZEROES, seg.sector, &segment_bytes(&[seg])))
            },
        },
        Case {
            name: "a discard whose segment list is 8 bytes",
            expect: &[IOERR, UNSUPP],
            build: |c| {
                let seg = segment(0, c.discard_align() as u32, 0);
                Ok(c.segments(req::DISCARD, 0, &segment_bytes(&[seg])[..8]))
            },
        },
        Case {
            name: "a discard with more segments than max_discard_seg",
            expect: &[IOERR, UNSUPP],
            build: |c| {
                let n = c.cfg.max_discard_seg as usize + 1;
                if c.cfg.max_discard_seg == 0 || 16 * n as u64 > SEGMENTS_BYTES {
                    return Err(format!(
                        "max_discard_seg {} does not fit the segments' area",
                        c.cfg.max_discard_seg
                    ));
                }
                let a = c.discard_align();
                let segs: Vec<_> = (0..n as u64).map(|i| segment(i * a, a as u32, 0)).collect();
                Ok(c.segments(req::DISCARD, 0, &segment_bytes(&segs)))
            },
        },
        Case {
            name: "a discard longer than max_discard_sectors",
            expect: &[IOERR, UNSUPP],
            build: |c| {
                let a = c.discard_align();
                let max = u64::from(c.cfg.max_discard_sectors);
                // A block past the limit, or all a segment can say.
                let len = (max + a).min(u64::from(u32::MAX));
                if max == 0 || len <= max {
                    return Err(format!("max_discard_sectors {max} leaves no longer one"));
                }
                let seg = segment(0, len as u32, 0);
                Ok(c.segments(req::DISCARD, 0, &segment_bytes(&[seg])))
            },
        },
        Case {
            name: "a discard at a sector off the discard alignment",
            expect: &[IOERR, UNSUPP],
            build: |c| {
                let a = c.discard_align();
                if a < 2 {
                    return Err("the device discards any sector".into());
                }
                let seg = segment(1, a as u32, 0);
                Ok(c.segments(req::DISCARD, 1, &segment_bytes(&[seg])))
            },
        },
        Case {
            name: "a discard with an unknown flag (0x2)",
            expect: &[UNSUPP],
            build: |c| {
                let seg = segment(0, c.discard_align() as u32, 0x2);
                Ok(c.segments(req::DISCARD, 0, &segment_bytes(&[seg])))
            },
        },
        Case {
            name: "an avail index that jumps past the queue size",
            expect: &[BROKEN],
            build: |c| {
                let size = c.fe.queue_size(c.q).map_err(|e| e.to_string())?;
                let h = c.header(req::FLUSH, 0);
                let mut s = c.chain(&[(h, 16, false), (c.status(), 1, true)]);
                s.avail_advance = size + 1;
                Ok(s)
            },
        },
    ]
}
