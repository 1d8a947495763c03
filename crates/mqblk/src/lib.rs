//! mqblk: a multi-queue block I/O layer in user space.
//!
//! This crate is the front door: it re-exports the core ([`mqblk_core`])
//! and opens any built-in device from a spec string:
//!
//! ```
//! let dev = mqblk::open("null,size=1G,completion=inline").unwrap();
//! let mut ctx = dev.context().unwrap();
//! let mut buf = dev.alloc_buf(4096);
//! ctx.read_at(buf.as_mut_slice(), 0).unwrap();
//! ```

#![forbid(unsafe_code)]

pub use mqblk_core::*;
/// Partition tables (GPT, MBR): parsing, and reading a device's table.
pub use mqblk_part as part;

pub mod input;
mod part_open;
/// A failed mirror leg: which device, which leg, why, when
/// ([`degraded_legs`]).
pub use mqblk_dm::mirror::{DegradedLeg, LegFailure};
use mqblk_dm::Nesting;
pub use part_open::register_partitions;

/// Open a device from a spec string such as `null,size=1T,completion=inline`.
///
/// Kinds: `null` (see `mqblk_null` for its options) and `ram` (a sparse,
/// memory-backed disk like Linux's brd: `ram,size=1G`, see `mqblk_ram`)
/// and `file` (a regular file or block device through io_uring or
/// pread/pwrite: `file:/dev/loop0,direct=1`, see `mqblk_file`), and
/// `nbd` (an NBD export, `nbd://host:port/export` or
/// `nbd+unix:///export?socket=PATH`, with `conns=N` connections as
/// hardware queues, see `mqblk_nbd`), and `rbd` (a Ceph RBD image,
/// `rbd:POOL/IMAGE[@SNAP]`, with the `rbd` feature, see `mqblk_rbd`), and
/// stacked devices (`dm:TABLE_FILE` or `dm-table:LINE;LINE...`, a
/// device-mapper table over other specs, see `mqblk_dm`), and `qcow2`
/// (a qcow2 image with its backing chain, `qcow2:PATH`, or a new one with
/// `create=SIZE`, see `mqblk_qcow2`).
/// Every kind also takes the common options `hw_queues`, `queue_depth`,
/// `reserved_tags`, `shared_tags`, `queue_mode`, `plug`, `iostats`,
/// `io_timeout_ms` and `ro`, and `part=N`: partition N of the device (GPT
/// or MBR), as a device of its own whose I/O is bounded by the partition,
/// and `trace=DIR`: blktrace files of the device and every device below it
/// ([`start_trace`]), and `instance=NAME`, which only tells two devices
/// of one spec apart: in a dm table the same spec twice is one device, so
/// a stripe over two `ram,size=64M` legs names them
/// `ram,size=64M,instance=a` and `ram,size=64M,instance=b`. (Not `id=`:
/// that is the rbd driver's client id, as in QEMU.)
pub fn open(spec: &str) -> Result<Device> {
    open_in(spec, &Nesting::default())
}

/// Open `spec` inside the dm tables of `nesting`: a leg of a table.
fn open_in(spec: &str, nesting: &Nesting) -> Result<Device> {
    let s = mqblk_core::spec::parse(spec)?;
    open_parsed_in(s, nesting)
}

/// Open an already parsed spec (the bench adds its overrides to it first).
/// `trace=DIR` traces the device and every device below it
/// ([`start_trace`]).
pub fn open_parsed(s: mqblk_core::spec::DeviceSpec) -> Result<Device> {
    open_parsed_in(s, &Nesting::default())
}

fn open_parsed_in(mut s: mqblk_core::spec::DeviceSpec, nesting: &Nesting) -> Result<Device> {
    // `instance=`: a different spec, so a different device; nothing else.
    if s.options.take_str("instance").as_deref() == Some("") {
        return Err(Error::spec(
            s.options.spec(),
            "option instance=: expected a name that tells this device from another of the same spec, as in instance=a",
        ));
    }
    let trace = s.options.take_str("trace");
    if trace.as_deref() == Some("") {
        return Err(Error::spec(
            s.options.spec(),
            "option trace=: expected the directory the blktrace files go to",
        ));
    }
    let dev = match s.options.take_str("part") {
        Some(n) => part_open::open_partition(s, &n, &|s| open_kind(s, nesting))?,
        None => open_kind(s, nesting)?,
    };
    if let Some(dir) = trace {
        start_trace(&dev, &dir)?;
    }
    Ok(dev)
}

/// Trace `dev` and every device below it (a partition's disk, a stacked
/// device's legs, theirs in turn) into `dir`, in blktrace's format: each
/// writes `NAME.blktrace.N` files there ([`Device::start_trace`]), and
/// `blkparse -D DIR -i NAME -i LEG...` reads them together, the remaps
/// from one device to the next as A events. A device already traced is
/// left as it is.
pub fn start_trace(dev: &Device, dir: impl AsRef<std::path::Path>) -> Result<()> {
    let dir = dir.as_ref();
    for d in std::iter::once(dev.clone()).chain(lower_devices(dev)) {
        if d.trace_dir().is_none() {
            d.start_trace(dir)?;
        }
    }
    Ok(())
}

/// Stop the traces [`start_trace`] started on `dev` and below: every file
/// is complete when this returns. What each device wrote, the device
/// first; devices not traced are skipped.
pub fn stop_trace(dev: &Device) -> Result<Vec<TraceSummary>> {
    let mut out = Vec::new();
    for d in std::iter::once(dev.clone()).chain(lower_devices(dev)) {
        if d.trace_dir().is_some() {
            out.push(d.stop_trace()?);
        }
    }
    Ok(out)
}

/// Open the device of the spec's kind; a dm table inside the tables of
/// `nesting` (refused if it is one of them, or one too many).
fn open_kind(s: mqblk_core::spec::DeviceSpec, nesting: &Nesting) -> Result<Device> {
    match s.kind.as_str() {
        "null" | "nullb" => {
            if let Some(t) = &s.target {
                return Err(Error::spec(
                    s.options.spec(),
                    format!("the null device takes no target, got `{t}`"),
                ));
            }
            mqblk_null::open(s.options)
        }
        "ram" => {
            if let Some(t) = &s.target {
                return Err(Error::spec(
                    s.options.spec(),
                    format!("the ram device takes no target, got `{t}`"),
                ));
            }
            mqblk_ram::open(s.options)
        }
        "file" => match s.target {
            Some(t) => mqblk_file::open(&t, s.options),
            None => Err(Error::spec(
                s.options.spec(),
                "the file device needs a path, as in file:/dev/loop0 or file:/data/disk.img",
            )),
        },
        "nbd" | "nbds" => {
            // The whole URL is the target: nbd://host:port/export or
            // nbd+unix:///export?socket=PATH (nbds:// with TLS); `conns=N`
            // after a comma.
            let Some(url) = &s.target else {
                return Err(Error::spec(
                    s.options.spec(),
                    "the nbd device needs a URL: nbd://host:port/export or nbd+unix:///export?socket=PATH",
                ));
            };
            mqblk_nbd::open(url, s.options)
        }
        "rbd" => open_rbd(s),
        "qcow2" => match s.target {
            Some(t) => mqblk_qcow2::open(&t, s.options),
            None => Err(Error::spec(
                s.options.spec(),
                "the qcow2 device needs an image, as in qcow2:/data/vm.qcow2 (create=SIZE makes one)",
            )),
        },
        "dm" => match s.target {
            Some(t) => mqblk_dm::open_path(&t, s.options, nesting, &open_in),
            None => Err(Error::spec(
                s.options.spec(),
                "the dm device needs a table file, as in dm:/etc/mqblk/stripe.table",
            )),
        },
        "dm-table" => {
            let t = s.target.unwrap_or_default();
            mqblk_dm::open_inline(&t, s.options, nesting, &open_in)
        }
        other => {
            let near = mqblk_core::spec::nearest(other, KINDS.iter().map(|(k, _)| *k))
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            let kinds: Vec<&str> = KINDS.iter().map(|(_, shown)| *shown).collect();
            Err(Error::spec(
                s.options.spec(),
                format!(
                    "unknown device kind `{other}`{near}; built in: {}",
                    kinds.join(", ")
                ),
            ))
        }
    }
}

/// The device kinds [`open_kind`] knows, each with its shape for errors.
const KINDS: &[(&str, &str)] = &[
    ("null", "null"),
    ("ram", "ram,size=SIZE"),
    ("file", "file:PATH"),
    ("nbd", "nbd://HOST:PORT/EXPORT"),
    ("nbds", "nbds://HOST:PORT/EXPORT"),
    ("rbd", "rbd:POOL/IMAGE"),
    ("qcow2", "qcow2:PATH"),
    ("dm", "dm:TABLE_FILE"),
    ("dm-table", "dm-table:LINE;LINE..."),
];

/// `rbd:POOL/IMAGE[@SNAP]`: a Ceph RBD image.
#[cfg(feature = "rbd")]
fn open_rbd(s: mqblk_core::spec::DeviceSpec) -> Result<Device> {
    match &s.target {
        Some(t) => mqblk_rbd::open(t, s.options),
        None => Err(Error::spec(
            s.options.spec(),
            "the rbd device needs a pool and an image, as in rbd:rbd/img",
        )),
    }
}

/// Built without the `rbd` feature: say how to get it.
#[cfg(not(feature = "rbd"))]
fn open_rbd(s: mqblk_core::spec::DeviceSpec) -> Result<Device> {
    Err(Error::spec(
        s.options.spec(),
        "this mqblk was built without the `rbd` cargo feature: build with `--features rbd` \
         (the default of the mqblk command), with librbd-dev and librados-dev installed",
    ))
}

/// What a device's driver says about its setup beyond limits and features,
/// as `(key, value)` lines for `mqblk info`: for a file device, the engine
/// in use, its ring flags, and every fallback it took (`note`). Empty for
/// drivers with nothing to add.
pub fn driver_info(dev: &Device) -> Vec<(String, String)> {
    if let Some(h) = mqblk_dm::find(dev.name()) {
        return dm_info(&h);
    }
    if let Some(lines) = mqblk_qcow2::info(dev.name()) {
        return lines;
    }
    let Some(i) = mqblk_file::info(dev.name()) else {
        return Vec::new();
    };
    let mut out = vec![
        ("path".to_string(), i.path.clone()),
        ("engine".to_string(), i.summary()),
        ("alignment from".to_string(), i.align_source.to_string()),
    ];
    out.extend(i.notes.into_iter().map(|n| ("note".to_string(), n)));
    out
}

/// A stacked device's table, as `dmsetup status` prints it, and its legs.
fn dm_info(h: &mqblk_dm::Handle) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = h
        .status()
        .into_iter()
        .map(|l| ("table".to_string(), l))
        .collect();
    for (i, (dev, spec)) in h.legs().all().iter().zip(h.legs().specs()).enumerate() {
        let v = match dev {
            Some(d) => format!("{} ({spec})", d.name()),
            None => format!("out ({spec})"),
        };
        out.push((format!("leg {i}"), v));
    }
    for d in mqblk_dm::mirror::degraded_legs(h) {
        out.push(("degraded".to_string(), d.to_string()));
    }
    out
}

/// The lower devices of `dev` if it is a stacked device, and theirs in
/// turn (each once); empty for any other device. Their stats
/// are their own: `bench --stats-dir` writes a line for each.
pub fn lower_devices(dev: &Device) -> Vec<Device> {
    let mut out: Vec<Device> = Vec::new();
    let mut todo = vec![dev.clone()];
    while let Some(d) = todo.pop() {
        let Some(h) = mqblk_dm::find(d.name()) else {
            continue;
        };
        for leg in h.legs().all().into_iter().flatten() {
            if !out.iter().any(|o| o.same(&leg)) {
                out.push(leg.clone());
                todo.push(leg);
            }
        }
    }
    out
}

/// The mirror legs out of service in `dev` and in every stacked device
/// under it, each once: `dev` runs degraded while this is not empty (its
/// I/O goes on, on the legs left). Empty for any other device.
pub fn degraded_legs(dev: &Device) -> Vec<DegradedLeg> {
    std::iter::once(dev.clone())
        .chain(lower_devices(dev))
        .filter_map(|d| mqblk_dm::find(d.name()))
        .flat_map(|h| mqblk_dm::mirror::degraded_legs(&h))
        .collect()
}
