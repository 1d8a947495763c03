//! `mqblk`: the command-line front of the mqblk block layer.
//!
//! - `mqblk bench`: fio's option names (and fio job files), fio-shaped
//!   output, plus the layer's own figures; see [`mqblk_bench`].
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
//! The binary counts heap allocations (see `mqblk_bench::alloc_count`)
//! so that the bench can report allocations per I/O.
//!
//! The command line is parsed in [`cli`]; each subcommand runs from its
//! own module ([`bench_command`], [`info`], [`stat`], [`serve`], [`qos`],
//! [`repro`], [`plot`]), and `main` only dispatches and reports errors.

mod bench_command;
mod cli;
mod degraded;
mod info;
mod open;
mod partitions;
mod plot;
mod qos;
mod repro;
mod serve;
mod stat;

use anyhow::{Context as _, Result};

use bench_command::bench_command;
use cli::{parse_cli, split_dm_table, Command, DmCommand, StatArgs, SPLIT_DM_TABLE};
use info::info_command;

#[global_allocator]
static GLOBAL: mqblk_bench::alloc_count::CountingAlloc = mqblk_bench::alloc_count::CountingAlloc;

/// Before anything else of the process runs (`.preinit_array` comes
/// before the shared libraries' constructors, librados' among them, which
/// take tens of milliseconds), SIGINT and SIGTERM are blocked: one that
/// comes then waits, pending, until `main` has its handlers in place
/// (`mqblk_bench::stop::Stop::install`) or has said it runs no bench
/// (`mqblk_bench::stop::unblock`), instead of ending the process without a
/// word. Only the kernel's exec and the loader's relocations (a few
/// milliseconds) come before it. The static is the binary's own: one in
/// the library crate would be dropped by the linker, nothing naming it.
#[used]
#[link_section = ".preinit_array"]
static BLOCK_EARLY: extern "C" fn() = mqblk_bench::stop::block_stop_signals;

fn stat_command(args: &StatArgs) -> Result<()> {
    let interval = args
        .interval
        .as_deref()
        .map(mqblk_bench::options::parse_duration)
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

fn main() -> std::process::ExitCode {
    // bench's signal handlers come first, before the arguments are parsed:
    // a signal at any moment of a bench is answered (mqblk_bench::stop).
    // Until then SIGINT and SIGTERM are blocked since the process began.
    let stop = match std::env::args().nth(1).as_deref() {
        Some("bench") => match mqblk_bench::stop::Stop::install() {
            Ok(stop) => Some(stop),
            Err(e) => {
                mqblk_bench::stop::unblock();
                eprintln!("mqblk: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
        },
        _ => {
            mqblk_bench::stop::unblock();
            None
        }
    };
    let cli = parse_cli();
    let result = match cli.command {
        Command::Bench(args) => match stop {
            Some(stop) => bench_command(&args, stop),
            None => mqblk_bench::stop::Stop::install().and_then(|stop| bench_command(&args, stop)),
        },
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
