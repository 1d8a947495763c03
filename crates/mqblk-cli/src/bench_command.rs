//! `mqblk bench`: the jobs from the command line and job files, the run,
//! its report, and the exit status.

use std::io::Write;

use anyhow::{bail, Result};

use mqblk_bench::report::{self, Format};

use crate::cli::BenchArgs;

/// `stop`: the signal handlers, installed first thing in `main` (as fio:
/// the first SIGINT or SIGTERM stops the jobs, drains them and prints what
/// ran; a second one exits at once). A signal before the devices open is
/// answered, in one line, when the first opens.
pub(crate) fn bench_command(args: &BenchArgs, stop: mqblk_bench::stop::Stop) -> Result<()> {
    let cli = args.job_options()?;
    // What a job file is told of a value mqblk takes in its own way
    // (another checksum for verify=, the generator of random_generator=),
    // the command line is told too.
    let given = args
        .verify
        .as_ref()
        .map(|v| ("verify", Some(v)))
        .into_iter()
        .chain(args.job_keys.iter().map(|(k, v)| (k.as_str(), v.as_ref())));
    for (key, value) in given {
        let Some(value) = value else { continue };
        if let Some(note) = mqblk_bench::options::value_note(key, value) {
            eprintln!("mqblk: note: --{key}={value}: {note}");
        }
    }
    // --ioengine=libaio (or posixaio) is told what a job file's line is.
    if let Some(engine) = &args.ioengine {
        if let Ok(None) = mqblk_bench::options::file_engine(engine) {
            eprintln!(
                "mqblk: note: --ioengine={engine}: {}",
                mqblk_bench::options::ASYNC_ENGINE_NOTE
            );
        }
    }
    let jobs = match &args.jobfile {
        Some(path) => {
            if cli.name.is_some() {
                bail!("--name names the command-line job; a job file names its jobs by their [sections]");
            }
            mqblk_bench::jobfile::load(path, &cli, &args.section)?
        }
        None => vec![cli.build("job0").map_err(anyhow::Error::msg)?],
    };
    mqblk_bench::options::check_run(&jobs).map_err(anyhow::Error::msg)?;
    for note in mqblk_bench::layout::lay_out(&jobs)? {
        eprintln!("mqblk: note: {note}");
    }
    let format = args.output_format;
    let interval = args
        .status_interval
        .as_deref()
        .map(mqblk_bench::options::parse_duration)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--status-interval: {e}"))?
        .filter(|d| !d.is_zero());
    if interval.is_some_and(|d| d < std::time::Duration::from_millis(10)) {
        bail!("--status-interval: expected at least 10ms between reports");
    }
    let status = mqblk_bench::status::StatusOptions {
        eta: args.eta,
        interval,
    };
    // Everything that can fail before the run fails here, before the banner.
    let prepared = mqblk_bench::engine::prepare(&jobs, args.allow_overcommit, Some(&stop))?;
    let _control = match &args.control {
        Some(path) => Some(crate::qos::Control::start(path, prepared.devices())?),
        None => None,
    };

    let mut out = std::io::stdout().lock();
    if format == Format::Normal {
        out.write_all(report::starting(&jobs).as_bytes())?;
        out.flush()?;
    }
    let (run, teardown) = mqblk_bench::engine::run(prepared, &status, stop.flag())?;
    let interrupted = stop.signal();
    if let Some(sig) = interrupted {
        eprintln!("mqblk: terminated by signal {sig}: the report covers what ran until then");
    }
    match format {
        Format::Normal => out.write_all(report::normal(&jobs, &run).as_bytes())?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report::json(&jobs, &run))?;
            out.write_all(b"\n")?;
        }
        Format::JsonPlus => {
            serde_json::to_writer_pretty(&mut out, &report::json_plus(&jobs, &run))?;
            out.write_all(b"\n")?;
        }
        Format::Terse => out.write_all(report::terse(&jobs, &run).as_bytes())?,
    }
    out.flush()?;
    drop(out);
    let outcome = run.verdict();

    // Report first, then close. After an error or a signal the devices get
    // CLOSE_BOUND: a backend that died may never let go, and the process
    // exit returns what it holds.
    drop(_control);
    let ended_badly = interrupted.is_some() || outcome.is_err();
    let open = teardown.close(ended_badly.then_some(CLOSE_BOUND));
    let code = match (interrupted, &outcome) {
        (Some(sig), _) => Some(128 + sig),
        (None, Err(_)) if !open.is_empty() => Some(1),
        _ => None,
    };
    if !open.is_empty() {
        eprintln!(
            "mqblk: {} did not close within {CLOSE_BOUND:?}; exiting without waiting",
            open.iter()
                .map(|o| o.to_string())
                .collect::<Vec<_>>()
                .join(", ")
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
pub(crate) const CLOSE_BOUND: std::time::Duration = std::time::Duration::from_millis(500);
