//! Creating an image (`qcow2:PATH,create=SIZE`): version 3, 16-bit
//! refcounts, with a header cluster, a one-cluster refcount table, one
//! refcount block and an empty L1 table, as `qemu-img create` lays it out.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Qcow2Error, Result};
use crate::header::{self, Compression, Header};
use crate::refcount;

/// What to create.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Guest size in bytes (a multiple of 512).
    pub size: u64,
    /// log2 of the cluster size (default 16: 64 KiB).
    pub cluster_bits: u32,
    /// Backing file name as written in the header, and its format.
    pub backing: Option<(String, String)>,
}

/// The image as bytes: header, refcount table, refcount block, L1 table.
pub fn layout(name: &Arc<str>, o: &CreateOptions) -> Result<Vec<u8>> {
    let bad = |field: &'static str, value: u64, limit: String| Qcow2Error::Header {
        image: name.clone(),
        field,
        offset: 0,
        value,
        limit,
    };
    if !(header::MIN_CLUSTER_BITS..=header::MAX_CLUSTER_BITS).contains(&o.cluster_bits) {
        return Err(bad(
            "cluster_size",
            1u64 << o.cluster_bits.min(63),
            "must be 512 B to 2 MiB, a power of two".into(),
        ));
    }
    if o.size == 0 || !o.size.is_multiple_of(512) {
        return Err(bad(
            "size",
            o.size,
            "must be a non-zero multiple of 512".into(),
        ));
    }
    let cs = 1u64 << o.cluster_bits;
    let l1_size = Header::l1_needed(o.cluster_bits, 8, o.size);
    if l1_size * 8 > header::MAX_L1_BYTES {
        return Err(bad(
            "size",
            o.size,
            format!(
                "needs an L1 table of more than {} bytes",
                header::MAX_L1_BYTES
            ),
        ));
    }
    let l1_clusters = (l1_size * 8).div_ceil(cs).max(1);
    let clusters = 3 + l1_clusters;
    let order = 4;
    if clusters > refcount::entries_per_block(o.cluster_bits, order) {
        return Err(bad(
            "size",
            o.size,
            "the L1 table does not fit the first refcount block".into(),
        ));
    }
    if let Some((b, f)) = &o.backing {
        if b.len() > header::MAX_BACKING_NAME as usize || 112 + 16 + f.len() + b.len() > cs as usize
        {
            return Err(bad(
                "backing_file_size",
                b.len() as u64,
                "the backing file name does not fit the header cluster".into(),
            ));
        }
    }
    let h = Header {
        version: 3,
        cluster_bits: o.cluster_bits,
        size: o.size,
        l1_size: l1_size as u32,
        l1_table_offset: 3 * cs,
        refcount_table_offset: cs,
        refcount_table_clusters: 1,
        nb_snapshots: 0,
        snapshots_offset: 0,
        incompatible: 0,
        compatible: 0,
        autoclear: 0,
        refcount_order: order,
        header_length: 112,
        compression: Compression::Deflate,
        backing_file: o.backing.as_ref().map(|(b, _)| b.clone()),
        backing_format: o.backing.as_ref().map(|(_, f)| f.clone()),
    };
    let mut img = vec![0u8; (clusters * cs) as usize];
    header::write_new(&h, &mut img[..cs as usize]);
    img[cs as usize..cs as usize + 8].copy_from_slice(&(2 * cs).to_be_bytes());
    let block = &mut img[2 * cs as usize..3 * cs as usize];
    for c in 0..clusters {
        refcount::set(block, order, c, 1);
    }
    Ok(img)
}

/// Write a new image at `path`, which must not exist or be empty.
pub fn create(path: &Path, o: &CreateOptions) -> Result<()> {
    let name: Arc<str> = path.display().to_string().into();
    let io = |what| {
        let name = name.clone();
        move |source| Qcow2Error::Io {
            image: name,
            what,
            offset: 0,
            len: 0,
            source,
        }
    };
    let bytes = layout(&name, o)?;
    if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        return Err(Qcow2Error::Unsupported {
            image: name,
            what: "create= would overwrite a file that is not empty: remove it first, or open it without create=".into(),
        });
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io("create"))?;
    use std::os::unix::fs::FileExt;
    f.write_all_at(&bytes, 0)
        .map_err(io("write of the new image"))?;
    f.sync_all().map_err(io("fsync of the new image"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_image_parses_and_counts_its_own_clusters() {
        let name: Arc<str> = "new.qcow2".into();
        let o = CreateOptions {
            size: 64 << 20,
            cluster_bits: 12,
            backing: Some(("base.raw".into(), "raw".into())),
        };
        let b = layout(&name, &o).unwrap();
        let h = Header::parse(&name, &b, b.len() as u64).unwrap();
        assert_eq!(h.size, 64 << 20);
        assert_eq!(h.backing_file.as_deref(), Some("base.raw"));
        assert_eq!(h.backing_format.as_deref(), Some("raw"));
        let block = &b[2 * 4096..3 * 4096];
        let n = b.len() as u64 / 4096;
        for c in 0..n {
            assert_eq!(refcount::get(block, 4, c), 1);
        }
        assert_eq!(refcount::get(block, 4, n), 0);
        assert!(layout(
            &name,
            &CreateOptions {
                size: 1000,
                ..o.clone()
            }
        )
        .is_err());
        assert!(layout(
            &name,
            &CreateOptions {
                cluster_bits: 22,
                ..o
            }
        )
        .is_err());
    }
}
