//! The command line: its subcommands and their options (clap), fio-style
//! option spellings, and a device-mapper table split by the shell put back
//! together.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};

use crate::open::device_spec;
use mqblk_bench::options::JobOptions;
use mqblk_bench::report::Format;

#[derive(Parser, Debug)]
#[command(
    name = "mqblk",
    version,
    about = "A user-space multi-queue block layer"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
    Serve(Box<crate::serve::ServeArgs>),
    /// Change groups, limits and the scheduler of a running serve or bench
    /// (started with --control=SOCKET), or trace it: `group NAME
    /// riops=5000 weight=300`, `create NAME weight=300`, `device rbps=50m`,
    /// `scheduler mq-deadline [KEY=VALUE...]`, `trace start DIR`, `trace
    /// stop`, or `show`.
    Qos(QosArgs),
    /// Stacked devices of a running serve or bench (started with
    /// --control=SOCKET): `replace DEVICE LEG NEWSPEC` rebuilds a mirror
    /// leg onto a new device online, showing its progress.
    Dm(DmArgs),
    /// Rerun one of the seeds' experiments: raw JSON of every point, a CSV,
    /// a markdown table with the seed's figure beside ours, and the plot
    /// (SVG and PNG). `mqblk repro list` names them.
    Repro(crate::repro::ReproArgs),
    /// Plot bench or fio JSON reports: IOPS or bandwidth bars per job,
    /// latency percentile curves and the latency histogram (SVG and PNG).
    Plot(crate::plot::PlotArgs),
}

#[derive(Args, Debug)]
pub(crate) struct QosArgs {
    /// The control socket of the running serve or bench.
    #[arg(long, value_name = "SOCKET")]
    pub(crate) control: PathBuf,
    /// The request: group NAME KEY=VALUE... (weight, prioclass, prio,
    /// riops, wiops, rbps, wbps), create NAME KEY=VALUE..., device
    /// KEY=VALUE... (the device's own io.max), scheduler NAME [KEY=VALUE...]
    /// (none, mq-deadline, kyber, bfq and their tunables; the queues are
    /// drained first), trace start DIR, trace stop, or show (groups,
    /// limits, scheduler and degraded mirror legs, as JSON).
    #[arg(required = true, value_name = "REQUEST")]
    pub(crate) request: Vec<String>,
}

#[derive(Args, Debug)]
pub(crate) struct DmArgs {
    #[command(subcommand)]
    pub(crate) command: DmCommand,
}

#[derive(Subcommand, Debug)]
pub(crate) enum DmCommand {
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
pub(crate) struct BenchArgs {
    /// A fio job file (INI) with [global] and job sections.
    #[arg(value_name = "JOBFILE")]
    pub(crate) jobfile: Option<PathBuf>,

    /// Run only this job section of the job file (repeatable), as fio's
    /// --section; [global] sections always apply.
    #[arg(long, value_name = "NAME")]
    pub(crate) section: Vec<String>,

    /// Name of the command-line job (default job0).
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,

    /// read, write, randread, randwrite, rw (readwrite), randrw.
    #[arg(long, value_name = "MODE")]
    pub(crate) rw: Option<String>,

    /// Block size, 512 to 64M, a multiple of 512 (default 4k).
    #[arg(long, value_name = "SIZE")]
    pub(crate) bs: Option<String>,

    /// I/Os in flight per job, 1 to 65536 (default 1).
    #[arg(long, value_name = "N")]
    pub(crate) iodepth: Option<String>,

    /// Copies of the job, each a thread with its own context (default 1).
    #[arg(long, value_name = "N")]
    pub(crate) numjobs: Option<String>,

    /// Bytes of the device to cover (default: the whole device).
    #[arg(long, value_name = "SIZE")]
    pub(crate) size: Option<String>,

    /// Run time: seconds, or with a suffix us, ms, s, m, h (0: no limit).
    #[arg(long, value_name = "TIME")]
    pub(crate) runtime: Option<String>,

    /// Run for the whole runtime, wrapping around the size.
    #[arg(
        long = "time_based",
        alias = "time-based",
        value_name = "0|1",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1"
    )]
    pub(crate) time_based: Option<String>,

    /// Run this long before measuring.
    #[arg(long = "ramp_time", alias = "ramp-time", value_name = "TIME")]
    pub(crate) ramp_time: Option<String>,

    /// Percentage of reads in rw and randrw (default 50).
    #[arg(long, value_name = "PERCENT")]
    pub(crate) rwmixread: Option<String>,

    /// Seed of the random offsets.
    #[arg(long, value_name = "N")]
    pub(crate) randseed: Option<String>,

    /// Report format.
    #[arg(
        long = "output-format",
        alias = "output_format",
        value_enum,
        default_value = "normal"
    )]
    pub(crate) output_format: Format,

    /// Device spec, repeatable: job i uses device i mod n (default null).
    /// A bare path is read as file:PATH.
    #[arg(long = "device", value_name = "SPEC")]
    pub(crate) device: Vec<String>,

    /// fio's --filename: a file or block device, the same as
    /// --device file:PATH (repeatable).
    #[arg(long = "filename", value_name = "PATH")]
    pub(crate) filename: Vec<String>,

    /// fio's --direct: O_DIRECT (1, mqblk's default) or the page cache (0)
    /// for every file device; the same as direct= in a file: spec.
    #[arg(long = "direct", value_name = "0|1")]
    pub(crate) direct: Option<String>,

    /// fio's --ioengine: io_uring or psync pick the file device's engine
    /// (engine= in a file: spec); mqblk itself is the engine otherwise.
    #[arg(long = "ioengine", value_name = "ENGINE")]
    pub(crate) ioengine: Option<String>,

    /// fio's --thread: accepted and ignored (jobs are always threads).
    #[arg(
        long = "thread",
        hide = true,
        value_name = "0|1",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1"
    )]
    pub(crate) ignored: Vec<String>,

    /// mq, device-lock or global-lock.
    #[arg(long = "queue-mode", alias = "queue_mode", value_name = "MODE")]
    pub(crate) queue_mode: Option<String>,

    /// Hardware queues of every device, 1 to 1024.
    #[arg(long = "hw-queues", alias = "hw_queues", value_name = "N")]
    pub(crate) hw_queues: Option<String>,

    /// Plugging: on or off (1/0).
    #[arg(long, value_name = "on|off")]
    pub(crate) plug: Option<String>,

    /// Per-I/O accounting and latency: 1 or 0 (default 1).
    #[arg(long, value_name = "0|1")]
    pub(crate) iostats: Option<String>,

    /// Write a checked header into every block and check it on read-back:
    /// crc32c, md5, sha256, or none.
    #[arg(long, value_name = "crc32c|md5|sha256|none")]
    pub(crate) verify: Option<String>,

    /// With --verify, read back everything written after the run: 1 or 0
    /// (default 1).
    #[arg(long = "do_verify", alias = "do-verify", value_name = "0|1")]
    pub(crate) do_verify: Option<String>,

    /// With --verify, stop a job at its first mismatch: 1 or 0 (default 0).
    #[arg(long = "verify_fatal", alias = "verify-fatal", value_name = "0|1")]
    pub(crate) verify_fatal: Option<String>,

    /// Which failed I/Os a job goes on past: none (default: a job stops at
    /// its first I/O error, as fio's), read, write, io, verify or all.
    #[arg(
        long = "continue_on_error",
        alias = "continue-on-error",
        value_name = "none|read|write|io|verify|all"
    )]
    pub(crate) continue_on_error: Option<String>,

    /// Bytes each job transfers before it ends (fio's io_size; default: --size).
    #[arg(long = "io_size", alias = "io_limit", value_name = "BYTES")]
    pub(crate) io_size: Option<String>,

    /// I/Os each job issues before it ends (fio's number_ios).
    #[arg(long = "number_ios", value_name = "N")]
    pub(crate) number_ios: Option<String>,

    /// Flush the device after every N writes (fio's fsync=N; 0: never).
    #[arg(long = "fsync", value_name = "N")]
    pub(crate) fsync: Option<String>,

    /// With --verify, make N percent of the writes discards of the block.
    #[arg(long = "trim_percentage", value_name = "N")]
    pub(crate) trim_percentage: Option<String>,

    /// With --trim_percentage, a discarded block must read back as zeros:
    /// 1 or 0 (default 0: zeros or what it held before).
    #[arg(long = "trim_verify_zero", value_name = "0|1")]
    pub(crate) trim_verify_zero: Option<String>,

    /// With --verify, make N percent of the writes write-zeroes of the
    /// block (read back as zeros).
    #[arg(long = "write_zeroes_percentage", value_name = "N")]
    pub(crate) write_zeroes_percentage: Option<String>,

    /// Cut each I/O's buffer into N non-contiguous pieces (readv/writev-style
    /// bios), 1 to 256.
    #[arg(long, value_name = "N")]
    pub(crate) segments: Option<String>,

    /// Keep DIR/diskstats (read it with `iostat -x -f DIR -p ALL 1`) and
    /// DIR/mqblk.json (read it with `mqblk stat DIR`) up to date.
    #[arg(long = "stats-dir", alias = "stats_dir", value_name = "DIR")]
    pub(crate) stats_dir: Option<String>,

    /// Pause after each completion before the next I/O (fio's thinktime):
    /// microseconds, or with a suffix (us, ms, s).
    #[arg(long, value_name = "TIME")]
    pub(crate) thinktime: Option<String>,

    /// The device group the job's context joins (fio's cgroup=), created
    /// with --cgroup_weight if missing; see `mqblk qos` for changing it live.
    #[arg(long, value_name = "NAME")]
    pub(crate) cgroup: Option<String>,

    /// The group's weight, 1 to 1000 (fio's cgroup_weight=; default 100).
    #[arg(long = "cgroup_weight", alias = "cgroup-weight", value_name = "N")]
    pub(crate) cgroup_weight: Option<String>,

    /// The job's I/O priority class: rt, be or idle (fio's prioclass=).
    #[arg(long, value_name = "CLASS")]
    pub(crate) prioclass: Option<String>,

    /// The level within the class, 0 (highest) to 7 (fio's prio=).
    #[arg(long, value_name = "N")]
    pub(crate) prio: Option<String>,

    /// At most this many I/Os per second per job (fio's rate_iops=).
    #[arg(long = "rate_iops", alias = "rate-iops", value_name = "N")]
    pub(crate) rate_iops: Option<String>,

    /// At most this many bytes per second per job (fio's rate=).
    #[arg(long, value_name = "BYTES")]
    pub(crate) rate: Option<String>,

    /// The other job-file keys given as `--KEY=VALUE` (or a bare `--KEY`),
    /// taken out of the arguments before clap sees them
    /// ([`split_job_keys`]).
    #[arg(skip)]
    pub(crate) job_keys: Vec<(String, Option<String>)>,

    /// Listen on this unix socket for group and limit changes while the
    /// run goes on (`mqblk qos --control=SOCKET ...`).
    #[arg(long, value_name = "SOCKET")]
    pub(crate) control: Option<PathBuf>,

    /// Run even when what the jobs pin (iodepth x numjobs x bs of I/O
    /// buffers, their bios, and the verify records) is more than the
    /// memory available (MemAvailable, the cgroup's memory limit,
    /// RLIMIT_AS); without it such a run is refused before it allocates.
    #[arg(long = "allow-overcommit", alias = "allow_overcommit")]
    pub(crate) allow_overcommit: bool,

    /// The status line on stderr (elapsed, eta, IOPS and bandwidth per
    /// direction, p99): auto shows it when stdout and stderr are terminals.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub(crate) eta: mqblk_bench::status::Eta,

    /// Print a JSON report to stdout every TIME while running (seconds
    /// unless suffixed): each job's IOPS and bandwidth per direction over
    /// the interval, its I/Os so far, and its p99 so far, one line each.
    #[arg(
        long = "status-interval",
        alias = "status_interval",
        value_name = "TIME"
    )]
    pub(crate) status_interval: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct StatArgs {
    /// The directory a bench writes with --stats-dir (or give it with
    /// --stats-dir).
    #[arg(value_name = "DIR")]
    pub(crate) dir: Option<std::path::PathBuf>,
    /// The same directory, named as bench names it.
    #[arg(
        long = "stats-dir",
        alias = "stats_dir",
        value_name = "DIR",
        conflicts_with = "dir"
    )]
    pub(crate) stats_dir: Option<std::path::PathBuf>,
    /// Print rates every INTERVAL (seconds unless suffixed) instead of the
    /// run's averages.
    #[arg(long, value_name = "INTERVAL")]
    pub(crate) interval: Option<String>,
    /// With --interval, stop after N reports.
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,
}

#[derive(Args, Debug)]
pub(crate) struct InfoArgs {
    /// Device spec, such as null,size=1G or file:/dev/sdb (a bare path is
    /// read as file:PATH).
    #[arg(value_name = "SPEC", conflicts_with = "device")]
    pub(crate) spec: Option<String>,
    /// The same, as an option.
    #[arg(long = "device", value_name = "SPEC")]
    pub(crate) device: Option<String>,
    /// Print JSON: the device, and its partition table shaped like
    /// `sfdisk --json`'s `partitiontable` object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `mqblk bench` takes every job-file key on its command line, as fio
/// does. The keys without a flag of their own are taken out of `args`
/// (`--KEY=VALUE`, or a bare `--KEY`, up to a `--`) for
/// [`JobOptions::set`], which checks them as it checks a job file's lines.
pub(crate) fn split_job_keys(args: Vec<String>) -> (Vec<String>, Vec<(String, Option<String>)>) {
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
            .filter(|(k, _)| {
                !flags.iter().any(|f| f == k) && mqblk_bench::options::KEYS.contains(k)
            })
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)));
        match key {
            Some(k) => keys.push(k),
            None => kept.push(arg),
        }
    }
    (kept, keys)
}

/// Parse `args` (the program name first), with [`split_job_keys`].
pub(crate) fn try_parse_from(args: Vec<String>) -> Result<Cli, clap::Error> {
    let (args, keys) = split_job_keys(args);
    let mut cli = Cli::try_parse_from(args)?;
    if let Command::Bench(b) = &mut cli.command {
        b.job_keys = keys;
    }
    Ok(cli)
}

/// The hint for a `dm-table:` spec given unquoted.
pub(crate) const SPLIT_DM_TABLE: &str =
    "a dm-table spec holds spaces, and the shell split it there: quote it whole";

/// A `dm-table:` spec the shell split at its spaces (it was not quoted),
/// put back together and quoted: the argument holding `dm-table:` and the
/// words after it up to the next option.
pub(crate) fn split_dm_table(args: &[String]) -> Option<String> {
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
pub(crate) fn parse_cli() -> Cli {
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
        longs.extend(mqblk_bench::options::KEYS);
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

impl BenchArgs {
    /// The command line's options as one layer, validated by the same
    /// setter as job files; errors name the option as it was written.
    pub(crate) fn job_options(&self) -> Result<JobOptions> {
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
            o.file_engine = mqblk_bench::options::file_engine(engine)
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

#[cfg(test)]
mod tests;
