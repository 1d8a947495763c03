//! The device as vhost-user-backend sees it: features, the configuration
//! space, memory tables, and one thread per virtqueue whose events go to
//! that queue's [`Worker`]. A backend lives for one frontend connection.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::message::VhostUserVirtioFeatures;
use vhost_user_backend::VhostUserBackend;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use crate::virtio_blk::Shape;
use crate::virtqueue::{AtomicMemory, Vring, Worker, MAX_QUEUE_SIZE};

/// How long `GET_VRING_BASE` waits for a ring's requests in flight.
pub(crate) const STOP_WAIT: Duration = Duration::from_secs(10);

/// One connection's device: shared by the frontend's thread (control) and
/// the queue threads (data); each queue's state is its own thread's,
/// behind a lock only `GET_VRING_BASE` also takes.
pub(crate) struct BlkBackend {
    shape: Arc<Shape>,
    workers: Vec<Mutex<Worker>>,
    /// The driver turned the write cache off (CONFIG_WCE): writes carry FUA.
    write_through: AtomicBool,
    /// Busy-poll for this long after each batch (`--poll-us`).
    poll: Option<Duration>,
}

impl BlkBackend {
    pub(crate) fn new(
        shape: Arc<Shape>,
        workers: Vec<Worker>,
        poll: Option<Duration>,
    ) -> BlkBackend {
        BlkBackend {
            poll,
            shape,
            workers: workers.into_iter().map(Mutex::new).collect(),
            write_through: AtomicBool::new(false),
        }
    }

    pub(crate) fn worker(&self, q: usize) -> MutexGuard<'_, Worker> {
        self.workers[q].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn queues(&self) -> usize {
        self.workers.len()
    }

    /// The epoll token of queue thread `t`'s completion fd (above the
    /// queues' and the exit event's).
    pub(crate) fn completion_token(&self, t: usize) -> u64 {
        (self.workers.len() + 1 + t) as u64
    }

    fn wce(&self) -> bool {
        self.shape.write_cache && !self.write_through.load(Ordering::Relaxed)
    }
}

impl VhostUserBackend for BlkBackend {
    type Bitmap = ();
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        self.workers.len()
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        self.shape.features() | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::REPLY_ACK
    }

    fn set_event_idx(&self, _enabled: bool) {
        // The queue itself knows (the backend crate sets it on each ring).
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        self.shape.config_range(self.wce(), offset, size)
    }

    fn set_config(&self, offset: u32, buf: &[u8]) -> io::Result<()> {
        match Shape::config_write(offset, buf) {
            Some(wce) if self.shape.write_cache => {
                self.write_through.store(!wce, Ordering::Relaxed);
                Ok(())
            }
            Some(_) => Ok(()),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "virtio-blk config write of {} bytes at {offset}: only wce (1 byte at 32) \
                     is writable",
                    buf.len()
                ),
            )),
        }
    }

    /// Each queue's worker keeps its own handle of the table, so a batch
    /// takes no lock another queue takes.
    fn update_memory(&self, mem: AtomicMemory) -> io::Result<()> {
        for q in 0..self.workers.len() {
            self.worker(q).set_memory(mem.clone());
        }
        Ok(())
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        (0..self.workers.len()).map(|q| 1u64 << q).collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()
    }

    /// `GET_VRING_BASE`: the ring stops taking requests (the backend crate
    /// already unhooked its kick); wait until the requests it took have
    /// completed into the used ring, so the driver may take the ring back.
    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        let q = queue_index as usize;
        if q >= self.workers.len() {
            return Ok(());
        }
        let deadline = Instant::now() + STOP_WAIT;
        loop {
            let mut w = self.worker(q);
            let left = w.in_flight();
            if left == 0 {
                w.ring_stopped();
                return Ok(());
            }
            drop(w);
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "queue {q}: {left} requests still in flight {STOP_WAIT:?} after \
                         GET_VRING_BASE"
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        thread_id: usize,
    ) -> io::Result<()> {
        if !evset.contains(EventSet::IN) {
            return Ok(());
        }
        let Some(vring) = vrings.first() else {
            return Ok(());
        };
        let mut w = self.worker(thread_id);
        if u64::from(device_event) == self.completion_token(thread_id) {
            w.complete(vring);
        } else {
            w.run(vring, !self.wce() && self.shape.write_cache, self.poll);
        }
        // Errors of the driver's making end in its ring, never here: an
        // error returned to the backend crate would end this thread.
        Ok(())
    }
}
