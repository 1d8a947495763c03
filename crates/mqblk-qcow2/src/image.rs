//! An open image (control plane and metadata): the header, the L1 table,
//! the L2 cache and the refcounts behind one lock, the backing chain, the
//! file device that carries the data, and the synchronous metadata I/O
//! (pread/pwrite on a second descriptor of the same file, so the page
//! cache is shared with the file device, which runs with `direct=0`).
//!
//! Lookups ([`Image::map`]) turn a guest offset into what it reads as;
//! [`Image::read_guest`] reads any range synchronously (for backing files,
//! copy-on-write and compressed clusters).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use mqblk_core::driver::Extent;
use mqblk_core::queue::Device;

use crate::alloc::{Meta, Refcounts};
use crate::backing::{Backing, Layer};
use crate::cache::L2Cache;
use crate::check::{self, Region};
use crate::error::{Qcow2Error, Result};
use crate::file::{io_err, open_file_device, pread, ImageFile};
use crate::header::{self, Header};
use crate::snapshot::Snapshot;
use crate::table::{self, Cluster, L1Entry, Source};

/// What a full-cluster discard does (`discard=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiscardMode {
    /// Free the cluster (it reads as zeros, or as the backing file's data
    /// where only a zero flag can hide it).
    #[default]
    Unmap,
    /// Keep the cluster allocated and mark it zero.
    Zero,
}

/// How to open an image.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Open for writing (exclusive lock).
    pub writable: bool,
    /// `backing=`: this backing file instead of the header's.
    pub backing: Option<PathBuf>,
    /// `l2_cache_size=`: bytes of L2 tables held in memory.
    pub l2_cache_bytes: u64,
    /// `discard=`.
    pub discard: DiscardMode,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            writable: false,
            backing: None,
            l2_cache_bytes: crate::cache::DEFAULT_BYTES,
            discard: DiscardMode::Unmap,
        }
    }
}

/// An open image.
pub struct Image {
    /// The file, its header and its metadata I/O.
    pub f: ImageFile,
    pub(crate) backing: Option<Backing>,
    /// Internal snapshots.
    pub snapshots: Vec<Snapshot>,
    /// The file device that carries the data (and holds the image lock).
    pub(crate) data_dev: Device,
    pub(crate) meta: Mutex<Meta>,
    pub(crate) discard: DiscardMode,
}

impl std::ops::Deref for Image {
    type Target = ImageFile;
    fn deref(&self) -> &ImageFile {
        &self.f
    }
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image").field("name", &self.name).finish()
    }
}

fn be64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

impl Image {
    /// Open the image at `path`; `chain` holds the images above it (their
    /// canonical paths), to refuse a loop.
    pub fn open(path: &Path, opts: &OpenOptions, chain: &mut Vec<PathBuf>) -> Result<Arc<Image>> {
        let name: Arc<str> = path.display().to_string().into();
        crate::backing::enter_chain(path, chain)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(opts.writable)
            .open(path)
            .map_err(io_err(&name, "open", 0, 0))?;
        let file_len = file.metadata().map_err(io_err(&name, "stat", 0, 0))?.len();
        let mut first = vec![0u8; file_len.min(1 << header::MAX_CLUSTER_BITS) as usize];
        pread(&file, &name, "read of the header", 0, &mut first)?;
        let hdr = Header::parse(&name, &first, file_len)?;
        drop(first);
        let unsupported = |what: &str| Qcow2Error::Unsupported {
            image: name.clone(),
            what: what.into(),
        };
        if opts.writable && hdr.incompatible & header::incompat::CORRUPT != 0 {
            return Err(unsupported(
                "the image is marked corrupt: repair it with `qemu-img check -r all`, or open it with ro=1",
            ));
        }
        if opts.writable && hdr.extended_l2() {
            return Err(unsupported(
                "writing images with extended L2 entries (subclusters) is not supported: open it with ro=1",
            ));
        }
        let cs = hdr.cluster_size();
        let l2_bits = (hdr.l2_entries()).trailing_zeros();
        // The data device: the file, with room to grow when writable.
        let limit = if opts.writable {
            (file_len + hdr.size + hdr.size / 8 + 64 * cs + (1 << 20)).next_multiple_of(cs)
        } else {
            file_len.next_multiple_of(512).max(512)
        };
        let data_dev = open_file_device(path, opts.writable, limit)
            .map_err(|e| unsupported(&e.to_string()))?;
        let data_limit = data_dev.capacity_bytes();
        // Tables.
        let mut l1b = vec![0u8; hdr.l1_size as usize * 8];
        pread(
            &file,
            &name,
            "read of the L1 table",
            hdr.l1_table_offset,
            &mut l1b,
        )?;
        let l1 = be64s(&l1b);
        let rt_len = u64::from(hdr.refcount_table_clusters) * cs;
        let mut rtb = vec![0u8; rt_len as usize];
        pread(
            &file,
            &name,
            "read of the refcount table",
            hdr.refcount_table_offset,
            &mut rtb,
        )?;
        let rt = be64s(&rtb);
        let mut regions = vec![
            Region {
                what: "the header".into(),
                start: 0,
                end: cs,
            },
            Region {
                what: "the L1 table".into(),
                start: hdr.l1_table_offset,
                end: hdr.l1_table_offset + l1b.len() as u64,
            },
            Region {
                what: "the refcount table".into(),
                start: hdr.refcount_table_offset,
                end: hdr.refcount_table_offset + rt_len,
            },
        ];
        let file_bound = file_len.next_multiple_of(cs);
        for (i, &e) in rt.iter().enumerate() {
            let off = e & !(cs - 1);
            if e == 0 {
                continue;
            }
            if e & (cs - 1) != 0 {
                return Err(Qcow2Error::Offset {
                    image: name.clone(),
                    what: "refcount block",
                    offset: e,
                    from: format!("refcount table entry {i}"),
                    limit: format!("is not a multiple of the cluster size {cs}"),
                });
            }
            check::cluster_offset(
                &name,
                "refcount block",
                || format!("refcount table entry {i}"),
                off,
                cs,
                cs,
                file_bound,
            )?;
            regions.push(Region {
                what: format!("refcount block {i}"),
                start: off,
                end: off + cs,
            });
        }
        for (i, &raw) in l1.iter().enumerate() {
            let e = L1Entry::decode(raw).map_err(|limit| Qcow2Error::Offset {
                image: name.clone(),
                what: "L1 entry",
                offset: hdr.l1_table_offset + 8 * i as u64,
                from: format!("L1 entry {i}"),
                limit,
            })?;
            if e.l2_offset != 0 {
                check::cluster_offset(
                    &name,
                    "L2 table",
                    || format!("L1 entry {i}"),
                    e.l2_offset,
                    cs,
                    cs,
                    file_bound,
                )?;
                regions.push(Region {
                    what: format!("the L2 table of L1 entry {i}"),
                    start: e.l2_offset,
                    end: e.l2_offset + cs,
                });
            }
        }
        let (snapshots, snapshot_table_len) = if hdr.nb_snapshots > 0 {
            // The table's length is known only once parsed: read what the
            // file holds from its offset, up to 64 MiB.
            let len = (file_len - hdr.snapshots_offset).min(64 << 20);
            let mut b = vec![0u8; len as usize];
            pread(
                &file,
                &name,
                "read of the snapshot table",
                hdr.snapshots_offset,
                &mut b,
            )?;
            let (s, n) = crate::snapshot::parse(&b, hdr.nb_snapshots).map_err(|limit| {
                Qcow2Error::Offset {
                    image: name.clone(),
                    what: "snapshot table",
                    offset: hdr.snapshots_offset,
                    from: "the header".into(),
                    limit,
                }
            })?;
            regions.push(Region {
                what: "the snapshot table".into(),
                start: hdr.snapshots_offset,
                end: hdr.snapshots_offset + n,
            });
            for sn in &s {
                let len = u64::from(sn.l1_size) * 8;
                header::check_table(sn.l1_table_offset, len, cs, file_len).map_err(|limit| {
                    Qcow2Error::Offset {
                        image: name.clone(),
                        what: "snapshot L1 table",
                        offset: sn.l1_table_offset,
                        from: format!("snapshot {} ({})", sn.id, sn.name),
                        limit,
                    }
                })?;
                regions.push(Region {
                    what: format!("the L1 table of snapshot {}", sn.id),
                    start: sn.l1_table_offset,
                    end: sn.l1_table_offset + len,
                });
            }
            (s, n)
        } else {
            (Vec::new(), 0)
        };
        check::no_overlap(&name, regions)?;
        // The backing chain.
        let backing_path = match (&opts.backing, &hdr.backing_file) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(f)) => {
                let p = PathBuf::from(f);
                Some(if p.is_absolute() {
                    p
                } else {
                    path.parent().unwrap_or(Path::new(".")).join(p)
                })
            }
            (None, None) => None,
        };
        // An override is probed: the header's format is its own file's.
        let format = if opts.backing.is_some() {
            None
        } else {
            hdr.backing_format.as_deref()
        };
        let backing = match backing_path {
            Some(p) => Some(open_backing(&p, format, opts, chain)?),
            None => None,
        };
        let rc = Refcounts::new(
            rt,
            hdr.refcount_order,
            hdr.cluster_bits,
            hdr.refcount_table_offset,
            hdr.refcount_table_clusters,
        );
        let meta = Meta {
            l1,
            l1_dirty: false,
            cache: L2Cache::new(opts.l2_cache_bytes, cs),
            rc,
            pending_free: Vec::new(),
            old_free: Vec::new(),
            epoch: 0,
            file_end: file_bound,
            fresh_from: file_bound,
            limit: data_limit,
            incompatible: hdr.incompatible,
        };
        let img = Image {
            f: ImageFile {
                name,
                path: path.to_path_buf(),
                file,
                cs,
                l2_bits,
                hdr,
                writable: opts.writable,
                mapped: Default::default(),
            },
            backing,
            snapshots,
            data_dev,
            meta: Mutex::new(meta),
            discard: opts.discard,
        };
        {
            let mut m = img.lock();
            if img.writable && m.incompatible & header::incompat::DIRTY != 0 {
                // Lazy refcounts, not closed cleanly: count before allocating.
                let raised = img
                    .f
                    .repair_refcounts(&mut m, &img.snapshots, snapshot_table_len)?;
                if raised > 0 {
                    eprintln!(
                        "mqblk: {}: opened with the dirty bit set: {raised} refcounts raised to what the tables use",
                        img.name
                    );
                }
            }
            m.file_end = img.highest_used(&mut m)?;
        }
        if img.writable
            && img.hdr.compatible & header::COMPAT_LAZY_REFCOUNTS != 0
            && img.hdr.version == 3
        {
            let mut m = img.lock();
            let v = m.incompatible | header::incompat::DIRTY;
            img.set_incompatible(&mut m, v)?;
        }
        if img.writable && img.hdr.version == 3 && img.hdr.autoclear != 0 {
            // A writer that does not keep what an autoclear bit promises
            // (persistent bitmaps in step with the data) clears it.
            img.pwrite(
                "write of the header's autoclear features",
                header::field::AUTOCLEAR,
                &0u64.to_be_bytes(),
            )?;
            img.sync()?;
        }
        Ok(Arc::new(img))
    }

    /// The metadata, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file device carrying the data.
    pub fn data_device(&self) -> &Device {
        &self.data_dev
    }

    /// The backing file, if any.
    pub fn backing(&self) -> Option<&Backing> {
        self.backing.as_ref()
    }

    /// L2 cache hits, misses, and the bytes its tables take and may take.
    pub fn cache_stats(&self) -> (u64, u64, u64, u64) {
        let m = self.lock();
        (
            m.cache.hits,
            m.cache.misses,
            m.cache.memory_bytes(),
            m.cache.capacity() as u64 * self.cs,
        )
    }

    /// Over the hardware queues that have gone: requests planned from
    /// their L2 slices without the lock, requests planned under it, and
    /// the bytes the slices took.
    pub fn slice_stats(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.mapped;
        (
            s.slice_hits.load(Relaxed),
            s.slice_misses.load(Relaxed),
            s.slice_bytes.load(Relaxed),
        )
    }

    /// The L2 slot of L1 entry `i`, loading the table (`None`: no table).
    pub(crate) fn l2_slot(&self, m: &mut Meta, i: usize) -> Result<Option<(usize, L1Entry)>> {
        let raw = m.l1[i];
        let e = L1Entry::decode(raw).map_err(|limit| Qcow2Error::Offset {
            image: self.name.clone(),
            what: "L1 entry",
            offset: self.hdr.l1_table_offset + 8 * i as u64,
            from: format!("L1 entry {i}"),
            limit,
        })?;
        if e.l2_offset == 0 {
            return Ok(None);
        }
        let limit = self.read_limit(m);
        check::cluster_offset(
            &self.name,
            "L2 table",
            || format!("L1 entry {i}"),
            e.l2_offset,
            self.cs,
            self.cs,
            limit,
        )?;
        if let Some(s) = m.cache.lookup(e.l2_offset) {
            return Ok(Some((s, e)));
        }
        let mut data = vec![0u8; self.cs as usize];
        self.pread("read of an L2 table", e.l2_offset, &mut data)?;
        self.make_room(m)?;
        Ok(Some((m.cache.insert(e.l2_offset, data, false), e)))
    }

    /// The L1 index and L2 index of guest offset `guest`.
    pub(crate) fn indices(&self, guest: u64) -> (usize, usize) {
        let c = guest >> self.hdr.cluster_bits;
        (
            (c >> self.l2_bits) as usize,
            (c & ((1 << self.l2_bits) - 1)) as usize,
        )
    }

    /// The raw L2 entry (and bitmap) at `slot`, index `j`.
    pub(crate) fn raw_entry(&self, m: &mut Meta, slot: usize, j: usize) -> (u64, Option<u64>) {
        let d = &m.cache.slot(slot).data;
        let w = self.hdr.l2_entry_bytes() as usize;
        let e = u64::from_be_bytes(d[j * w..j * w + 8].try_into().expect("8 bytes"));
        let bm = (w == 16)
            .then(|| u64::from_be_bytes(d[j * w + 8..j * w + 16].try_into().expect("8 bytes")));
        (e, bm)
    }

    /// What the cluster holding guest offset `guest` is, checked.
    pub(crate) fn map(&self, m: &mut Meta, guest: u64) -> Result<(Cluster, Option<u64>)> {
        let (i, j) = self.indices(guest);
        if i >= m.l1.len() {
            return Ok((Cluster::Unallocated, None));
        }
        let Some((slot, l1e)) = self.l2_slot(m, i)? else {
            return Ok((Cluster::Unallocated, self.hdr.extended_l2().then_some(0)));
        };
        let (raw, bm) = self.raw_entry(m, slot, j);
        let from = || {
            format!(
                "L2 entry {j} of the table at {} (L1 entry {i})",
                l1e.l2_offset
            )
        };
        let c = Cluster::decode(raw, self.hdr.cluster_bits, self.hdr.extended_l2()).map_err(
            |limit| Qcow2Error::Offset {
                image: self.name.clone(),
                what: "L2 entry",
                offset: l1e.l2_offset + j as u64 * self.hdr.l2_entry_bytes(),
                from: from(),
                limit,
            },
        )?;
        let limit = self.read_limit(m);
        match c {
            Cluster::Normal { host, .. } | Cluster::Zero { host, .. } if host != 0 => {
                check::cluster_offset(
                    &self.name,
                    "data cluster",
                    from,
                    host,
                    self.cs,
                    self.cs,
                    limit,
                )?;
            }
            Cluster::Compressed { host, sectors } => {
                check::byte_range(&self.name, "compressed data", from, host, 1, limit)?;
                let _ = sectors;
            }
            _ => {}
        }
        Ok((c, bm))
    }

    /// The run of `[guest, guest + len)` (inside one cluster) that reads
    /// from one source, and its length.
    pub(crate) fn source(&self, m: &mut Meta, guest: u64, len: u64) -> Result<(Source, u64)> {
        let (c, bm) = self.map(m, guest)?;
        let at = guest & (self.cs - 1);
        let len = len.min(self.cs - at);
        table::run(c, bm, self.hdr.cluster_bits, at, len).map_err(|limit| Qcow2Error::Offset {
            image: self.name.clone(),
            what: "L2 entry",
            offset: guest,
            from: format!("the entry of guest offset {guest}"),
            limit,
        })
    }

    /// Decompress the cluster whose compressed data is at `host`.
    pub(crate) fn decompress(
        &self,
        m: &Meta,
        guest: u64,
        host: u64,
        sectors: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let start = host & !511;
        let len = (sectors * 512 - (host - start)).min(self.cs * 2);
        let limit = self.read_limit(m);
        let len = len.min(limit.saturating_sub(host));
        let mut buf = vec![0u8; len as usize];
        self.pread("read of a compressed cluster", host, &mut buf)?;
        crate::compress::decompress(self.hdr.compression, &buf, out).map_err(|why| {
            Qcow2Error::Compressed {
                image: self.name.clone(),
                guest_offset: guest & !(self.cs - 1),
                offset: host,
                len,
                why,
            }
        })
    }

    /// Read guest `[guest, guest + buf.len())` synchronously, through the
    /// backing chain.
    pub fn read(&self, guest: u64, buf: &mut [u8]) -> Result<()> {
        let mut m = self.lock();
        self.read_guest(&mut m, guest, buf)
    }

    /// As [`Image::read`], with the metadata already locked.
    pub(crate) fn read_guest(&self, m: &mut Meta, guest: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0u64;
        let total = buf.len() as u64;
        while done < total {
            let off = guest + done;
            if off >= self.hdr.size {
                buf[done as usize..].fill(0);
                break;
            }
            let (src, n) = self.source(m, off, (total - done).min(self.hdr.size - off))?;
            let out = &mut buf[done as usize..(done + n) as usize];
            match src {
                Source::Zero => out.fill(0),
                Source::Backing => match &self.backing {
                    Some(b) => b.read(off, out)?,
                    None => out.fill(0),
                },
                Source::Data(host) => self.pread("read of data", host, out)?,
                Source::Compressed { host, sectors } => {
                    let mut c = vec![0u8; self.cs as usize];
                    self.decompress(m, off, host, sectors, &mut c)?;
                    let at = (off & (self.cs - 1)) as usize;
                    out.copy_from_slice(&c[at..at + n as usize]);
                }
            }
            done += n;
        }
        Ok(())
    }
}

/// Open `path` as a backing file of format `format` (`raw`, `qcow2`;
/// probed from its first bytes if `None`), read-only. `chain`: the
/// images above it.
fn open_backing(
    path: &Path,
    format: Option<&str>,
    opts: &OpenOptions,
    chain: &mut Vec<PathBuf>,
) -> Result<Backing> {
    let format = match format {
        Some(f) => f.to_string(),
        None => crate::backing::probe(path)?.to_string(),
    };
    match format.as_str() {
        "qcow2" => {
            let o = OpenOptions {
                writable: false,
                backing: None,
                ..opts.clone()
            };
            Ok(Backing::Qcow2(Image::open(path, &o, chain)?))
        }
        "raw" => Backing::open_raw(path, chain),
        other => Err(Qcow2Error::Unsupported {
            image: path.display().to_string().into(),
            what: format!("backing file format `{other}` is not supported (raw or qcow2)"),
        }),
    }
}

impl Layer for Image {
    fn name(&self) -> &str {
        &self.f.name
    }
    fn read(&self, guest: u64, buf: &mut [u8]) -> Result<()> {
        Image::read(self, guest, buf)
    }
    fn extents(&self, offset: u64, len: u64, out: &mut Vec<Extent>) -> Result<()> {
        Image::extents(self, offset, len, out)
    }
    fn backing(&self) -> Option<&Backing> {
        self.backing.as_ref()
    }
    fn device(&self) -> &Device {
        &self.data_dev
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        if std::env::var("MQBLK_QCOW2_STATS").is_ok_and(|v| v == "1") {
            let (hits, misses, mem, cap) = self.cache_stats();
            eprintln!(
                "mqblk: {}: L2 cache {mem} of {cap} bytes, {hits} hits, {misses} misses ({:.2}% hits)",
                self.name,
                100.0 * hits as f64 / (hits + misses).max(1) as f64
            );
            let (hits, misses, mem) = self.slice_stats();
            let clones = self
                .mapped
                .clones_sent
                .load(std::sync::atomic::Ordering::Relaxed);
            eprintln!(
                "mqblk: {}: queues' L2 slices {mem} bytes, {hits} requests planned from them without the lock, {misses} under it ({:.2}% without), {clones} clones sent to the file",
                self.name,
                100.0 * hits as f64 / (hits + misses).max(1) as f64
            );
        }
        if !self.writable {
            return;
        }
        let r = (|| {
            let mut m = self.meta.lock().unwrap_or_else(|e| e.into_inner());
            // Twice: the second gives back the frees the first set aside
            // (no I/O is in flight any more).
            self.writeback(&mut m)?;
            self.writeback(&mut m)?;
            if m.incompatible & header::incompat::DIRTY != 0 {
                let v = m.incompatible & !header::incompat::DIRTY;
                self.set_incompatible(&mut m, v)?;
            }
            // Trim the room the file device was given.
            let end = m.file_end;
            self.file
                .set_len(end)
                .map_err(io_err(&self.name, "truncate", end, 0))?;
            self.sync()
        })();
        if let Err(e) = r {
            eprintln!("mqblk: {}: closing: {e}", self.name);
        }
    }
}
