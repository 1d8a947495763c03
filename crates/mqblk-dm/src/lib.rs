//! Stacked devices (Linux device-mapper): a device described by a table
//! whose lines map ranges of it onto lower mqblk devices.
//!
//! - `dm:PATH` reads the table from a file in dmsetup's format, one target
//!   per line: `START LENGTH TARGET ARGS...`, in 512-byte sectors.
//! - `dm-table:LINE;LINE;...` gives it inline.
//!
//! Each lower device (a leg) is named by its own mqblk spec and opened
//! through the caller's opener (`mqblk::open`), so any device kind stacks,
//! stacked devices included, up to [`MAX_NESTING`] tables deep and never a
//! table inside itself ([`nesting`]). The pipeline is the table ([`table`]), the
//! targets ([`target`]), the legs ([`legs`]) and the lower ranges the
//! lines map onto, never two on one ([`extent`]), the limits stacked from the
//! legs' ([`limits`]), and the driver that sends child bios and completes
//! their parent (`stacked`).

mod bio_based;
pub mod extent;
mod handle;
mod held;
pub mod legs;
pub mod limits;
mod map;
pub mod nesting;
mod overlap;
mod stacked;
pub mod table;
pub mod target;

use std::sync::Arc;

use mqblk_core::spec::SpecOptions;
use mqblk_core::{Device, DeviceConfig, Error, Result};

pub use extent::{Overlap, Use};
pub use handle::{find, Handle};
pub use legs::{LegId, LegSet, Legs, Opener};
pub use nesting::{Nesting, MAX_NESTING};
pub use table::{Table, TableError, TableLine};
pub use target::mirror;
pub use target::Target;

use bio_based::BioStacked;
use handle::register;
use map::Line;
use stacked::Stacked;

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn table_error(spec: &str, e: TableError) -> Error {
    Error::spec(spec, format!("dm table {e}"))
}

/// Spec options that only a request queue has: a table given one is
/// request-based (as `bio_remap=0` makes it).
pub const QUEUE_OPTIONS: &[&str] = &[
    "hw_queues",
    "queue_depth",
    "queue_depth_max",
    "reserved_tags",
    "shared_tags",
    "queue_mode",
    "plug",
    "nomerges",
    "bounce",
    "scheduler",
    "async_depth",
    "fifo_batch",
    "prio_aging_expire",
    "read_expire",
    "write_expire",
    "writes_starved",
];

/// Opens a lower device from its spec within a chain of tables
/// (`mqblk`'s opener): the legs of a table are opened with the chain that
/// holds it.
pub type NestedOpener<'a> = &'a dyn Fn(&str, &Nesting) -> Result<Device>;

/// Open `dm:PATH` (the table in a file), inside the tables of `nesting`
/// (none: [`Nesting::default`]). `opts` are the common device options
/// (`hw_queues`, `queue_depth`, ...). A table that includes itself, or
/// one past [`MAX_NESTING`] deep, is refused, naming the chain.
pub fn open_path(
    path: &str,
    opts: SpecOptions,
    nesting: &Nesting,
    opener: NestedOpener<'_>,
) -> Result<Device> {
    use std::io::Read as _;
    let spec = format!("dm:{path}");
    let inside = nesting.enter_file(&spec, path)?;
    let cannot =
        |e: std::io::Error| Error::spec(&spec, format!("cannot read the table file {path}: {e}"));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(table::FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > table::FILE_BYTES_MAX {
        return Err(Error::spec(
            &spec,
            format!(
                "the table file {path} is larger than {} bytes, the most mqblk reads of a dm table (is it the right file?)",
                table::FILE_BYTES_MAX
            ),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::spec(&spec, format!("the table file {path} is not UTF-8 text")))?;
    open_text(&spec, &text, opts, &|leg| opener(leg, &inside))
}

/// Open `dm-table:TABLE` (the table inline, `;` between lines), inside the
/// tables of `nesting`, as [`open_path`].
pub fn open_inline(
    table: &str,
    opts: SpecOptions,
    nesting: &Nesting,
    opener: NestedOpener<'_>,
) -> Result<Device> {
    let spec = format!("dm-table:{table}");
    let inside = nesting.enter_inline(&spec)?;
    open_text(&spec, table, opts, &|leg| opener(leg, &inside))
}

fn open_text(spec: &str, text: &str, mut opts: SpecOptions, opener: Opener<'_>) -> Result<Device> {
    let table = table::parse(text).map_err(|e| table_error(spec, e))?;
    let name = format!(
        "dm-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut cfg = DeviceConfig::new(name, table.sectors() << 9);
    // Bio-based, as Linux's dm is for these targets, unless the spec asks
    // for a request queue of its own: `bio_remap=0`, or an option that
    // only a request queue has (its depth, scheduler, merging). Then a
    // table of one linear line is a remapped window of its leg.
    let queue_opts = QUEUE_OPTIONS.iter().any(|k| opts.contains(k));
    let bio_based = opts.take_bool("bio_remap")?.unwrap_or(true) && !queue_opts;
    cfg.take_common(&mut opts)?;
    opts.finish()?;
    let legs = Arc::new(Legs::default());
    let mut set = LegSet::new(opener, legs.clone(), cfg.read_only);
    let mut targets = Vec::with_capacity(table.lines.len());
    for line in &table.lines {
        let mut c = target::Ctor {
            line,
            legs: &mut set,
        };
        targets.push(Arc::from(
            target::build(&mut c).map_err(|e| table_error(spec, e))?,
        ));
    }
    if bio_based {
        if let Some(dev) = remap_linear(&table, &targets, &legs, &cfg.name, cfg.read_only)? {
            return Ok(dev);
        }
    }
    create(spec, table, targets, legs, cfg, bio_based)
}

/// A table of one `linear` line as a window of its leg
/// ([`Device::remap`], Linux's partition remap): bios are shifted in the
/// submitting context and go down the leg's own pipeline, so the layer
/// costs a bounds check and an add. `None` for any other table.
fn remap_linear(
    table: &Table,
    targets: &[Arc<dyn Target>],
    legs: &Arc<Legs>,
    name: &str,
    read_only: bool,
) -> Result<Option<Device>> {
    let [line] = &table.lines[..] else {
        return Ok(None);
    };
    let Some((leg, offset_bytes)) = targets[0].linear() else {
        return Ok(None);
    };
    let Some(lower) = legs.get(leg) else {
        return Ok(None);
    };
    let handle = Arc::new(Handle {
        name: name.to_string(),
        table: table.clone(),
        legs: legs.clone(),
        targets: targets.to_vec(),
    });
    let dev = lower.remap(
        offset_bytes,
        line.len << 9,
        name,
        read_only,
        Some(handle.clone()),
    )?;
    register(name, &handle);
    Ok(Some(dev))
}

/// A linear device of `len_bytes` over `lower` from `offset_bytes` (a
/// partition), named `name`: a remapped window of `lower`
/// ([`Device::remap`]). I/O past its end is refused by the core with
/// an error naming `name`, the offset and the end.
pub fn linear(lower: Device, offset_bytes: u64, len_bytes: u64, name: &str) -> Result<Device> {
    let spec = format!("{name} (linear over {})", lower.name());
    if !offset_bytes.is_multiple_of(512) || !len_bytes.is_multiple_of(512) || len_bytes == 0 {
        return Err(Error::spec(
            spec,
            "offset and length must be whole 512-byte sectors, the length above 0",
        ));
    }
    if offset_bytes
        .checked_add(len_bytes)
        .is_none_or(|e| e > lower.capacity_bytes())
    {
        return Err(Error::spec(
            spec,
            format!(
                "bytes {offset_bytes}..{} run past {}, which has {} bytes",
                offset_bytes.saturating_add(len_bytes),
                lower.name(),
                lower.capacity_bytes()
            ),
        ));
    }
    let legs = Arc::new(Legs::default());
    let leg = legs.push(lower.clone(), lower.name());
    let table = Table {
        lines: vec![TableLine {
            line: 1,
            start: 0,
            len: len_bytes >> 9,
            target: "linear".into(),
            args: vec![lower.name().to_string(), (offset_bytes >> 9).to_string()],
        }],
    };
    let targets: Vec<Arc<dyn Target>> = vec![Arc::new(target::Linear::on(leg, offset_bytes))];
    Ok(remap_linear(&table, &targets, &legs, name, false)?
        .expect("one linear line over a present leg"))
}

/// Build the device from a checked table, its targets and legs.
fn create(
    spec: &str,
    table: Table,
    targets: Vec<Arc<dyn Target>>,
    legs: Arc<Legs>,
    cfg: DeviceConfig,
    bio_based: bool,
) -> Result<Device> {
    let devs: Vec<Device> = legs.all().into_iter().flatten().collect();
    let below: Vec<_> = devs
        .iter()
        .map(|d| (d.limits(), d.info().features))
        .collect();
    let (mut lim, features) = limits::stack(&below);
    for t in &targets {
        t.limits(&mut lim);
    }
    let lbs = u64::from(lim.logical_block_size);
    for l in &table.lines {
        if (l.start << 9) % lbs != 0 || (l.len << 9) % lbs != 0 {
            return Err(table_error(
                spec,
                TableError::new(
                    l.line,
                    if (l.start << 9) % lbs != 0 { 1 } else { 2 },
                    if (l.start << 9) % lbs != 0 {
                        "start"
                    } else {
                        "length"
                    },
                    format!("is not a multiple of the legs' logical block size of {lbs} bytes"),
                ),
            ));
        }
    }
    let lines = table
        .lines
        .iter()
        .zip(&targets)
        .map(|(l, t)| Line {
            start: l.start << 9,
            end: (l.start + l.len) << 9,
            target: t.clone(),
        })
        .collect();
    // A delayed child is sent from `poll`: a device holding some back is
    // polled, so that waiters do not sleep past a child's time.
    let all_async = !devs.is_empty()
        && devs.iter().all(Device::completes_async)
        && !targets.iter().any(|t| t.delays());
    let flush_lines = targets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.maps_flush())
        .map(|(i, _)| i as u32)
        .collect();
    let name = cfg.name.clone();
    let handle = Arc::new(Handle {
        name: name.clone(),
        table,
        legs: legs.clone(),
        targets,
    });
    let mut stack = Stacked {
        name: name.clone(),
        lines,
        legs,
        limits: lim,
        features,
        all_async,
        flush_lines,
        _handle: handle.clone(),
    };
    let dev = if bio_based {
        // A FUA clone reaches each leg, whose own pipeline writes it
        // through or follows it with a flush: the stacked device passes
        // FUA down rather than flush every leg after the write.
        stack.features.fua = stack.features.write_cache;
        let lines_below = devs.iter().any(Device::has_irq_lines);
        let routes_writes = stack.lines.iter().any(|l| l.target.routes_writes());
        let (fast, fast_writes) = match stack.lines.as_slice() {
            [l] if l.start == 0 => (
                bio_based::FastRoute::of(l.target.as_ref()),
                bio_based::FastRoute::writes_of(l.target.as_ref()),
            ),
            _ => (None, None),
        };
        Device::new_bio_based(
            BioStacked {
                stack,
                lines_below,
                routes_writes,
                fast,
                fast_writes,
            },
            cfg,
        )?
    } else {
        Device::new(stack, cfg)?
    };
    register(&name, &handle);
    Ok(dev)
}
