//! Run-time QoS control: a unix socket that a running `mqblk serve` or
//! `mqblk bench` listens on (`--control=SOCKET`), and the `mqblk qos`
//! command that talks to it.
//!
//! One request per connection, one line each way:
//!
//! ```text
//! group NAME KEY=VALUE...    change a group (weight, prioclass, prio,
//!                            riops, wiops, rbps, wbps) on every device
//! create NAME KEY=VALUE...   create a group with those settings
//! device KEY=VALUE...        change the devices' own io.max
//! scheduler NAME [KEY=VALUE...]  switch every hardware queue's scheduler
//!                            (none, mq-deadline, kyber, bfq, with their
//!                            tunables): a freeze drains the queues first,
//!                            so no request is lost or doubled
//! show                       the groups and limits, and any mirror leg
//!                            out of service (`degraded`), as JSON
//! trace start DIR            write blktrace files of every device (and
//!                            the devices below) into DIR
//! trace stop                 stop: every file is complete on the answer
//! dm replace DEVICE LEG SPEC rebuild mirror leg LEG of stacked device
//!                            DEVICE onto a new device SPEC, online; the
//!                            answer is preceded by `progress ...` lines
//! ```
//!
//! The answer is `ok ...` or `error: ...`. A change is a few atomic stores:
//! the next bio of every context sees it, with nothing frozen.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context as _, Result};
use mqblk::throttle::IoMaxLimits;
use mqblk::{Device, GroupConfig, IoPrio, IoPrioClass};

/// A listening control socket; dropping it stops the listener and removes
/// the socket.
pub struct Control {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Control {
    /// Listen on `path` for changes to `devices`.
    pub fn start(path: &Path, devices: Vec<Device>) -> Result<Control> {
        if path.exists() {
            // A stale socket from a run that died; anything else stays.
            let meta = std::fs::symlink_metadata(path)?;
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() || UnixStream::connect(path).is_ok() {
                bail!(
                    "control socket {}: the path exists and is not a stale socket",
                    path.display()
                );
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("control socket {}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mqblk-control".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(c) = conn {
                        serve_one(c, &devices);
                    }
                }
            })?;
        Ok(Control {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve_one(c: UnixStream, devices: &[Device]) {
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let mut line = String::new();
    let mut r = BufReader::new(std::io::Read::take(&c, 4096));
    if r.read_line(&mut line).is_err() {
        return;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    if let ["dm", "replace", dev, leg, spec] = words.as_slice() {
        let answer = match dm_replace(devices, dev, leg, spec, &mut |p| {
            let _ = writeln!(
                &c,
                "progress {}/{} regions, {}/{} bytes",
                p.regions_done, p.regions_total, p.bytes_done, p.bytes_total
            );
        }) {
            Ok(s) => format!("ok {s}\n"),
            Err(e) => format!("error: {e:#}\n"),
        };
        let _ = (&c).write_all(answer.as_bytes());
        return;
    }
    let answer = match apply(devices, line.trim()) {
        Ok(s) => format!("ok {s}\n"),
        Err(e) => format!("error: {e:#}\n"),
    };
    let _ = (&c).write_all(answer.as_bytes());
}

/// `dm replace DEVICE LEG SPEC`: rebuild a mirror leg onto a new device,
/// under load (`mqblk_dm::mirror::replace`), reporting each region copied.
fn dm_replace(
    devices: &[Device],
    name: &str,
    leg: &str,
    spec: &str,
    progress: &mut dyn FnMut(&mqblk_dm::mirror::Progress),
) -> Result<String> {
    let dev = devices.iter().find(|d| d.name() == name).with_context(|| {
        let names: Vec<&str> = devices.iter().map(Device::name).collect();
        format!(
            "no device `{name}` here; the devices are {}",
            names.join(", ")
        )
    })?;
    let leg: usize = leg
        .parse()
        .with_context(|| format!("leg `{leg}`: expected the leg's index, from 0"))?;
    let new = mqblk::open(spec)?;
    let p = mqblk_dm::mirror::replace(dev, leg, new, spec, progress)?;
    Ok(format!(
        "{name}: leg {leg} rebuilt on {spec}: {} bytes in {} regions copied",
        p.bytes_done, p.regions_done
    ))
}

/// A group's or device's settings from `KEY=VALUE` words.
#[derive(Default, Debug)]
struct Changes {
    weight: Option<u32>,
    class: Option<IoPrioClass>,
    prio: Option<u8>,
    riops: Option<u64>,
    wiops: Option<u64>,
    rbps: Option<u64>,
    wbps: Option<u64>,
}

impl Changes {
    fn parse(words: &[&str], group_keys: bool) -> Result<Changes> {
        let mut c = Changes::default();
        if words.is_empty() {
            bail!(
                "nothing to change: give KEY=VALUE (riops, wiops, rbps, wbps{})",
                if group_keys {
                    ", weight, prioclass, prio"
                } else {
                    ""
                }
            );
        }
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                bail!("`{w}`: expected KEY=VALUE");
            };
            let size = |v: &str| -> Result<u64> {
                mqblk::spec::parse_size(v).map_err(|why| {
                    anyhow::anyhow!(
                        "{k}={v}: expected a rate such as 5000 or 50m, 0 for no limit ({why})"
                    )
                })
            };
            match (k, group_keys) {
                ("riops", _) => c.riops = Some(size(v)?),
                ("wiops", _) => c.wiops = Some(size(v)?),
                ("rbps", _) => c.rbps = Some(size(v)?),
                ("wbps", _) => c.wbps = Some(size(v)?),
                ("weight", true) => {
                    c.weight = Some(
                        v.parse()
                            .ok()
                            .filter(|w| (1..=1000).contains(w))
                            .ok_or_else(|| anyhow::anyhow!("weight={v}: expected 1 to 1000"))?,
                    )
                }
                ("prioclass", true) => {
                    c.class = Some(IoPrioClass::parse(v).ok_or_else(|| {
                        anyhow::anyhow!("prioclass={v}: expected rt, be or idle (or 1, 2, 3)")
                    })?)
                }
                ("prio", true) => {
                    c.prio = Some(
                        v.parse()
                            .ok()
                            .filter(|p| *p <= 7)
                            .ok_or_else(|| anyhow::anyhow!("prio={v}: expected 0 to 7"))?,
                    )
                }
                _ => bail!(
                    "unknown key `{k}`; known: riops, wiops, rbps, wbps{}",
                    if group_keys {
                        ", weight, prioclass, prio"
                    } else {
                        ""
                    }
                ),
            }
        }
        Ok(c)
    }

    fn limits(&self, mut l: IoMaxLimits) -> IoMaxLimits {
        l.riops = self.riops.unwrap_or(l.riops);
        l.wiops = self.wiops.unwrap_or(l.wiops);
        l.rbps = self.rbps.unwrap_or(l.rbps);
        l.wbps = self.wbps.unwrap_or(l.wbps);
        l
    }

    fn prio(&self, p: IoPrio) -> IoPrio {
        IoPrio {
            class: self.class.unwrap_or(p.class),
            level: self.prio.unwrap_or(p.level),
        }
    }
}

/// Carry out one control request on `devices`.
pub fn apply(devices: &[Device], line: &str) -> Result<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    if let Some(dir) = line.trim().strip_prefix("trace start ") {
        // The rest of the line, spaces and all, is the directory.
        let dir = dir.trim();
        for d in devices {
            mqblk::start_trace(d, dir)?;
        }
        return Ok(format!("tracing {} devices into {dir}", devices.len()));
    }
    match words.as_slice() {
        ["show"] => Ok(show(devices).to_string()),
        ["trace", "stop"] => {
            let mut said = Vec::new();
            for d in devices {
                for s in mqblk::stop_trace(d)? {
                    let reap = s
                        .reap_delay_ns
                        .map(|ns| {
                            format!(", completions reaped {ns} ns after the driver on average")
                        })
                        .unwrap_or_default();
                    said.push(format!(
                        "{}: {} files, {} bytes, {} events lost in {}{reap}",
                        s.name,
                        s.files,
                        s.bytes,
                        s.lost,
                        s.dir.display()
                    ));
                }
            }
            if said.is_empty() {
                bail!("no device is being traced");
            }
            Ok(said.join("; "))
        }
        ["device", rest @ ..] => {
            let c = Changes::parse(rest, false)?;
            for d in devices {
                let m = d.io_max();
                m.set_limits(c.limits(m.limits()));
            }
            Ok(format!("{} devices", devices.len()))
        }
        ["group", name, rest @ ..] => {
            let c = Changes::parse(rest, true)?;
            // Look every device's group up first: all or nothing.
            let groups = devices
                .iter()
                .map(|d| d.group(name))
                .collect::<mqblk::Result<Vec<_>>>()?;
            for g in groups {
                if let Some(w) = c.weight {
                    g.set_weight(w)?;
                }
                if c.class.is_some() || c.prio.is_some() {
                    g.set_ioprio(c.prio(g.ioprio()))?;
                }
                g.set_limits(c.limits(g.limits()));
            }
            Ok(format!("group {name}"))
        }
        ["scheduler", name, rest @ ..] => {
            let mut spec = format!("scheduler={name}");
            for w in rest {
                spec.push(',');
                spec.push_str(w);
            }
            let mut o = mqblk::spec::parse(&format!("control,{spec}"))?.options;
            let mut cfg = mqblk::DeviceConfig::new("control", 0);
            cfg.take_sched(&mut o)?;
            o.finish()?;
            for d in devices {
                let mut frozen = d.freeze(std::time::Duration::from_secs(30))?;
                frozen.set_elevator(cfg.elevator.clone())?;
            }
            Ok(format!("scheduler {name} on {} devices", devices.len()))
        }
        ["create", name, rest @ ..] => {
            let c = if rest.is_empty() {
                Changes::default()
            } else {
                Changes::parse(rest, true)?
            };
            let cfg = GroupConfig {
                weight: c.weight.unwrap_or(mqblk::blkcg::DEFAULT_WEIGHT),
                ioprio: c.prio(IoPrio::default()),
                limits: c.limits(IoMaxLimits::default()),
            };
            for d in devices {
                d.create_group(name, cfg)?;
            }
            Ok(format!("group {name} created"))
        }
        _ => bail!(
            "unknown request `{line}`; expected: group NAME KEY=VALUE..., create NAME \
             KEY=VALUE..., device KEY=VALUE..., scheduler NAME [KEY=VALUE...], trace start \
             DIR, trace stop, or show"
        ),
    }
}

fn limits_json(l: IoMaxLimits) -> serde_json::Value {
    serde_json::json!({ "riops": l.riops, "wiops": l.wiops, "rbps": l.rbps, "wbps": l.wbps })
}

fn show(devices: &[Device]) -> serde_json::Value {
    let devs: Vec<_> = devices
        .iter()
        .map(|d| {
            let groups: Vec<_> = d
                .group_names()
                .iter()
                .filter_map(|n| d.group(n).ok())
                .map(|g| {
                    let p = g.ioprio();
                    serde_json::json!({
                        "name": g.name(),
                        "weight": g.weight(),
                        "prioclass": p.class.name(),
                        "prio": p.level,
                        "contexts": g.members(),
                        "limits": limits_json(g.limits()),
                    })
                })
                .collect();
            let degraded: Vec<_> = mqblk::degraded_legs(d)
                .iter()
                .map(|l| crate::degraded::json(l, None))
                .collect();
            serde_json::json!({
                "device": d.name(),
                "scheduler": &*d.scheduler(),
                "limits": limits_json(d.io_max().limits()),
                "groups": groups,
                "degraded": degraded,
            })
        })
        .collect();
    serde_json::json!({ "devices": devs })
}

/// `mqblk qos --control=SOCKET WORDS...`: send one request, print the
/// answer; an `error:` answer is an error.
pub fn client(socket: &Path, words: &[String]) -> Result<()> {
    let mut c = UnixStream::connect(socket).with_context(|| {
        format!(
            "control socket {}: is a serve or bench with --control running?",
            socket.display()
        )
    })?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    writeln!(c, "{}", words.join(" "))?;
    let mut r = BufReader::new(&c);
    let mut answer = String::new();
    loop {
        answer.clear();
        if r.read_line(&mut answer)? == 0 {
            bail!(
                "control socket {}: closed without an answer",
                socket.display()
            );
        }
        match answer.trim_end().strip_prefix("progress ") {
            Some(p) => eprintln!("{p}"),
            None => break,
        }
    }
    let answer = answer.trim_end();
    match answer.strip_prefix("error: ") {
        Some(e) => bail!("{e}"),
        None => {
            println!("{}", answer.strip_prefix("ok ").unwrap_or(answer));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_names_a_mirror_leg_that_is_out() {
        // Leg 1 is all bad blocks: the first write takes it out.
        let dev = mqblk::open(
            "dm-table:0 32768 mirror core 2 128 nosync 2 ram,size=16M 0 \
             null,size=16M,bad_blocks=0-32767 0",
        )
        .unwrap();
        let devs = vec![dev.clone()];
        let show: serde_json::Value = serde_json::from_str(&apply(&devs, "show").unwrap()).unwrap();
        assert_eq!(show["devices"][0]["degraded"], serde_json::json!([]));
        let mut ctx = dev.context().unwrap();
        let buf = dev.alloc_buf(4096);
        ctx.write_at(buf.as_slice(), 0).unwrap();
        let show: serde_json::Value = serde_json::from_str(&apply(&devs, "show").unwrap()).unwrap();
        let d = &show["devices"][0]["degraded"][0];
        assert_eq!(d["device"], dev.name());
        assert_eq!(d["leg"], 1);
        assert_eq!(d["op"], "write");
        assert_eq!(d["error"], "medium error");
        assert!(d["leg_spec"].as_str().unwrap().starts_with("null,"), "{d}");
        assert!(
            d["message"]
                .as_str()
                .unwrap()
                .contains("mirror leg 1 (null,"),
            "{d}"
        );
    }

    #[test]
    fn show_names_the_scheduler_before_and_after_a_switch() {
        let devs = vec![mqblk::open("null,size=1G,scheduler=kyber").unwrap()];
        let sched = |devs: &[Device]| {
            let show: serde_json::Value =
                serde_json::from_str(&apply(devs, "show").unwrap()).unwrap();
            show["devices"][0]["scheduler"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(sched(&devs), "kyber");
        apply(&devs, "scheduler mq-deadline read_expire=2").unwrap();
        assert_eq!(sched(&devs), "mq-deadline");
        apply(&devs, "scheduler none").unwrap();
        assert_eq!(sched(&devs), "none");
    }

    #[test]
    fn help_names_every_request() {
        use clap::CommandFactory;
        let mut cmd = crate::cli::Cli::command();
        let help = cmd
            .find_subcommand_mut("qos")
            .unwrap()
            .render_long_help()
            .to_string();
        for verb in [
            "group NAME",
            "create NAME",
            "device KEY",
            "scheduler NAME",
            "trace start DIR",
            "trace stop",
            "show",
        ] {
            assert!(help.contains(verb), "qos --help lacks `{verb}`:\n{help}");
        }
    }

    #[test]
    fn requests_change_groups_and_devices_or_name_what_is_wrong() {
        let devs = vec![
            mqblk::open("null,size=16M").unwrap(),
            mqblk::open("null,size=16M").unwrap(),
        ];
        apply(&devs, "create tenant weight=300 riops=5000").unwrap();
        for d in &devs {
            let g = d.group("tenant").unwrap();
            assert_eq!(g.weight(), 300);
            assert_eq!(g.limits().riops, 5000);
        }
        apply(&devs, "group tenant riops=20000 rbps=50m prioclass=idle").unwrap();
        let g = devs[1].group("tenant").unwrap();
        assert_eq!(g.limits().riops, 20_000);
        assert_eq!(g.limits().rbps, 50 << 20);
        assert_eq!(g.ioprio().class, IoPrioClass::Idle);
        apply(&devs, "device wiops=1000").unwrap();
        apply(&devs, "scheduler mq-deadline read_expire=2").unwrap();
        apply(&devs, "scheduler none").unwrap();
        assert_eq!(devs[0].io_max().limits().wiops, 1000);
        let show: serde_json::Value = serde_json::from_str(&apply(&devs, "show").unwrap()).unwrap();
        assert_eq!(show["devices"][0]["groups"][1]["weight"], 300);

        for (req, says) in [
            ("group nobody riops=5", "nobody"),
            ("group tenant weight=0", "weight"),
            ("group tenant weight=1001", "weight"),
            ("group tenant riops=-5", "riops"),
            ("group tenant colour=blue", "colour"),
            ("device weight=5", "weight"),
            ("reboot", "unknown request"),
            ("scheduler cfq", "scheduler"),
            ("scheduler kyber fifo_batch=3", "fifo_batch"),
        ] {
            let e = format!("{:#}", apply(&devs, req).unwrap_err());
            assert!(e.contains(says), "{req}: `{e}` does not name {says}");
        }
    }

    #[test]
    fn a_trace_starts_and_stops_through_the_socket() {
        let dir = std::env::temp_dir().join(format!("mqblk-qos-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("control");
        let dev = mqblk::open("null,size=16M").unwrap();
        let ctl = Control::start(&sock, vec![dev.clone()]).unwrap();
        let traces = dir.join("with space");
        let start = format!("trace start {}", traces.display());
        let words: Vec<String> = start.split(' ').map(String::from).collect();
        client(&sock, &words).unwrap();
        assert_eq!(dev.trace_dir().unwrap(), traces.canonicalize().unwrap());
        let mut ctx = dev.context().unwrap();
        let mut b = dev.alloc_buf(4096);
        ctx.read_at(b.as_mut_slice(), 0).unwrap();
        let stop = apply(std::slice::from_ref(&dev), "trace stop").unwrap();
        assert!(
            stop.starts_with("nullb") && stop.contains(": 1 files"),
            "{stop}"
        );
        assert!(traces.join(format!("{}.blktrace.0", dev.name())).exists());
        let e = format!(
            "{:#}",
            apply(std::slice::from_ref(&dev), "trace stop").unwrap_err()
        );
        assert!(e.contains("no device is being traced"), "{e}");
        drop(ctl);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_socket_carries_requests_and_goes_away_with_the_control() {
        let dir = std::env::temp_dir().join(format!("mqblk-qos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("control");
        let dev = mqblk::open("null,size=16M").unwrap();
        let ctl = Control::start(&sock, vec![dev.clone()]).unwrap();
        client(&sock, &["device".into(), "riops=777".into()]).unwrap();
        assert_eq!(dev.io_max().limits().riops, 777);
        let e = client(&sock, &["group".into(), "x".into(), "riops=1".into()]).unwrap_err();
        assert!(format!("{e:#}").contains("\"x\""), "{e:#}");
        drop(ctl);
        assert!(!sock.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
