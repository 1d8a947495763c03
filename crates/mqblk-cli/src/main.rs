//! `mqblk`: the command-line front of the mqblk block layer.
//!
//! - `mqblk bench`: fio's option names (and fio job files), fio-shaped
//!   output, plus the layer's own figures; see [`bench`].
//! - `mqblk info SPEC` (or `--device SPEC`): what a device spec opens:
//!   capacity, block size, alignment, limits, features, queue mode and
//!   hardware queues. It opens the device read-only.
//! - `mqblk stat DIR`: a bench's counters from its `--stats-dir`.
//! - `mqblk serve SPEC --socket PATH | --listen HOST:PORT`: an NBD server.
//! - `mqblk repro NAME`: one of the seeds' experiments, with its tables
//!   and plot; see [`repro`].
//! - `mqblk plot RESULT.json...`: charts of bench or fio JSON; see
//!   [`plot`].
//!
//! A bare path where a spec is expected (`/dev/sdb`, `./disk.img`) is read
//! as the file device `file:PATH`, with a note.
//!
//! The binary counts heap allocations (see [`alloc_count`]) so that the
//! bench can report allocations per I/O.

mod alloc_count;
mod bench;
mod ctime;
mod degraded;
mod open;
mod partitions;
mod plot;
mod qos;
mod repro;
mod serve;
mod stat;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand};

use bench::options::JobOptions;
use bench::report::{self, Format};
use open::{device_spec, open_error, open_read_only};

#[global_allocator]
static GLOBAL: alloc_count::CountingAlloc = alloc_count::CountingAlloc;

#[derive(Parser, Debug)]
#[command(
    name = "mqblk",
    version,
    about = "A user-space multi-queue block layer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure devices with fio's options and fio-shaped output.
    ///
    /// Options given on the command line override the job file's, in every
    /// section. Values are validated as fio job-file values are: sizes take
    /// binary suffixes (4k = 4096), times are seconds unless suffixed (us,
    /// ms, s, m, h). Every job-file key without a flag below is taken too,
    /// as --KEY=VALUE (or a bare --KEY for an on/off or log key), as fio
    /// takes them: --slat_percentiles, --write_lat_log=PREFIX,
    /// --log_avg_msec=0, --bssplit=4k/50:64k/50 and the rest.
    #[command(args_override_self = true)]
    Bench(Box<BenchArgs>),
    /// Open a device spec read-only and print what it is: capacity, block
    /// size, alignment, limits, features, queue mode, hardware queues, and
    /// the driver's notes (fallbacks, a size= prefix, the buffer arena).
    Info(InfoArgs),
    /// Show a running or finished bench's counters from its --stats-dir:
    /// an iostat-like view with merges, splits and bounce bytes.
    Stat(StatArgs),
    /// Export devices over NBD (TCP or a unix socket, optionally TLS).
    Serve(Box<serve::ServeArgs>),
    /// Change groups and limits of a running serve or bench (started with
    /// --control=SOCKET): `group NAME riops=5000 weight=300`, `create NAME
    /// weight=300`, `device rbps=50m`, or `show`.
    Qos(QosArgs),
    /// Stacked devices of a running serve or bench (started with
    /// --control=SOCKET): `replace DEVICE LEG NEWSPEC` rebuilds a mirror
    /// leg onto a new device online, showing its progress.
    Dm(DmArgs),
    /// Rerun one of the seeds' experiments: raw JSON of every point, a CSV,
    /// a markdown table with the seed's figure beside ours, and the plot
    /// (SVG and PNG). `mqblk repro list` names them.
    Repro(repro::ReproArgs),
    /// Plot bench or fio JSON reports: IOPS or bandwidth bars per job,
    /// latency percentile curves and the latency histogram (SVG and PNG).
    Plot(plot::PlotArgs),
}

#[derive(Args, Debug)]
struct QosArgs {
    /// The control socket of the running serve or bench.
    #[arg(long, value_name = "SOCKET")]
    control: PathBuf,
    /// The request: group NAME KEY=VALUE..., create NAME KEY=VALUE...,
    /// device KEY=VALUE..., or show.
    #[arg(required = true, value_name = "REQUEST")]
    request: Vec<String>,
}

#[derive(Args, Debug)]
struct DmArgs {
    #[command(subcommand)]
    command: DmCommand,
}

#[derive(Subcommand, Debug)]
enum DmCommand {
    /// Rebuild leg LEG (from 0) of the mirror in DEVICE onto NEWSPEC,
    /// under load; prints each region's progress.
    Replace {
        /// The control socket of the running serve or bench.
        #[arg(long, value_name = "SOCKET")]
        control: PathBuf,
        /// The stacked device's name (as `mqblk qos show` lists it).
        device: String,
        /// The mirror leg, from 0 in table order.
        leg: String,
        /// The new leg's device spec.
        newspec: String,
    },
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// A fio job file (INI) with [global] and job sections.
    #[arg(value_name = "JOBFILE")]
    jobfile: Option<PathBuf>,

    /// Run only this job section of the job file (repeatable), as fio's
    /// --section; [global] sections always apply.
    #[arg(long, value_name = "NAME")]
    section: Vec<String>,

    /// Name of the command-line job (default job0).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,

    /// read, write, randread, randwrite, rw (readwrite), randrw.
    #[arg(long, value_name = "MODE")]
    rw: Option<String>,

    /// Block size, 512 to 64M, a multiple of 512 (default 4k).
    #[arg(long, value_name = "SIZE")]
    bs: Option<String>,

    /// I/Os in flight per job, 1 to 65536 (default 1).
    #[arg(long, value_name = "N")]
    iodepth: Option<String>,

    /// Copies of the job, each a thread with its own context (default 1).
    #[arg(long, value_name = "N")]
    numjobs: Option<String>,

    /// Bytes of the device to cover (default: the whole device).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,

    /// Run time: seconds, or with a suffix us, ms, s, m, h (0: no limit).
    #[arg(long, value_name = "TIME")]
    runtime: Option<String>,

    /// Run for the whole runtime, wrapping around the size.
    #[arg(
        long = "time_based",
        alias = "time-based",
        value_name = "0|1",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1"
    )]
    time_based: Option<String>,

    /// Run this long before measuring.
    #[arg(long = "ramp_time", alias = "ramp-time", value_name = "TIME")]
    ramp_time: Option<String>,

    /// Percentage of reads in rw and randrw (default 50).
    #[arg(long, value_name = "PERCENT")]
    rwmixread: Option<String>,

    /// Seed of the random offsets.
    #[arg(long, value_name = "N")]
    randseed: Option<String>,

    /// Report format.
    #[arg(
        long = "output-format",
        alias = "output_format",
        value_enum,
        default_value = "normal"
    )]
    output_format: Format,

    /// Device spec, repeatable: job i uses device i mod n (default null).
    /// A bare path is read as file:PATH.
    #[arg(long = "device", value_name = "SPEC")]
    device: Vec<String>,

    /// fio's --filename: a file or block device, the same as
    /// --device file:PATH (repeatable).
    #[arg(long = "filename", value_name = "PATH")]
    filename: Vec<String>,

    /// fio's --direct: O_DIRECT (1, mqblk's default) or the page cache (0)
    /// for every file device; the same as direct= in a file: spec.
    #[arg(long = "direct", value_name = "0|1")]
    direct: Option<String>,

    /// fio's --ioengine: io_uring or psync pick the file device's engine
    /// (engine= in a file: spec); mqblk itself is the engine otherwise.
    #[arg(long = "ioengine", value_name = "ENGINE")]
    ioengine: Option<String>,

    /// fio's --thread and --group_reporting: accepted and ignored (jobs are
    /// always threads; each job is reported).
    #[arg(
        long = "thread",
        alias = "group_reporting",
        hide = true,
        value_name = "0|1",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1"
    )]
    ignored: Vec<String>,

    /// mq, device-lock or global-lock.
    #[arg(long = "queue-mode", alias = "queue_mode", value_name = "MODE")]
    queue_mode: Option<String>,

    /// Hardware queues of every device, 1 to 1024.
    #[arg(long = "hw-queues", alias = "hw_queues", value_name = "N")]
    hw_queues: Option<String>,

    /// Plugging: on or off (1/0).
    #[arg(long, value_name = "on|off")]
    plug: Option<String>,

    /// Per-I/O accounting and latency: 1 or 0 (default 1).
    #[arg(long, value_name = "0|1")]
    iostats: Option<String>,

    /// Write a checked header into every block and check it on read-back:
    /// crc32c, md5, sha256, or none.
    #[arg(long, value_name = "crc32c|md5|sha256|none")]
    verify: Option<String>,

    /// With --verify, read back everything written after the run: 1 or 0
    /// (default 1).
    #[arg(long = "do_verify", alias = "do-verify", value_name = "0|1")]
    do_verify: Option<String>,

    /// With --verify, stop a job at its first mismatch: 1 or 0 (default 0).
    #[arg(long = "verify_fatal", alias = "verify-fatal", value_name = "0|1")]
    verify_fatal: Option<String>,

    /// Which failed I/Os a job goes on past: none (default: a job stops at
    /// its first I/O error, as fio's), read, write, io, verify or all.
    #[arg(
        long = "continue_on_error",
        alias = "continue-on-error",
        value_name = "none|read|write|io|verify|all"
    )]
    continue_on_error: Option<String>,

    /// Bytes each job transfers before it ends (fio's io_size; default: --size).
    #[arg(long = "io_size", alias = "io_limit", value_name = "BYTES")]
    io_size: Option<String>,

    /// I/Os each job issues before it ends (fio's number_ios).
    #[arg(long = "number_ios", value_name = "N")]
    number_ios: Option<String>,

    /// Flush the device after every N writes (fio's fsync=N; 0: never).
    #[arg(long = "fsync", value_name = "N")]
    fsync: Option<String>,

    /// With --verify, make N percent of the writes discards of the block.
    #[arg(long = "trim_percentage", value_name = "N")]
    trim_percentage: Option<String>,

    /// With --trim_percentage, a discarded block must read back as zeros:
    /// 1 or 0 (default 0: zeros or what it held before).
    #[arg(long = "trim_verify_zero", value_name = "0|1")]
    trim_verify_zero: Option<String>,

    /// With --verify, make N percent of the writes write-zeroes of the
    /// block (read back as zeros).
    #[arg(long = "write_zeroes_percentage", value_name = "N")]
    write_zeroes_percentage: Option<String>,

    /// Cut each I/O's buffer into N non-contiguous pieces (readv/writev-style
    /// bios), 1 to 256.
    #[arg(long, value_name = "N")]
    segments: Option<String>,

    /// Keep DIR/diskstats (read it with `iostat -x -f DIR -p ALL 1`) and
    /// DIR/mqblk.json (read it with `mqblk stat DIR`) up to date.
    #[arg(long = "stats-dir", alias = "stats_dir", value_name = "DIR")]
    stats_dir: Option<String>,

    /// Pause after each completion before the next I/O (fio's thinktime):
    /// microseconds, or with a suffix (us, ms, s).
    #[arg(long, value_name = "TIME")]
    thinktime: Option<String>,

    /// The device group the job's context joins (fio's cgroup=), created
    /// with --cgroup_weight if missing; see `mqblk qos` for changing it live.
    #[arg(long, value_name = "NAME")]
    cgroup: Option<String>,

    /// The group's weight, 1 to 1000 (fio's cgroup_weight=; default 100).
    #[arg(long = "cgroup_weight", alias = "cgroup-weight", value_name = "N")]
    cgroup_weight: Option<String>,

    /// The job's I/O priority class: rt, be or idle (fio's prioclass=).
    #[arg(long, value_name = "CLASS")]
    prioclass: Option<String>,

    /// The level within the class, 0 (highest) to 7 (fio's prio=).
    #[arg(long, value_name = "N")]
    prio: Option<String>,

    /// At most this many I/Os per second per job (fio's rate_iops=).
    #[arg(long = "rate_iops", alias = "rate-iops", value_name = "N")]
    rate_iops: Option<String>,

    /// At most this many bytes per second per job (fio's rate=).
    #[arg(long, value_name = "BYTES")]
    rate: Option<String>,

    /// The other job-file keys given as `--KEY=VALUE` (or a bare `--KEY`),
    /// taken out of the arguments before clap sees them
    /// ([`split_job_keys`]).
    #[arg(skip)]
    job_keys: Vec<(String, Option<String>)>,

    /// Listen on this unix socket for group and limit changes while the
    /// run goes on (`mqblk qos --control=SOCKET ...`).
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,

    /// The status line on stderr (elapsed, eta, IOPS and bandwidth per
    /// direction, p99): auto shows it when stdout and stderr are terminals.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    eta: bench::status::Eta,

    /// Print a JSON report to stdout every TIME while running (seconds
    /// unless suffixed): each job's IOPS and bandwidth per direction over
    /// the interval, its I/Os so far, and its p99 so far, one line each.
    #[arg(
        long = "status-interval",
        alias = "status_interval",
        value_name = "TIME"
    )]
    status_interval: Option<String>,
}

fn stat_command(args: &StatArgs) -> Result<()> {
    let interval = args
        .interval
        .as_deref()
        .map(bench::options::parse_duration)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    if interval.is_some_and(|d| d.is_zero()) {
        anyhow::bail!("--interval: must be more than 0");
    }
    let dir = args
        .dir
        .as_ref()
        .or(args.stats_dir.as_ref())
        .context("give the stats directory: mqblk stat DIR, or mqblk stat --stats-dir DIR")?;
    if args.count == Some(0) {
        anyhow::bail!("--count 0: expected at least 1 report (leave it out to run until stopped)");
    }
    stat::stat_command(dir, interval, args.count)
}

#[derive(Args, Debug)]
struct StatArgs {
    /// The directory a bench writes with --stats-dir (or give it with
    /// --stats-dir).
    #[arg(value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
    /// The same directory, named as bench names it.
    #[arg(
        long = "stats-dir",
        alias = "stats_dir",
        value_name = "DIR",
        conflicts_with = "dir"
    )]
    stats_dir: Option<std::path::PathBuf>,
    /// Print rates every INTERVAL (seconds unless suffixed) instead of the
    /// run's averages.
    #[arg(long, value_name = "INTERVAL")]
    interval: Option<String>,
    /// With --interval, stop after N reports.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// Device spec, such as null,size=1G or file:/dev/sdb (a bare path is
    /// read as file:PATH).
    #[arg(value_name = "SPEC", conflicts_with = "device")]
    spec: Option<String>,
    /// The same, as an option.
    #[arg(long = "device", value_name = "SPEC")]
    device: Option<String>,
    /// Print JSON: the device, and its partition table shaped like
    /// `sfdisk --json`'s `partitiontable` object.
    #[arg(long)]
    json: bool,
}

/// `mqblk bench` takes every job-file key on its command line, as fio
/// does. The keys without a flag of their own are taken out of `args`
/// (`--KEY=VALUE`, or a bare `--KEY`, up to a `--`) for
/// [`JobOptions::set`], which checks them as it checks a job file's lines.
fn split_job_keys(args: Vec<String>) -> (Vec<String>, Vec<(String, Option<String>)>) {
    use clap::CommandFactory;
    if args.get(1).map(String::as_str) != Some("bench") {
        return (args, Vec::new());
    }
    let cmd = Cli::command();
    let flags: Vec<String> = cmd
        .find_subcommand("bench")
        .map(|b| {
            b.get_arguments()
                .filter_map(|a| a.get_long())
                .chain(
                    b.get_arguments()
                        .flat_map(|a| a.get_all_aliases().unwrap_or_default()),
                )
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut kept = Vec::with_capacity(args.len());
    let mut keys = Vec::new();
    let mut rest = false;
    for arg in args {
        rest |= arg == "--";
        let key = arg
            .strip_prefix("--")
            .filter(|_| !rest)
            .map(|t| t.split_once('=').map_or((t, None), |(k, v)| (k, Some(v))))
            .filter(|(k, _)| !flags.iter().any(|f| f == k) && bench::options::KEYS.contains(k))
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)));
        match key {
            Some(k) => keys.push(k),
            None => kept.push(arg),
        }
    }
    (kept, keys)
}

/// Parse `args` (the program name first), with [`split_job_keys`].
fn try_parse_from(args: Vec<String>) -> Result<Cli, clap::Error> {
    let (args, keys) = split_job_keys(args);
    let mut cli = Cli::try_parse_from(args)?;
    if let Command::Bench(b) = &mut cli.command {
        b.job_keys = keys;
    }
    Ok(cli)
}

/// The hint for a `dm-table:` spec given unquoted.
const SPLIT_DM_TABLE: &str =
    "a dm-table spec holds spaces, and the shell split it there: quote it whole";

/// A `dm-table:` spec the shell split at its spaces (it was not quoted),
/// put back together and quoted: the argument holding `dm-table:` and the
/// words after it up to the next option.
fn split_dm_table(args: &[String]) -> Option<String> {
    let i = args.iter().position(|a| a.contains("dm-table:"))?;
    let at = args[i].find("dm-table:")?;
    if args[i].contains(' ') {
        // Quoted: whatever follows is another argument.
        return None;
    }
    let mut prefix = args[i][..at].to_string();
    if prefix.is_empty() && i > 0 && args[i - 1].starts_with("--") {
        prefix = format!("{} ", args[i - 1]);
    }
    let words: Vec<&str> = std::iter::once(&args[i][at..])
        .chain(
            args[i + 1..]
                .iter()
                .map(String::as_str)
                .take_while(|a| !a.starts_with('-')),
        )
        .collect();
    (words.len() > 1).then(|| format!("{prefix}'{}'", words.join(" ")))
}

/// Parse the command line; an unknown option is answered with the nearest
/// known one and the subcommand's help, not clap's `-- --x` tip.
fn parse_cli() -> Cli {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    let e = match try_parse_from(std::env::args().collect()) {
        Ok(cli) => return cli,
        Err(e) => e,
    };
    if e.kind() != ErrorKind::UnknownArgument {
        e.exit();
    }
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(a)) => a.clone(),
        _ => e.exit(),
    };
    let sub = std::env::args().nth(1).unwrap_or_default();
    let cmd = Cli::command();
    let Some(sc) = cmd.find_subcommand(&sub) else {
        e.exit()
    };
    let name = arg.trim_start_matches('-');
    let name = name.split('=').next().unwrap_or(name);
    let mut longs: Vec<&str> = sc.get_arguments().filter_map(|a| a.get_long()).collect();
    if sub == "bench" {
        longs.extend(bench::options::KEYS);
    }
    let mut msg = format!("mqblk: error: unknown option {arg} for `mqblk {sub}`");
    let args: Vec<String> = std::env::args().collect();
    if let Some(quoted) = split_dm_table(&args).filter(|_| !arg.starts_with('-')) {
        msg.push_str(&format!("; {SPLIT_DM_TABLE}, as in {quoted}"));
    } else if let Some(near) = mqblk::spec::nearest(name, longs.iter().copied()) {
        msg.push_str(&format!("; did you mean --{near}?"));
    }
    msg.push_str(&format!(" (`mqblk {sub} --help` lists every option)"));
    eprintln!("{msg}");
    std::process::exit(2);
}

fn main() -> std::process::ExitCode {
    let cli = parse_cli();
    let result = match cli.command {
        Command::Bench(args) => bench_command(&args),
        Command::Info(args) => info_command(&args),
        Command::Stat(args) => stat_command(&args),
        Command::Serve(args) => serve::serve_command(&args),
        Command::Qos(args) => qos::client(&args.control, &args.request),
        Command::Dm(args) => match args.command {
            DmCommand::Replace {
                control,
                device,
                leg,
                newspec,
            } => qos::client(
                &control,
                &["dm".into(), "replace".into(), device, leg, newspec],
            ),
        },
        Command::Repro(args) => repro::repro_command(&args),
        Command::Plot(args) => plot::plot_command(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, with every cause: `{:#}` joins the chain with `: `.
            let args: Vec<String> = std::env::args().collect();
            match split_dm_table(&args) {
                Some(quoted) => eprintln!("mqblk: error: {e:#}; {SPLIT_DM_TABLE}, as in {quoted}"),
                None => eprintln!("mqblk: error: {e:#}"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}

impl BenchArgs {
    /// The command line's options as one layer, validated by the same
    /// setter as job files; errors name the option as it was written.
    fn job_options(&self) -> Result<JobOptions> {
        let mut o = JobOptions::default();
        let single = [
            ("name", "name", &self.name),
            ("rw", "rw", &self.rw),
            ("bs", "bs", &self.bs),
            ("iodepth", "iodepth", &self.iodepth),
            ("numjobs", "numjobs", &self.numjobs),
            ("size", "size", &self.size),
            ("runtime", "runtime", &self.runtime),
            ("time_based", "time_based", &self.time_based),
            ("ramp_time", "ramp_time", &self.ramp_time),
            ("rwmixread", "rwmixread", &self.rwmixread),
            ("randseed", "randseed", &self.randseed),
            ("queue-mode", "queue_mode", &self.queue_mode),
            ("hw-queues", "hw_queues", &self.hw_queues),
            ("plug", "plug", &self.plug),
            ("iostats", "iostats", &self.iostats),
            ("verify", "verify", &self.verify),
            ("do_verify", "do_verify", &self.do_verify),
            ("verify_fatal", "verify_fatal", &self.verify_fatal),
            (
                "continue_on_error",
                "continue_on_error",
                &self.continue_on_error,
            ),
            ("io_size", "io_size", &self.io_size),
            ("number_ios", "number_ios", &self.number_ios),
            ("fsync", "fsync", &self.fsync),
            ("trim_percentage", "trim_percentage", &self.trim_percentage),
            (
                "trim_verify_zero",
                "trim_verify_zero",
                &self.trim_verify_zero,
            ),
            (
                "write_zeroes_percentage",
                "write_zeroes_percentage",
                &self.write_zeroes_percentage,
            ),
            ("segments", "segments", &self.segments),
            ("stats-dir", "stats_dir", &self.stats_dir),
            ("thinktime", "thinktime", &self.thinktime),
            ("cgroup", "cgroup", &self.cgroup),
            ("cgroup_weight", "cgroup_weight", &self.cgroup_weight),
            ("prioclass", "prioclass", &self.prioclass),
            ("prio", "prio", &self.prio),
            ("rate_iops", "rate_iops", &self.rate_iops),
            ("rate", "rate", &self.rate),
        ];
        for (flag, key, value) in single {
            if let Some(v) = value {
                o.set(key, Some(v))
                    .map_err(|e| anyhow::anyhow!("--{flag}: {e}"))?;
            }
        }
        for (key, value) in &self.job_keys {
            o.set(key, value.as_deref())
                .map_err(|e| anyhow::anyhow!("--{key}: {e}"))?;
        }
        let mut specs: Vec<String> = self.device.iter().map(|d| device_spec(d)).collect();
        specs.extend(self.filename.iter().map(|f| format!("file:{f}")));
        if let Some(d) = &self.direct {
            let b = mqblk::spec::parse_bool(d).ok_or_else(|| {
                anyhow::anyhow!("--direct={d}: expected 0 (page cache) or 1 (O_DIRECT)")
            })?;
            o.file_direct = Some(b);
        }
        if let Some(engine) = &self.ioengine {
            o.file_engine = bench::options::file_engine(engine)
                .map_err(|why| anyhow::anyhow!("--ioengine={engine}: {why}"))?;
        }
        let file_flag = match (&self.direct, &self.ioengine) {
            (Some(_), _) => Some("--direct"),
            (None, Some(_)) => Some("--ioengine"),
            (None, None) => None,
        };
        // Without a job file, a file flag with no file device does nothing:
        // say so rather than ignore it.
        if let Some(flag) = file_flag {
            let any_file = specs.iter().any(|s| s.trim_start().starts_with("file:"));
            if self.jobfile.is_none() && !any_file {
                bail!(
                    "{flag} applies to file devices, and none is given: name one with \
                     --filename PATH or --device file:PATH"
                );
            }
        }
        for spec in &specs {
            o.set("device", Some(spec))
                .map_err(|e| anyhow::anyhow!("--device: {e}"))?;
        }
        Ok(o)
    }
}

fn bench_command(args: &BenchArgs) -> Result<()> {
    let cli = args.job_options()?;
    let jobs = match &args.jobfile {
        Some(path) => {
            if cli.name.is_some() {
                bail!("--name names the command-line job; a job file names its jobs by their [sections]");
            }
            bench::jobfile::load(path, &cli, &args.section)?
        }
        None => vec![cli.build("job0").map_err(anyhow::Error::msg)?],
    };
    bench::options::check_run(&jobs).map_err(anyhow::Error::msg)?;
    let format = args.output_format;
    let interval = args
        .status_interval
        .as_deref()
        .map(bench::options::parse_duration)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--status-interval: {e}"))?
        .filter(|d| !d.is_zero());
    if interval.is_some_and(|d| d < std::time::Duration::from_millis(10)) {
        bail!("--status-interval: expected at least 10ms between reports");
    }
    let status = bench::status::StatusOptions {
        eta: args.eta,
        interval,
    };
    // Everything that can fail before the run fails here, before the banner.
    let prepared = bench::engine::prepare(&jobs)?;
    let _control = match &args.control {
        Some(path) => Some(qos::Control::start(path, prepared.devices())?),
        None => None,
    };

    // As fio: the first SIGINT or SIGTERM stops the jobs, drains them and
    // prints what ran; a second one exits at once.
    let stop = Arc::new(AtomicBool::new(false));
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, stop.clone())
            .context("installing the signal handler")?;
        signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
            .context("installing the signal handler")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing the signal handler")?;
    }

    let mut out = std::io::stdout().lock();
    if format == Format::Normal {
        out.write_all(report::starting(&jobs).as_bytes())?;
        out.flush()?;
    }
    let (run, teardown) = bench::engine::run(prepared, &status, &stop)?;
    let interrupted = match signal.load(Ordering::Relaxed) {
        0 => None,
        sig => {
            eprintln!("mqblk: terminated by signal {sig}: the report covers what ran until then");
            Some(sig)
        }
    };
    match format {
        Format::Normal => out.write_all(report::normal(&jobs, &run).as_bytes())?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report::json(&jobs, &run))?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    drop(out);
    let outcome = bench_outcome(&run);

    // Report first, then close. After an error or a signal the devices get
    // CLOSE_BOUND: a backend that died may never let go, and the process
    // exit returns what it holds.
    drop(_control);
    let ended_badly = interrupted.is_some() || outcome.is_err();
    let open = teardown.close(ended_badly.then_some(CLOSE_BOUND));
    let code = match (interrupted, &outcome) {
        (Some(sig), _) => Some(128 + sig as i32),
        (None, Err(_)) if !open.is_empty() => Some(1),
        _ => None,
    };
    if !open.is_empty() {
        eprintln!(
            "mqblk: {} did not close within {CLOSE_BOUND:?} (its backend does not answer); \
             exiting without waiting",
            open.join(", ")
        );
    }
    if let Some(code) = code {
        if let Err(e) = &outcome {
            eprintln!("mqblk: error: {e:#}");
        }
        let _ = std::io::stderr().flush();
        if open.is_empty() {
            std::process::exit(code);
        }
        // Threads of a backend that never answered still run: skip the
        // exit handlers (a C library's destructors would race them).
        // SAFETY: _exit ends the process at once; stdout and stderr were
        // flushed above, and nothing else needs a destructor to run.
        unsafe { libc::_exit(code) };
    }
    outcome
}

/// How long the devices may take to close after a run that ended on an
/// error or a signal.
const CLOSE_BOUND: std::time::Duration = std::time::Duration::from_millis(500);

/// The run's verdict: an error naming the failed I/Os or the mismatches.
fn bench_outcome(run: &bench::result::RunResult) -> Result<()> {
    let failed: Vec<String> = run
        .jobs
        .iter()
        .filter(|j| j.first_error.is_some() || j.read.errors + j.write.errors > 0)
        .map(|j| {
            format!(
                "{} (job {}): {} errors, first: {}{}",
                j.name,
                j.index,
                j.read.errors + j.write.errors + j.trim.errors,
                j.first_error.as_deref().unwrap_or("unknown"),
                if j.stopped_at.is_some() {
                    " (the job stopped there: continue_on_error=none)"
                } else {
                    ""
                }
            )
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "I/O errors in {} job(s): {}",
            failed.len(),
            failed.join("; ")
        );
    }
    let mismatched: Vec<String> = run
        .jobs
        .iter()
        .filter_map(|j| {
            let v = j.verify.as_ref().filter(|v| v.errors > 0)?;
            let first = v.mismatches.first().map(|m| m.to_string());
            Some(format!(
                "{} (job {}): {} mismatches, first: {}",
                j.name,
                j.index,
                v.errors,
                first.as_deref().unwrap_or("unknown")
            ))
        })
        .collect();
    if !mismatched.is_empty() {
        bail!(
            "verify failed in {} job(s): {}",
            mismatched.len(),
            mismatched.join("; ")
        );
    }
    let degraded: Vec<String> = run
        .layer
        .degraded
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| degraded::text(&d.leg, d.run_ms))
        .collect();
    if !degraded.is_empty() {
        bail!(
            "the run ended degraded: {} (the I/O went on, on the legs left; allow_degraded=1 \
             lets a run end degraded)",
            degraded.join("; ")
        );
    }
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn info_command(args: &InfoArgs) -> Result<()> {
    let Some(given) = args.spec.as_ref().or(args.device.as_ref()) else {
        bail!(
            "info needs a device: `mqblk info SPEC` or `mqblk info --device SPEC`, as in \
             `mqblk info null,size=1G` or `mqblk info file:/dev/sdb`"
        );
    };
    let spec = &device_spec(given);
    let dev = open_read_only(spec).map_err(|e| open_error(e, spec))?;
    // Partitions are named after the disk as Linux names them: after the
    // file's path for a file device (as sfdisk does), else the device.
    let disk = mqblk::driver_info(&dev)
        .into_iter()
        .find(|(k, _)| k == "path")
        .map_or_else(|| dev.name().to_string(), |(_, v)| v);
    let table = mqblk::part::read_table(&dev);
    if args.json {
        let mut v = serde_json::json!({
            "name": dev.name(),
            "spec": spec,
            "capacity_bytes": dev.capacity_bytes(),
            "logical_block_size": dev.logical_block_size(),
        });
        match &table {
            Ok(Some(t)) => v["partitiontable"] = partitions::sfdisk_json(t, &disk),
            Ok(None) => {}
            Err(e) => v["partitiontable_error"] = serde_json::json!(e.to_string()),
        }
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    let info = dev.info();
    let cfg = dev.config();
    let l = &info.limits;
    let f = &info.features;
    let cap = dev.capacity_bytes();
    let mut s = String::new();
    let mut line = |k: &str, v: String| {
        let kv = if v.is_empty() {
            k.to_string()
        } else {
            format!("{k:<28}{v}")
        };
        s.push_str(&kv);
        s.push('\n');
    };
    line("name:", dev.name().to_string());
    line("spec:", spec.clone());
    line(
        "capacity:",
        format!(
            "{cap} bytes ({}B), {} sectors",
            report::num2str(cap, 4, true),
            cap / 512
        ),
    );
    line("logical_block_size:", dev.logical_block_size().to_string());
    line("physical_block_size:", l.physical_block_size.to_string());
    line(
        "alignment:",
        format!(
            "offsets and lengths in {}-byte blocks; buffers at {}-byte addresses, or \
             they are bounce-copied{}",
            dev.logical_block_size(),
            l.dma_alignment + 1,
            if cfg.bounce {
                ""
            } else {
                " (bounce=0: refused instead)"
            }
        ),
    );
    line("queue_mode:", info.mode.name().to_string());
    line("hw_queues:", dev.nr_hw_queues().to_string());
    line(
        "queue_depth:",
        format!(
            "{} per hw queue (reserved {}, shared tags {})",
            cfg.queue_depth,
            cfg.reserved_tags,
            yes_no(cfg.shared_tags)
        ),
    );
    line(
        "plug:",
        format!(
            "{} (flush at {} requests)",
            if cfg.plug { "on" } else { "off" },
            cfg.plug_max
        ),
    );
    line("iostats:", if cfg.iostats { "1" } else { "0" }.to_string());
    line("io_timeout_ms:", cfg.timeout_ms.to_string());
    line("limits:", String::new());
    line("  max_sectors:", l.max_sectors.to_string());
    line("  max_segments:", l.max_segments.to_string());
    line("  max_segment_size:", l.max_segment_size.to_string());
    line(
        "  seg_boundary_mask:",
        format!("{:#x}", l.seg_boundary_mask),
    );
    line("  chunk_sectors:", l.chunk_sectors.to_string());
    line("  dma_alignment:", l.dma_alignment.to_string());
    line("  max_discard_sectors:", l.max_discard_sectors.to_string());
    line(
        "  max_write_zeroes_sectors:",
        l.max_write_zeroes_sectors.to_string(),
    );
    line("features:", String::new());
    line("  write_cache:", yes_no(f.write_cache).into());
    line("  fua:", yes_no(f.fua).into());
    line("  discard:", yes_no(f.discard).into());
    line("  write_zeroes:", yes_no(f.write_zeroes).into());
    let spec_ro = mqblk::spec::parse(spec).is_ok_and(|p| p.options.contains("ro"));
    line(
        "  read_only:",
        if spec_ro {
            yes_no(f.read_only || cfg.read_only).to_string()
        } else {
            "opened read-only by info (info never asks for write access)".to_string()
        },
    );
    line("  rotational:", yes_no(f.rotational).into());
    let driver = mqblk::driver_info(&dev);
    if !driver.is_empty() {
        line("driver:", String::new());
        for (k, v) in driver {
            line(&format!("  {k}:"), v);
        }
    }
    match &table {
        Ok(Some(t)) => {
            line("partitions:", String::new());
            for l in partitions::text(t, &disk) {
                line(&format!("  {l}"), String::new());
            }
        }
        Ok(None) => line("partitions:", "none (no partition table)".into()),
        Err(e) => line("partitions:", format!("unreadable table: {e}")),
    }
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_split_dm_table_is_put_back_together_and_quoted() {
        let args = |s: &str| -> Vec<String> { s.split(' ').map(str::to_string).collect() };
        assert_eq!(
            super::split_dm_table(&args(
                "mqblk bench --device dm-table:0 8 linear ram,size=1M 0 --runtime=1"
            ))
            .as_deref(),
            Some("--device 'dm-table:0 8 linear ram,size=1M 0'")
        );
        assert_eq!(
            super::split_dm_table(&args("mqblk info --device=dm-table:0 8 zero")).as_deref(),
            Some("--device='dm-table:0 8 zero'")
        );
        assert_eq!(
            super::split_dm_table(&args("mqblk info dm-table:0 8 zero")).as_deref(),
            Some("'dm-table:0 8 zero'")
        );
        assert_eq!(super::split_dm_table(&args("mqblk info null x")), None);
        let quoted = vec![
            "mqblk".to_string(),
            "bench".into(),
            "--device".into(),
            "dm-table:0 8 zero".into(),
            "job.fio".into(),
        ];
        assert_eq!(super::split_dm_table(&quoted), None);
    }

    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn bench(argv: &[&str]) -> BenchArgs {
        let mut full = vec!["mqblk".to_string(), "bench".to_string()];
        full.extend(argv.iter().map(|a| a.to_string()));
        match try_parse_from(full).unwrap().command {
            Command::Bench(b) => *b,
            _ => unreachable!(),
        }
    }

    #[test]
    fn both_value_forms_and_flags() {
        let b = bench(&[
            "--bs=8k",
            "--iodepth",
            "4",
            "--time_based",
            "--runtime=1",
            "jobs.fio",
            "--device",
            "null",
            "--device=null,size=1G",
            "--bs=16k",
        ]);
        assert_eq!(b.bs.as_deref(), Some("16k"));
        assert_eq!(b.iodepth.as_deref(), Some("4"));
        assert_eq!(b.time_based.as_deref(), Some("1"));
        assert_eq!(b.jobfile, Some(PathBuf::from("jobs.fio")));
        assert_eq!(b.device, vec!["null", "null,size=1G"]);
        let o = b.job_options().unwrap();
        assert_eq!(o.bs, Some(16384));
        assert_eq!(o.time_based, Some(true));
        assert_eq!(o.devices.as_ref().map(Vec::len), Some(2));
        let b = bench(&[
            "--time_based=0",
            "--queue_mode=global-lock",
            "--hw-queues",
            "2",
        ]);
        let o = b.job_options().unwrap();
        assert_eq!(o.time_based, Some(false));
        assert_eq!(o.queue_mode.as_deref(), Some("global-lock"));
        assert_eq!(o.hw_queues, Some(2));
    }

    #[test]
    fn fio_file_flags_set_the_file_devices() {
        let o = bench(&[
            "--filename=/data/a.img",
            "--device=null",
            "--direct=0",
            "--ioengine=psync",
        ])
        .job_options()
        .unwrap();
        let job = o.build("job0").unwrap();
        assert_eq!(
            job.devices,
            vec!["null", "file:/data/a.img,direct=0,engine=psync"]
        );
        let e = bench(&["--direct=1"])
            .job_options()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--direct applies to file devices"), "{e}");
    }

    #[test]
    fn job_file_keys_without_a_flag_are_taken_from_the_command_line() {
        let b = bench(&[
            "--slat_percentiles",
            "--write_lat_log=lat",
            "--log_avg_msec=0",
            "--bs=8k",
            "jobs.fio",
            "--log_offset",
        ]);
        // Flags and the job file stay clap's.
        assert_eq!(b.bs.as_deref(), Some("8k"));
        assert_eq!(b.jobfile, Some(PathBuf::from("jobs.fio")));
        let o = b.job_options().unwrap();
        assert_eq!(o.slat_percentiles, Some(true));
        assert_eq!(o.write_lat_log.as_deref(), Some("lat"));
        assert_eq!(o.log_avg_msec, Some(0));
        assert_eq!(o.log_offset, Some(true));
        let e = bench(&["--log_hist_coarseness=99"])
            .job_options()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--log_hist_coarseness: "), "{e}");
        // Not a key: clap refuses it.
        let args = ["mqblk", "bench", "--log_offsets=1"].map(String::from);
        assert!(try_parse_from(args.to_vec()).is_err());
    }

    #[test]
    fn bad_values_name_the_option() {
        for (arg, flag) in [
            ("--bs=0", "--bs"),
            ("--iodepth=0", "--iodepth"),
            ("--rw=foo", "--rw"),
            ("--rwmixread=101", "--rwmixread"),
            ("--size=12q", "--size"),
            ("--plug=maybe", "--plug"),
            ("--queue-mode=none", "--queue-mode"),
            ("--device=nu ll", "--device"),
        ] {
            let e = bench(&[arg]).job_options().unwrap_err().to_string();
            assert!(e.starts_with(flag), "{arg}: {e}");
            assert!(e.contains("expected"), "{arg}: {e}");
        }
    }
}
