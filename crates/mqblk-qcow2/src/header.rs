//! The image header (QEMU `docs/interop/qcow2.txt`, "Header" and "Header
//! extensions"): parsed from the first cluster, every field checked against
//! the format's limits before anything uses it. Pure: no I/O.

use std::sync::Arc;

use crate::error::{Qcow2Error, Result};

/// `QFI\xfb`.
pub const MAGIC: u32 = 0x5146_49fb;
/// Smallest cluster (512 B) and largest (2 MiB), as log2.
pub const MIN_CLUSTER_BITS: u32 = 9;
/// Largest cluster, as log2.
pub const MAX_CLUSTER_BITS: u32 = 21;
/// QEMU's largest L1 table, in bytes (`QCOW_MAX_L1_SIZE`).
pub const MAX_L1_BYTES: u64 = 32 << 20;
/// QEMU's largest refcount table, in bytes (`QCOW_MAX_REFTABLE_SIZE`).
pub const MAX_REFTABLE_BYTES: u64 = 8 << 20;
/// Most internal snapshots (`QCOW_MAX_SNAPSHOTS`).
pub const MAX_SNAPSHOTS: u32 = 65536;
/// Longest backing file name (`1023`, as QEMU).
pub const MAX_BACKING_NAME: u32 = 1023;

/// Incompatible feature bits.
pub mod incompat {
    /// The refcounts may be wrong (lazy refcounts in use).
    pub const DIRTY: u64 = 1 << 0;
    /// QEMU found corruption.
    pub const CORRUPT: u64 = 1 << 1;
    /// Guest data lives in another file.
    pub const DATA_FILE: u64 = 1 << 2;
    /// The compression type byte is valid.
    pub const COMPRESSION: u64 = 1 << 3;
    /// L2 entries are 128 bits, with subcluster bitmaps.
    pub const EXTL2: u64 = 1 << 4;
    /// Every bit this driver knows.
    pub const KNOWN: u64 = DIRTY | CORRUPT | DATA_FILE | COMPRESSION | EXTL2;
}

/// Compatible feature bit: lazy refcounts.
pub const COMPAT_LAZY_REFCOUNTS: u64 = 1;

/// Header extension types.
const EXT_END: u32 = 0;
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;

/// Byte offsets of the fields written after creation.
pub mod field {
    /// `refcount_table_offset` (u64).
    pub const REFCOUNT_TABLE_OFFSET: u64 = 48;
    /// `refcount_table_clusters` (u32).
    pub const REFCOUNT_TABLE_CLUSTERS: u64 = 56;
    /// `incompatible_features` (u64, version 3).
    pub const INCOMPATIBLE: u64 = 72;
    /// `autoclear_features` (u64, version 3).
    pub const AUTOCLEAR: u64 = 88;
    /// `l1_size` (u32) then `l1_table_offset` (u64).
    pub const L1_SIZE: u64 = 36;
}

/// How compressed clusters are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Raw deflate (zlib without its header), 4 KiB window: QEMU's default.
    Deflate,
    /// Zstandard frames.
    Zstd,
}

/// A parsed and checked header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// 2 or 3.
    pub version: u32,
    /// log2 of the cluster size.
    pub cluster_bits: u32,
    /// Guest size in bytes.
    pub size: u64,
    /// L1 entries.
    pub l1_size: u32,
    /// File offset of the L1 table.
    pub l1_table_offset: u64,
    /// File offset of the refcount table.
    pub refcount_table_offset: u64,
    /// Clusters of the refcount table.
    pub refcount_table_clusters: u32,
    /// Internal snapshots.
    pub nb_snapshots: u32,
    /// File offset of the snapshot table.
    pub snapshots_offset: u64,
    /// Incompatible feature bits.
    pub incompatible: u64,
    /// Compatible feature bits.
    pub compatible: u64,
    /// Autoclear feature bits.
    pub autoclear: u64,
    /// log2 of the refcount width in bits (0..=6).
    pub refcount_order: u32,
    /// Bytes of the fixed header.
    pub header_length: u32,
    /// Compression of compressed clusters.
    pub compression: Compression,
    /// The backing file's name, if any.
    pub backing_file: Option<String>,
    /// The backing file's format from the header extension (`raw`, `qcow2`).
    pub backing_format: Option<String>,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// Cluster size in bytes.
    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// True if L2 entries are 128 bits (subclusters).
    pub fn extended_l2(&self) -> bool {
        self.incompatible & incompat::EXTL2 != 0
    }

    /// Bytes of one L2 entry.
    pub fn l2_entry_bytes(&self) -> u64 {
        if self.extended_l2() {
            16
        } else {
            8
        }
    }

    /// Entries in one L2 table.
    pub fn l2_entries(&self) -> u64 {
        self.cluster_size() / self.l2_entry_bytes()
    }

    /// Refcount width in bits.
    pub fn refcount_bits(&self) -> u32 {
        1 << self.refcount_order
    }

    /// L1 entries needed to map `size` bytes with these clusters.
    pub fn l1_needed(cluster_bits: u32, l2_entry_bytes: u64, size: u64) -> u64 {
        let per_l2 = ((1u64 << cluster_bits) / l2_entry_bytes) << cluster_bits;
        size.div_ceil(per_l2)
    }

    /// Parse and check the header in `b` (at least the first cluster of
    /// the file, or the whole file if shorter). `image` names the file in
    /// errors; `file_len` bounds every offset.
    pub fn parse(image: &Arc<str>, b: &[u8], file_len: u64) -> Result<Header> {
        let bad =
            |field: &'static str, offset: u64, value: u64, limit: String| Qcow2Error::Header {
                image: image.clone(),
                field,
                offset,
                value,
                limit,
            };
        if b.len() < 72 {
            return Err(bad(
                "length",
                0,
                b.len() as u64,
                "a qcow2 header has at least 72 bytes".into(),
            ));
        }
        let magic = be32(b, 0);
        if magic != MAGIC {
            return Err(bad(
                "magic",
                0,
                u64::from(magic),
                format!("expected {MAGIC:#x} (QFI\\xfb): not a qcow2 image"),
            ));
        }
        let version = be32(b, 4);
        if version != 2 && version != 3 {
            return Err(bad(
                "version",
                4,
                u64::from(version),
                "this driver reads versions 2 and 3".into(),
            ));
        }
        let cluster_bits = be32(b, 20);
        if !(MIN_CLUSTER_BITS..=MAX_CLUSTER_BITS).contains(&cluster_bits) {
            return Err(bad(
                "cluster_bits",
                20,
                u64::from(cluster_bits),
                format!(
                    "must be {MIN_CLUSTER_BITS} to {MAX_CLUSTER_BITS} (512 B to 2 MiB clusters)"
                ),
            ));
        }
        let cs = 1u64 << cluster_bits;
        if (b.len() as u64) < cs.min(file_len) {
            return Err(bad(
                "length",
                0,
                b.len() as u64,
                format!("the header cluster needs {} bytes", cs.min(file_len)),
            ));
        }
        let crypt = be32(b, 32);
        if crypt != 0 {
            return Err(bad(
                "crypt_method",
                32,
                u64::from(crypt),
                "encrypted images are not supported (0 only)".into(),
            ));
        }
        let mut h = Header {
            version,
            cluster_bits,
            size: be64(b, 24),
            l1_size: be32(b, 36),
            l1_table_offset: be64(b, 40),
            refcount_table_offset: be64(b, 48),
            refcount_table_clusters: be32(b, 56),
            nb_snapshots: be32(b, 60),
            snapshots_offset: be64(b, 64),
            incompatible: 0,
            compatible: 0,
            autoclear: 0,
            refcount_order: 4,
            header_length: 72,
            compression: Compression::Deflate,
            backing_file: None,
            backing_format: None,
        };
        if version == 3 {
            if b.len() < 104 {
                return Err(bad(
                    "length",
                    0,
                    b.len() as u64,
                    "a version 3 header has at least 104 bytes".into(),
                ));
            }
            h.incompatible = be64(b, 72);
            h.compatible = be64(b, 80);
            h.autoclear = be64(b, 88);
            h.refcount_order = be32(b, 96);
            h.header_length = be32(b, 100);
            if h.header_length < 104 || u64::from(h.header_length) > cs.min(b.len() as u64) {
                return Err(bad(
                    "header_length",
                    100,
                    u64::from(h.header_length),
                    format!(
                        "must be 104 to {} (the first cluster)",
                        cs.min(b.len() as u64)
                    ),
                ));
            }
            let unknown = h.incompatible & !incompat::KNOWN;
            if unknown != 0 {
                return Err(bad(
                    "incompatible_features",
                    72,
                    h.incompatible,
                    format!("unknown bits {unknown:#x}: this image needs a newer reader"),
                ));
            }
            if h.incompatible & incompat::DATA_FILE != 0 {
                return Err(Qcow2Error::Unsupported {
                    image: image.clone(),
                    what: "an external data file (incompatible bit 2) is not supported".into(),
                });
            }
            if h.incompatible & incompat::COMPRESSION != 0 {
                if h.header_length < 105 {
                    return Err(bad(
                        "header_length",
                        100,
                        u64::from(h.header_length),
                        "the compression type bit is set but the header has no compression_type byte (needs 105 or more)".into(),
                    ));
                }
                h.compression = match b[104] {
                    0 => Compression::Deflate,
                    1 => Compression::Zstd,
                    t => {
                        return Err(bad(
                            "compression_type",
                            104,
                            u64::from(t),
                            "must be 0 (deflate) or 1 (zstd)".into(),
                        ))
                    }
                };
            } else if h.header_length >= 105 && b[104] != 0 {
                return Err(bad(
                    "compression_type",
                    104,
                    u64::from(b[104]),
                    "must be 0 unless incompatible bit 3 is set".into(),
                ));
            }
            if h.refcount_order > 6 {
                return Err(bad(
                    "refcount_order",
                    96,
                    u64::from(h.refcount_order),
                    "must be 0 to 6 (1- to 64-bit refcounts)".into(),
                ));
            }
            if h.extended_l2() && cluster_bits < 14 {
                return Err(bad(
                    "cluster_bits",
                    20,
                    u64::from(cluster_bits),
                    "extended L2 entries need clusters of 16 KiB or more".into(),
                ));
            }
        }
        let off = |what: &'static str, offset: u64, limit: String| Qcow2Error::Offset {
            image: image.clone(),
            what,
            offset,
            from: "the header".into(),
            limit,
        };
        // The guest size: the L1 table must be able to map it.
        let max_l1 = MAX_L1_BYTES / 8;
        let needed = Self::l1_needed(cluster_bits, h.l2_entry_bytes(), h.size);
        if needed > max_l1 {
            return Err(bad(
                "size",
                24,
                h.size,
                format!("needs {needed} L1 entries, more than the limit of {max_l1}"),
            ));
        }
        if u64::from(h.l1_size) < needed || u64::from(h.l1_size) > max_l1 {
            return Err(bad(
                "l1_size",
                36,
                u64::from(h.l1_size),
                format!("must be {needed} (to map {} bytes) to {max_l1}", h.size),
            ));
        }
        check_table(h.l1_table_offset, u64::from(h.l1_size) * 8, cs, file_len)
            .map_err(|l| off("L1 table", h.l1_table_offset, l))?;
        if h.refcount_table_clusters == 0
            || u64::from(h.refcount_table_clusters) * cs > MAX_REFTABLE_BYTES.max(cs)
        {
            return Err(bad(
                "refcount_table_clusters",
                56,
                u64::from(h.refcount_table_clusters),
                format!("must be 1 to {}", MAX_REFTABLE_BYTES.max(cs) / cs),
            ));
        }
        if h.refcount_table_offset == 0 {
            return Err(off(
                "refcount table",
                0,
                "is 0: an image always has a refcount table".into(),
            ));
        }
        check_table(
            h.refcount_table_offset,
            u64::from(h.refcount_table_clusters) * cs,
            cs,
            file_len,
        )
        .map_err(|l| off("refcount table", h.refcount_table_offset, l))?;
        if h.nb_snapshots > MAX_SNAPSHOTS {
            return Err(bad(
                "nb_snapshots",
                60,
                u64::from(h.nb_snapshots),
                format!("must be at most {MAX_SNAPSHOTS}"),
            ));
        }
        if h.nb_snapshots > 0 {
            // Each entry has at least 40 bytes.
            check_table(
                h.snapshots_offset,
                u64::from(h.nb_snapshots) * 40,
                cs,
                file_len,
            )
            .map_err(|l| off("snapshot table", h.snapshots_offset, l))?;
        }
        // The backing file name lives in the first cluster.
        let bf_off = be64(b, 8);
        let bf_len = be32(b, 16);
        if bf_off != 0 {
            if bf_len == 0 || bf_len > MAX_BACKING_NAME {
                return Err(bad(
                    "backing_file_size",
                    16,
                    u64::from(bf_len),
                    format!("must be 1 to {MAX_BACKING_NAME}"),
                ));
            }
            let end = bf_off.checked_add(u64::from(bf_len));
            if bf_off < u64::from(h.header_length) || end.is_none_or(|e| e > cs.min(b.len() as u64))
            {
                return Err(bad(
                    "backing_file_offset",
                    8,
                    bf_off,
                    format!(
                        "the name ({bf_len} bytes) must lie after the header ({} bytes) in the first cluster",
                        h.header_length
                    ),
                ));
            }
            let name = &b[bf_off as usize..(bf_off + u64::from(bf_len)) as usize];
            h.backing_file = Some(String::from_utf8_lossy(name).into_owned());
        }
        h.parse_extensions(image, b, cs, bf_off)?;
        Ok(h)
    }

    /// Walk the header extensions after the fixed header, up to the
    /// backing file name or the end of the first cluster.
    fn parse_extensions(&mut self, image: &Arc<str>, b: &[u8], cs: u64, bf_off: u64) -> Result<()> {
        let end = if bf_off != 0 {
            bf_off
        } else {
            cs.min(b.len() as u64)
        };
        let mut at = u64::from(self.header_length);
        while at + 8 <= end {
            let t = be32(b, at as usize);
            let len = u64::from(be32(b, at as usize + 4));
            if t == EXT_END {
                return Ok(());
            }
            let data = at + 8;
            if data + len > end {
                return Err(Qcow2Error::Header {
                    image: image.clone(),
                    field: "header extension length",
                    offset: at + 4,
                    value: len,
                    limit: format!("extension {t:#x} runs past byte {end} of the first cluster"),
                });
            }
            if t == EXT_BACKING_FORMAT {
                let f = &b[data as usize..(data + len) as usize];
                self.backing_format = Some(String::from_utf8_lossy(f).into_owned());
            }
            at = data + len.next_multiple_of(8);
        }
        Ok(())
    }
}

/// Check a table of `len` bytes at `offset`: cluster aligned and inside
/// the file. An empty table may sit at offset 0.
pub fn check_table(
    offset: u64,
    len: u64,
    cs: u64,
    file_len: u64,
) -> std::result::Result<(), String> {
    if len == 0 {
        return Ok(());
    }
    if offset == 0 || !offset.is_multiple_of(cs) {
        return Err(format!(
            "is not a non-zero multiple of the cluster size {cs}"
        ));
    }
    match offset.checked_add(len) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(format!(
            "with {len} bytes runs past the end of the file at {file_len}"
        )),
    }
}

/// A version 3 header for a new image (see [`crate::create`]): the fixed
/// part, a backing format extension when there is a backing file, the
/// end marker, and the backing file name. `out` is the first cluster.
pub fn write_new(h: &Header, out: &mut [u8]) {
    let put32 =
        |out: &mut [u8], at: usize, v: u32| out[at..at + 4].copy_from_slice(&v.to_be_bytes());
    let put64 =
        |out: &mut [u8], at: usize, v: u64| out[at..at + 8].copy_from_slice(&v.to_be_bytes());
    out.fill(0);
    put32(out, 0, MAGIC);
    put32(out, 4, 3);
    put32(out, 20, h.cluster_bits);
    put64(out, 24, h.size);
    put32(out, 36, h.l1_size);
    put64(out, 40, h.l1_table_offset);
    put64(out, 48, h.refcount_table_offset);
    put32(out, 56, h.refcount_table_clusters);
    put64(out, 72, h.incompatible);
    put64(out, 80, h.compatible);
    put64(out, 88, h.autoclear);
    put32(out, 96, h.refcount_order);
    put32(out, 100, 112);
    let mut at = 112usize;
    if let Some(f) = &h.backing_format {
        put32(out, at, EXT_BACKING_FORMAT);
        put32(out, at + 4, f.len() as u32);
        out[at + 8..at + 8 + f.len()].copy_from_slice(f.as_bytes());
        at += 8 + f.len().next_multiple_of(8);
    }
    // End of extensions.
    at += 8;
    if let Some(name) = &h.backing_file {
        put64(out, 8, at as u64);
        put32(out, 16, name.len() as u32);
        out[at..at + name.len()].copy_from_slice(name.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name() -> Arc<str> {
        "t.qcow2".into()
    }

    fn sample() -> Header {
        Header {
            version: 3,
            cluster_bits: 16,
            size: 1 << 30,
            l1_size: 2,
            l1_table_offset: 3 << 16,
            refcount_table_offset: 1 << 16,
            refcount_table_clusters: 1,
            nb_snapshots: 0,
            snapshots_offset: 0,
            incompatible: 0,
            compatible: 0,
            autoclear: 0,
            refcount_order: 4,
            header_length: 112,
            compression: Compression::Deflate,
            backing_file: Some("base.raw".into()),
            backing_format: Some("raw".into()),
        }
    }

    #[test]
    fn a_written_header_parses_back() {
        let h = sample();
        let mut b = vec![0u8; 1 << 16];
        write_new(&h, &mut b);
        let p = Header::parse(&name(), &b, 4 << 16).unwrap();
        assert_eq!(p, h);
    }

    #[test]
    fn bad_fields_are_named() {
        let h = sample();
        let mut b = vec![0u8; 1 << 16];
        write_new(&h, &mut b);
        let cases: &[(usize, &[u8], &str)] = &[
            (0, &[0, 0, 0, 0], "magic"),
            (20, &[0, 0, 0, 30], "cluster_bits"),
            (36, &[0, 0, 0, 1], "l1_size"),
            (40, &[0, 0, 0, 0, 0, 0, 0, 7], "L1 table"),
            (48, &[0, 0, 0, 0, 0, 0x10, 0, 0], "refcount table"),
            (96, &[0, 0, 0, 7], "refcount_order"),
            (72, &[0, 0, 0, 0, 0, 0, 1, 0], "incompatible_features"),
        ];
        for (at, bytes, what) in cases {
            let mut c = b.clone();
            c[*at..*at + bytes.len()].copy_from_slice(bytes);
            let e = Header::parse(&name(), &c, 4 << 16).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("t.qcow2"), "{what}: {e}");
        }
    }

    #[test]
    fn short_input_is_refused() {
        let e = Header::parse(&name(), &[0u8; 10], 10).unwrap_err();
        assert!(e.to_string().contains("72 bytes"), "{e}");
    }
}
