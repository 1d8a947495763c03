//! An export: a device under a name, and what the server advertises for
//! it (size, transmission flags, `INFO_BLOCK_SIZE` from the device's
//! limits).

use mqblk_core::Device;
use mqblk_nbd_proto::consts::{transmission_flags as tf, DEFAULT_MAX_PAYLOAD};
use mqblk_nbd_proto::{BlockSize, ExportInfo};

/// One exported device.
#[derive(Clone, Debug)]
pub struct Export {
    /// Export name.
    pub name: String,
    /// Description shown by `nbdinfo` and `OPT_LIST`.
    pub description: String,
    /// The device.
    pub device: Device,
    /// Refuse writes (the device may also be read-only by itself).
    pub read_only: bool,
    /// Advertise `CAN_MULTI_CONN`: writes through one connection are
    /// visible through every other when replied to, and a flush on one
    /// covers all. True for devices whose data lives in one place every
    /// context reaches (ram, null, file); false for a device whose
    /// contexts could see different caches.
    pub multi_conn: bool,
}

impl Export {
    /// An export of `device` named `name`, writable unless the device is
    /// read-only, with `CAN_MULTI_CONN`.
    pub fn new(name: impl Into<String>, device: Device) -> Export {
        let description = format!("mqblk device {}", device.name());
        Export {
            name: name.into(),
            description,
            device,
            read_only: false,
            multi_conn: true,
        }
    }

    /// True if writes are refused.
    pub fn is_read_only(&self) -> bool {
        self.read_only || self.device.info().features.read_only
    }
}

/// Size constraints from the device's limits: minimum = logical block
/// size, preferred = max(4096, physical block size), maximum payload =
/// min(32 MiB, max_sectors × 512).
pub fn block_size(dev: &Device) -> BlockSize {
    let l = &dev.info().limits;
    let min = l.logical_block_size.max(512);
    let preferred = l.physical_block_size.max(4096).max(min);
    let max_req = u64::from(l.max_sectors) * 512;
    let max_payload = max_req
        .min(u64::from(DEFAULT_MAX_PAYLOAD))
        .max(u64::from(preferred)) as u32;
    BlockSize {
        min,
        preferred,
        max_payload,
    }
}

/// What clients are told about `e`.
pub fn export_info(e: &Export) -> ExportInfo {
    let f = &e.device.info().features;
    let mut flags = tf::HAS_FLAGS | tf::SEND_FLUSH | tf::SEND_CACHE;
    if e.is_read_only() {
        flags |= tf::READ_ONLY;
    } else {
        // FUA is always honoured: natively, or by the core's flush after
        // the write on a device without FUA.
        flags |= tf::SEND_FUA;
        if f.discard {
            flags |= tf::SEND_TRIM;
        }
        if f.write_zeroes {
            flags |= tf::SEND_WRITE_ZEROES | tf::SEND_FAST_ZERO;
        }
    }
    if f.rotational {
        flags |= tf::ROTATIONAL;
    }
    if e.multi_conn {
        flags |= tf::CAN_MULTI_CONN;
    }
    ExportInfo {
        name: e.name.clone(),
        description: e.description.clone(),
        size: e.device.capacity_bytes(),
        flags,
        block_size: block_size(&e.device),
    }
}
