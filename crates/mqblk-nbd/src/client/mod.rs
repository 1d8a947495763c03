//! The NBD client device kind: `nbd://host:port/export` and
//! `nbd+unix:///export?socket=PATH`, with `conns=N` connections used as N
//! hardware queues, and `reconnect_ms=N` to get a dropped connection back
//! (see `reconnect.rs`).
//!
//! [`open`] connects and negotiates every connection first (control
//! plane), then builds the device: the size, the queue limits (from
//! `INFO_BLOCK_SIZE`) and the features (from the transmission flags) are
//! known before the core sees the driver.

// By call order, from the top down: each file uses only files below it.
mod driver;

mod reconnect;

mod receive;
mod send;

mod handshake;
mod irq;
mod queue;

pub mod url;

use std::sync::atomic::{AtomicU32, Ordering};

use mqblk_core::error::{Error, Result};
use mqblk_core::queue::{Device, DeviceConfig};
use mqblk_core::spec::SpecOptions;
use mqblk_nbd_proto::consts::transmission_flags as tf;

pub use driver::{NbdDriver, NbdQueue, SEND_TIMEOUT};
pub use handshake::{connect, connect_negotiate, negotiate, Negotiated};
pub use url::{Address, NbdUrl, UrlTls};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Largest `conns`.
pub const MAX_CONNS: u32 = 64;

/// Open an NBD export as a device. `url` is the spec's target; `opts`
/// takes `conns`, `reconnect_ms` and the common options (`hw_queues` is the same as
/// `conns`).
pub fn open(url: &str, mut opts: SpecOptions) -> Result<Device> {
    let u = url::parse(url).map_err(|why| Error::spec(opts.spec(), why))?;
    let conns = match (opts.take_u64("conns")?, opts.take_u64("hw_queues")?) {
        (Some(a), Some(b)) if a != b => {
            return Err(Error::spec(
                opts.spec(),
                "conns and hw_queues disagree; give one",
            ))
        }
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => 1,
    };
    if !(1..=u64::from(MAX_CONNS)).contains(&conns) {
        return Err(opts.error("conns", &conns.to_string(), "1 to 64"));
    }
    // How long to try to get a dropped connection back, sending its
    // requests again (0, the default: fail them at once).
    let reconnect_ms = opts.take_u64("reconnect_ms")?.unwrap_or(0);
    let name = format!("nbd{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let setup = |reason: String| Error::Setup {
        device: name.as_str().into(),
        reason,
    };
    let mut socks = Vec::with_capacity(conns as usize);
    let mut first: Option<Negotiated> = None;
    for i in 0..conns {
        let (s, n) = connect_negotiate(&u).map_err(|e| setup(format!("{url}: {e}")))?;
        match &first {
            None => {
                if conns > 1 && n.flags & tf::CAN_MULTI_CONN == 0 {
                    return Err(setup(format!(
                        "{url}: the server does not advertise CAN_MULTI_CONN, so {conns} connections \
                         could see different data; use conns=1"
                    )));
                }
                first = Some(n);
            }
            Some(f) if f.size != n.size || f.flags != n.flags => {
                return Err(setup(format!(
                    "{url}: connection {i} negotiated a different export"
                )));
            }
            Some(_) => {}
        }
        socks.push(s);
    }
    let neg = first.expect("at least one connection");
    let mut cfg = DeviceConfig::new(name.clone(), neg.size);
    cfg.take_common(&mut opts)?;
    opts.finish()?;
    // A server that stops reading must not block a hardware queue for
    // longer than a request may take: a send that makes no progress for
    // SEND_TIMEOUT, or io_timeout_ms if shorter, fails the connection (a
    // request half sent cannot be taken back) and its requests.
    let send_timeout = match cfg.timeout_ms {
        0 => SEND_TIMEOUT,
        ms => SEND_TIMEOUT.min(std::time::Duration::from_millis(u64::from(ms))),
    };
    for s in &socks {
        s.socket()
            .set_write_timeout(Some(send_timeout))
            .map_err(|e| setup(format!("{url}: {e}")))?;
    }
    cfg.nr_hw_queues = conns as u16;
    let mut driver = NbdDriver::new(name, neg, socks);
    if reconnect_ms > 0 {
        driver = driver.with_reconnect(
            u.clone(),
            std::time::Duration::from_millis(reconnect_ms),
            send_timeout,
        );
    }
    let driver = driver.with_control(u);
    Device::new(driver, cfg)
}
