//! L1 and L2 entries, standard (64-bit) and extended (128-bit, with
//! subcluster bitmaps): decoding into what a guest range reads as, and
//! encoding what a write puts there. Pure: no I/O.

/// Bits 9..=55 of an L1 or standard L2 entry: a cluster-aligned offset.
pub const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
/// Bit 63: the cluster's refcount is exactly 1 (it may be written in place).
pub const COPIED: u64 = 1 << 63;
/// Bit 62 of an L2 entry: the cluster is compressed.
pub const COMPRESSED: u64 = 1 << 62;
/// Bit 0 of a standard L2 entry (version 3): the cluster reads as zeros.
pub const ZERO: u64 = 1;
/// Subclusters per cluster with extended L2 entries.
pub const SUBCLUSTERS: u32 = 32;

/// Reserved bits of an L1 entry.
const L1_RESERVED: u64 = 0x7f00_0000_0000_01ff;
/// Reserved bits of a standard, uncompressed L2 entry (bit 0 aside).
const L2_RESERVED: u64 = 0x3f00_0000_0000_01fe;

/// What one L1 entry says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L1Entry {
    /// File offset of the L2 table; 0 if the table is not allocated.
    pub l2_offset: u64,
    /// Refcount exactly 1: the table may be updated in place.
    pub copied: bool,
}

impl L1Entry {
    /// Decode a raw entry; `Err` names the reserved bits set.
    pub fn decode(raw: u64) -> Result<L1Entry, String> {
        if raw & L1_RESERVED != 0 {
            return Err(format!("reserved bits {:#x} are set", raw & L1_RESERVED));
        }
        Ok(L1Entry {
            l2_offset: raw & OFFSET_MASK,
            copied: raw & COPIED != 0,
        })
    }

    /// Encode.
    pub fn encode(self) -> u64 {
        self.l2_offset | if self.copied { COPIED } else { 0 }
    }
}

/// What one L2 entry says about its cluster (the first 64 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// Not allocated: the backing file, or zeros without one.
    Unallocated,
    /// Reads as zeros; `host` is kept allocated if non-zero.
    Zero {
        /// A preallocated cluster, or 0.
        host: u64,
        /// Refcount exactly 1.
        copied: bool,
    },
    /// Data at `host`.
    Normal {
        /// File offset.
        host: u64,
        /// Refcount exactly 1.
        copied: bool,
    },
    /// Compressed data of `len` bytes (whole 512-byte sectors, less the
    /// offset into the first one) at `host`.
    Compressed {
        /// File offset of the compressed bytes.
        host: u64,
        /// Sectors holding them.
        sectors: u64,
    },
}

/// The shape of compressed L2 entries for one cluster size.
#[derive(Clone, Copy, Debug)]
pub struct CompressedLayout {
    shift: u32,
    size_mask: u64,
}

impl CompressedLayout {
    /// For clusters of `1 << cluster_bits` bytes.
    pub fn new(cluster_bits: u32) -> Self {
        let size_bits = cluster_bits - 8;
        CompressedLayout {
            shift: 62 - size_bits,
            size_mask: (1 << size_bits) - 1,
        }
    }

    /// Offset and sector count of a compressed entry.
    pub fn decode(self, raw: u64) -> (u64, u64) {
        let host = raw & ((1 << self.shift) - 1);
        let sectors = ((raw >> self.shift) & self.size_mask) + 1;
        (host, sectors)
    }

    /// A compressed entry (for tests and tools).
    pub fn encode(self, host: u64, sectors: u64) -> u64 {
        COMPRESSED | ((sectors - 1) << self.shift) | host
    }
}

impl Cluster {
    /// Decode the first 64 bits of an L2 entry. `extended`: the image has
    /// 128-bit entries (bit 0 is then reserved). `Err` says what is wrong.
    pub fn decode(raw: u64, cluster_bits: u32, extended: bool) -> Result<Cluster, String> {
        if raw & COMPRESSED != 0 {
            if raw & COPIED != 0 {
                return Err("a compressed entry has the COPIED bit set".into());
            }
            let (host, sectors) = CompressedLayout::new(cluster_bits).decode(raw);
            return Ok(Cluster::Compressed { host, sectors });
        }
        let reserved = L2_RESERVED | if extended { ZERO } else { 0 };
        if raw & reserved != 0 {
            return Err(format!("reserved bits {:#x} are set", raw & reserved));
        }
        let host = raw & OFFSET_MASK;
        let copied = raw & COPIED != 0;
        if host & ((1 << cluster_bits) - 1) != 0 {
            return Err(format!(
                "data offset {host:#x} is not aligned to the {}-byte cluster",
                1u64 << cluster_bits
            ));
        }
        if raw & ZERO != 0 {
            return Ok(Cluster::Zero { host, copied });
        }
        if host == 0 {
            if copied {
                return Err("an unallocated entry has the COPIED bit set".into());
            }
            return Ok(Cluster::Unallocated);
        }
        Ok(Cluster::Normal { host, copied })
    }

    /// Encode (standard entries; an extended entry adds its bitmap).
    pub fn encode(self) -> u64 {
        let c = |copied: bool| if copied { COPIED } else { 0 };
        match self {
            Cluster::Unallocated => 0,
            Cluster::Zero { host, copied } => host | ZERO | c(copied),
            Cluster::Normal { host, copied } => host | c(copied),
            Cluster::Compressed { .. } => {
                unreachable!("this driver never writes compressed clusters")
            }
        }
    }

    /// The host cluster this entry holds allocated (not compressed), if any.
    pub fn host(self) -> Option<u64> {
        match self {
            Cluster::Zero { host, .. } | Cluster::Normal { host, .. } if host != 0 => Some(host),
            _ => None,
        }
    }
}

/// What a run of a guest cluster reads as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The backing file (or zeros without one).
    Backing,
    /// Zeros.
    Zero,
    /// File data at this offset.
    Data(u64),
    /// The compressed cluster (the whole cluster decompressed).
    Compressed {
        /// File offset.
        host: u64,
        /// Sectors.
        sectors: u64,
    },
}

/// The run of `[at, at + len)` within one cluster (offsets inside the
/// cluster) that reads from one source: the source, and how many bytes of
/// the range it covers from `at`. `bitmap` is the extended entry's second
/// word (ignored for standard entries).
pub fn run(
    cluster: Cluster,
    bitmap: Option<u64>,
    cluster_bits: u32,
    at: u64,
    len: u64,
) -> Result<(Source, u64), String> {
    let Some(bitmap) = bitmap else {
        let src = match cluster {
            Cluster::Unallocated => Source::Backing,
            Cluster::Zero { .. } => Source::Zero,
            Cluster::Normal { host, .. } => Source::Data(host + at),
            Cluster::Compressed { host, sectors } => Source::Compressed { host, sectors },
        };
        return Ok((src, len));
    };
    if let Cluster::Compressed { host, sectors } = cluster {
        return Ok((Source::Compressed { host, sectors }, len));
    }
    let alloc = bitmap as u32;
    let zero = (bitmap >> 32) as u32;
    if alloc & zero != 0 {
        return Err(format!(
            "subclusters {:#x} are both allocated and zero",
            alloc & zero
        ));
    }
    let host = match cluster {
        Cluster::Normal { host, .. } => host,
        Cluster::Unallocated if alloc == 0 => 0,
        Cluster::Unallocated => {
            return Err(format!(
                "an unallocated cluster has allocated subclusters {alloc:#x}"
            ))
        }
        _ => return Err("bit 0 is reserved in extended L2 entries".into()),
    };
    let sc_bits = cluster_bits - 5;
    let sc_size = 1u64 << sc_bits;
    let kind = |i: u64| -> Source {
        let bit = 1u32 << i;
        if alloc & bit != 0 {
            Source::Data(host)
        } else if zero & bit != 0 {
            Source::Zero
        } else {
            Source::Backing
        }
    };
    let first = at >> sc_bits;
    let k = kind(first);
    let mut end = (first + 1) << sc_bits;
    while end < at + len && kind(end >> sc_bits) == k {
        end += sc_size;
    }
    let n = end.min(at + len) - at;
    let src = match k {
        Source::Data(h) => Source::Data(h + at),
        other => other,
    };
    Ok((src, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l1_entries_round_trip_and_reserved_bits_are_refused() {
        let e = L1Entry {
            l2_offset: 0x30000,
            copied: true,
        };
        assert_eq!(L1Entry::decode(e.encode()), Ok(e));
        assert!(L1Entry::decode(0x30000 | 1).is_err());
    }

    #[test]
    fn standard_l2_entries_decode() {
        assert_eq!(Cluster::decode(0, 16, false), Ok(Cluster::Unallocated));
        assert_eq!(
            Cluster::decode(COPIED | 0x50000, 16, false),
            Ok(Cluster::Normal {
                host: 0x50000,
                copied: true
            })
        );
        assert_eq!(
            Cluster::decode(1, 16, false),
            Ok(Cluster::Zero {
                host: 0,
                copied: false
            })
        );
        // Misaligned data offset.
        assert!(Cluster::decode(0x50200, 16, false).is_err());
        // Bit 0 is reserved with extended entries.
        assert!(Cluster::decode(1, 16, true).is_err());
    }

    #[test]
    fn compressed_entries_round_trip() {
        for bits in [9, 12, 16, 21] {
            let l = CompressedLayout::new(bits);
            // A 512-byte cluster compresses into at most 2 sectors.
            let sectors = if bits == 9 { 2 } else { 3 };
            let raw = l.encode(0x12345, sectors);
            assert_eq!(
                Cluster::decode(raw, bits, false),
                Ok(Cluster::Compressed {
                    host: 0x12345,
                    sectors
                })
            );
        }
    }

    #[test]
    fn subcluster_runs_follow_the_bitmap() {
        // 64 KiB clusters: 2 KiB subclusters. 0 and 1 allocated, 2 zero,
        // the rest from the backing file.
        let bitmap = 0b11u64 | (0b100u64 << 32);
        let c = Cluster::Normal {
            host: 0x70000,
            copied: true,
        };
        assert_eq!(
            run(c, Some(bitmap), 16, 512, 65536 - 512),
            Ok((Source::Data(0x70200), 4096 - 512))
        );
        assert_eq!(
            run(c, Some(bitmap), 16, 4096, 60000),
            Ok((Source::Zero, 2048))
        );
        assert_eq!(
            run(c, Some(bitmap), 16, 6144, 65536 - 6144),
            Ok((Source::Backing, 65536 - 6144))
        );
        assert!(run(c, Some(1 | (1 << 32)), 16, 0, 512).is_err());
    }
}
