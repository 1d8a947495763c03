//! The I/O scheduler of a hardware queue (Linux's elevator,
//! `struct elevator_mq_ops`).
//!
//! Fourth stage: `software queue → scheduler → hardware queue`. Without an
//! elevator (`none`, what fast devices use in Linux) a hardware queue's
//! dispatch takes requests straight from the software queue, in the order
//! they were queued. With one, dispatch moves the software queue's requests
//! into the elevator (`insert`) and asks it which to issue next
//! (`dispatch`); a request the driver refuses goes back to it (`requeue`),
//! and it hears of every completion (`completed`). Each hardware queue has
//! its own elevator, called under that queue's lock only, so an elevator
//! needs no lock of its own.
//!
//! Scheduler tags: with an elevator, a device's tag sets hold
//! [`ElevatorType::nr_requests`] requests (Linux `nr_requests`, the
//! scheduler tags), while the driver is handed at most `queue_depth` at once
//! (the driver tags, enforced as the hardware queue's budget). Requests
//! waiting in the elevator hold scheduler tags only.

mod bfq;
mod elevator;
mod kyber;
mod mq_deadline;

pub use bfq::{BfqParams, BfqType};
pub(crate) use elevator::DispatchSource;
pub use elevator::{Elevator, ElevatorType};
pub use kyber::{KyberParams, KyberType};
pub use mq_deadline::{DeadlineParams, MqDeadlineType};
