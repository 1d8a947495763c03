//! The vhost-user control plane of the test frontend: connect, SET_OWNER,
//! feature and protocol-feature negotiation, GET_CONFIG, SET_MEM_TABLE,
//! and SET_VRING_NUM/ADDR/BASE/CALL/KICK/ENABLE per queue (rust-vmm's
//! `vhost` frontend endpoint sends the messages). Every reply is waited
//! for at most the socket's read timeout.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VringConfigData};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

use super::blk::{BlkConfig, BLK_FEATURES, CONFIG_BYTES};
use super::error::FrontendError;
use super::memory::GuestMem;
use super::vring::SplitRing;

/// What a connected, negotiated backend offered and what was acked.
pub struct Negotiated {
    /// The virtio features acked.
    pub features: u64,
    /// The protocol features acked.
    pub protocol: VhostUserProtocolFeatures,
    /// The queues the backend has (GET_QUEUE_NUM).
    pub backend_queues: u64,
    /// Its config space.
    pub config: BlkConfig,
}

/// The open control connection.
pub struct Control {
    socket: PathBuf,
    fe: Frontend,
}

impl Control {
    fn err(&self, step: impl Into<String>) -> impl FnOnce(vhost::Error) -> FrontendError + '_ {
        let step = step.into();
        move |source| FrontendError::Vhost {
            socket: self.socket.clone(),
            step,
            source,
        }
    }

    /// Connect to `socket`; every reply is waited for at most `reply_max`.
    pub fn connect(
        socket: &Path,
        num_queues: u16,
        reply_max: Duration,
    ) -> Result<Control, FrontendError> {
        let conn_err = |source| FrontendError::Connect {
            socket: socket.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(socket).map_err(conn_err)?;
        stream.set_read_timeout(Some(reply_max)).map_err(conn_err)?;
        stream
            .set_write_timeout(Some(reply_max))
            .map_err(conn_err)?;
        Ok(Control {
            socket: socket.to_path_buf(),
            fe: Frontend::from_stream(stream, u64::from(num_queues)),
        })
    }

    /// SET_OWNER, then negotiate: VERSION_1 and PROTOCOL_FEATURES (which
    /// must be offered), the blk features offered, EVENT_IDX and
    /// INDIRECT_DESC when asked and offered; protocol features CONFIG, MQ
    /// and REPLY_ACK as offered (CONFIG is needed). Then GET_QUEUE_NUM and
    /// GET_CONFIG.
    pub fn negotiate(
        &mut self,
        event_idx: bool,
        indirect: bool,
    ) -> Result<Negotiated, FrontendError> {
        self.fe.set_owner().map_err(self.err("SET_OWNER"))?;
        let offered = self.fe.get_features().map_err(self.err("GET_FEATURES"))?;
        let protocol_bit = VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
        let version_1 = 1u64 << VIRTIO_F_VERSION_1;
        for (bit, name) in [
            (version_1, "VERSION_1"),
            (protocol_bit, "PROTOCOL_FEATURES"),
        ] {
            if offered & bit == 0 {
                return Err(FrontendError::Backend {
                    socket: self.socket.clone(),
                    what: format!("does not offer {name} (features {offered:#x})"),
                });
            }
        }
        let mut want = version_1 | protocol_bit;
        for &b in BLK_FEATURES {
            want |= 1u64 << b;
        }
        if event_idx {
            want |= 1u64 << VIRTIO_RING_F_EVENT_IDX;
        }
        if indirect {
            want |= 1u64 << VIRTIO_RING_F_INDIRECT_DESC;
        }
        let features = offered & want;

        let pf_offered = self
            .fe
            .get_protocol_features()
            .map_err(self.err("GET_PROTOCOL_FEATURES"))?;
        if !pf_offered.contains(VhostUserProtocolFeatures::CONFIG) {
            return Err(FrontendError::Backend {
                socket: self.socket.clone(),
                what: format!("does not offer the CONFIG protocol feature ({pf_offered:?})"),
            });
        }
        let protocol = pf_offered
            & (VhostUserProtocolFeatures::CONFIG
                | VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::REPLY_ACK);
        self.fe
            .set_protocol_features(protocol)
            .map_err(self.err("SET_PROTOCOL_FEATURES"))?;
        if protocol.contains(VhostUserProtocolFeatures::REPLY_ACK) {
            // Every message that has no reply of its own is acked, so a
            // refusal is seen where it happens.
            self.fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }
        let backend_queues = if protocol.contains(VhostUserProtocolFeatures::MQ) {
            self.fe.get_queue_num().map_err(self.err("GET_QUEUE_NUM"))?
        } else {
            1
        };
        let (_, payload) = self
            .fe
            .get_config(
                0,
                CONFIG_BYTES,
                VhostUserConfigFlags::empty(),
                &[0u8; CONFIG_BYTES as usize],
            )
            .map_err(self.err("GET_CONFIG"))?;
        let config = BlkConfig::parse(&payload).ok_or_else(|| FrontendError::Backend {
            socket: self.socket.clone(),
            what: format!("answered GET_CONFIG with {} bytes", payload.len()),
        })?;
        self.fe
            .set_features(features)
            .map_err(self.err("SET_FEATURES"))?;
        Ok(Negotiated {
            features,
            protocol,
            backend_queues,
            config,
        })
    }

    /// SET_MEM_TABLE with both regions.
    pub fn set_mem_table(&mut self, mem: &GuestMem) -> Result<(), FrontendError> {
        let regions = mem.regions()?;
        self.fe
            .set_mem_table(&regions)
            .map_err(self.err("SET_MEM_TABLE"))?;
        Ok(())
    }

    /// SET_VRING_NUM/ADDR/BASE/CALL/KICK/ENABLE for `ring`.
    pub fn set_up_ring(&mut self, mem: &GuestMem, ring: &SplitRing) -> Result<(), FrontendError> {
        let q = usize::from(ring.index);
        let (desc, avail, used) = ring.addrs();
        let addrs = VringConfigData {
            queue_max_size: ring.size,
            queue_size: ring.size,
            flags: 0,
            desc_table_addr: mem.user_addr(desc)?,
            used_ring_addr: mem.user_addr(used)?,
            avail_ring_addr: mem.user_addr(avail)?,
            log_addr: None,
        };
        self.fe
            .set_vring_num(q, ring.size)
            .map_err(self.err(format!("SET_VRING_NUM {q}")))?;
        self.fe
            .set_vring_addr(q, &addrs)
            .map_err(self.err(format!("SET_VRING_ADDR {q}")))?;
        self.fe
            .set_vring_base(q, 0)
            .map_err(self.err(format!("SET_VRING_BASE {q}")))?;
        self.fe
            .set_vring_call(q, &ring.call)
            .map_err(self.err(format!("SET_VRING_CALL {q}")))?;
        self.fe
            .set_vring_kick(q, &ring.kick)
            .map_err(self.err(format!("SET_VRING_KICK {q}")))?;
        self.fe
            .set_vring_enable(q, true)
            .map_err(self.err(format!("SET_VRING_ENABLE {q}")))?;
        Ok(())
    }

    /// GET_VRING_BASE: stops queue `q` and answers its next avail index.
    pub fn stop_ring(&mut self, q: u16) -> Result<u32, FrontendError> {
        self.fe
            .get_vring_base(usize::from(q))
            .map_err(self.err(format!("GET_VRING_BASE {q}")))
    }
}
