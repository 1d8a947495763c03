//! How fast and in what order jobs run: rates, flows, the latency target,
//! priorities and cgroups, start and stop, steady state.

use std::time::Duration;

use mqblk::spec::parse_size;

use crate::job::ExitWhat;
use crate::steadystate::SteadySpec;

use super::entry::{alias, key, on_off, put, Entry, ON_OFF};
use crate::options::values::{int_in, BadValue, Value};

/// The keys of this group, in the order they are listed.
pub(super) const KEYS: &[Entry] = &[
    key(
        "rate",
        "bytes per second such as 500m, or READ,WRITE (mqblk paces their sum)",
        |o, v| {
            o.rate_bps = rate(v, |part| parse_size(part).map_err(|why| v.bad_because(why)))?;
            Ok(())
        },
    ),
    key(
        "rate_iops",
        "I/Os per second, or READ,WRITE (mqblk paces their sum)",
        |o, v| {
            o.rate_iops = rate(v, |part| int_in(part, 0..=u64::MAX >> 8, v.expected))?;
            Ok(())
        },
    ),
    key("rate_process", "linear or poisson", |o, v| match v.text {
        "linear" => put(&mut o.rate_poisson, Ok(false)),
        "poisson" => put(&mut o.rate_poisson, Ok(true)),
        _ => Err(v.bad()),
    }),
    key(
        "rate_min",
        "bytes per second such as 1m, or READ,WRITE (their sum): a job below it fails",
        |o, v| {
            o.rate_min_bps = rate(v, |part| parse_size(part).map_err(|why| v.bad_because(why)))?;
            Ok(())
        },
    ),
    alias("ratemin", "rate_min"),
    key(
        "rate_iops_min",
        "I/Os per second, or READ,WRITE (their sum): a job below it fails",
        |o, v| {
            o.rate_min_iops = rate(v, |part| int_in(part, 0..=u64::MAX >> 8, v.expected))?;
            Ok(())
        },
    ),
    key(
        "rate_cycle",
        "milliseconds over which rate_min is checked (default 1000)",
        |o, v| {
            let ms: u64 = v.int(1..=3_600_000)?;
            put(&mut o.rate_cycle, Ok(Duration::from_millis(ms)))
        },
    ),
    alias("ratecycle", "rate_cycle"),
    key(
        "flow",
        "a weight from 0 to 1000: jobs of one flow_id keep their I/O in these proportions",
        |o, v| put(&mut o.flow, v.int(0..=crate::job::FLOW_WEIGHT_MAX)),
    ),
    key(
        "flow_id",
        "an integer: the flow a job's flow= weighs in",
        |o, v| put(&mut o.flow_id, v.int(0..=u32::MAX)),
    ),
    key(
        "flow_sleep",
        "a wait when a flow holds the job back, up to 1s: microseconds or with a suffix",
        |o, v| {
            let d = v.duration_us()?;
            if d > Duration::from_secs(1) {
                return Err(v.bad());
            }
            put(&mut o.flow_sleep, Ok(d))
        },
    ),
    key(
        "latency_target",
        "a latency such as 500ms (a bare number is microseconds): the queue depth is searched \
         for the deepest that meets it",
        |o, v| put(&mut o.latency_target, v.duration_us()),
    ),
    key(
        "latency_window",
        "a time such as 5s (a bare number is microseconds): each depth's trial",
        |o, v| put(&mut o.latency_window, v.duration_us()),
    ),
    key(
        "latency_percentile",
        "a percentage (0 to 100, decimals allowed) of I/Os that must meet latency_target",
        |o, v| put(&mut o.latency_percentile, v.float(0.0..=100.0)),
    ),
    on_off("latency_run", ON_OFF, |o, v| {
        put(&mut o.latency_run, v.bool())
    }),
    key(
        "max_latency",
        "a latency such as 10ms (a bare number is microseconds): a slower I/O fails the job",
        |o, v| put(&mut o.max_latency, v.duration_us()),
    ),
    key(
        "cgroup",
        "a group name of 1 to 64 letters, digits, '-', '_' or '.' (jobs naming one group \
         share its weight and limits)",
        |o, v| {
            let t = v.text;
            let ok = !t.is_empty()
                && t.len() <= 64
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !ok {
                return Err(v.bad());
            }
            put(&mut o.cgroup, Ok(t.to_string()))
        },
    ),
    key(
        "cgroup_weight",
        "a weight from 1 to 1000 (default 100)",
        |o, v| put(&mut o.cgroup_weight, v.int(1..=1000)),
    ),
    key("prioclass", "rt, be or idle (or fio's 1, 2, 3)", |o, v| {
        let class = mqblk::IoPrioClass::parse(v.text).ok_or_else(|| v.bad());
        put(&mut o.prioclass, class)
    }),
    key(
        "prio",
        "a level from 0 (highest) to 7 within the class",
        |o, v| put(&mut o.prio, v.int(0..=7)),
    ),
    key(
        "startdelay",
        "a delay of up to 1h, seconds unless suffixed (us, ms, s, m)",
        |o, v| {
            let d = v.duration()?;
            if d > Duration::from_secs(3600) {
                return Err(v.bad());
            }
            put(&mut o.startdelay, Ok(d))
        },
    ),
    on_off("stonewall", ON_OFF, |o, v| put(&mut o.stonewall, v.bool())),
    key("wait_for", "the name of an earlier job", |o, v| {
        // Every job before this one finishes first (a stonewall), which
        // includes the one named.
        v.non_empty()?;
        put(&mut o.stonewall, Ok(true))
    }),
    on_off("new_group", ON_OFF, |o, v| put(&mut o.new_group, v.bool())),
    on_off("exitall", ON_OFF, |o, v| put(&mut o.exitall, v.bool())),
    key(
        "exit_what",
        "group (the job's reporting group), stonewall (every running job) or all (every \
         job): whom exitall ends",
        |o, v| {
            put(
                &mut o.exit_what,
                ExitWhat::parse(v.text).ok_or_else(|| v.bad()),
            )
        },
    ),
    key(
        "steadystate",
        "iops, iops_slope, bw or bw_slope, a colon and a limit (N% of the mean, or a number): \
         such as iops:10% or bw_slope:1%",
        |o, v| {
            let s = SteadySpec::parse(v.text).map_err(|why| v.bad_because(why));
            put(&mut o.steadystate, s)
        },
    ),
    alias("ss", "steadystate"),
    key(
        "steadystate_duration",
        "the steady-state window, whole seconds such as 30s (a bare number is microseconds, \
         as fio's)",
        |o, v| put(&mut o.ss_dur, v.duration_us()),
    ),
    alias("ss_dur", "steadystate_duration"),
    key(
        "steadystate_ramp_time",
        "a time such as 10s before steady state is judged (a bare number is microseconds)",
        |o, v| put(&mut o.ss_ramp, v.duration_us()),
    ),
    alias("ss_ramp", "steadystate_ramp_time"),
];

/// fio's `READ,WRITE` rates, each parsed by `part`: mqblk paces their sum;
/// `None` for no limit (a sum of 0).
fn rate(
    v: &Value<'_>,
    part: impl Fn(&str) -> Result<u64, BadValue>,
) -> Result<Option<u64>, BadValue> {
    let mut total = 0u64;
    for p in v.text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        total = total.saturating_add(part(p)?);
    }
    Ok((total > 0).then_some(total))
}
