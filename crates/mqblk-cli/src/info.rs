//! `mqblk info`: what a device spec opens, read-only.

use std::io::Write;

use anyhow::{bail, Result};

use crate::open::{device_spec, open_error, open_read_only};
use mqblk_bench::report::{self};

use crate::cli::InfoArgs;

pub(crate) fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

pub(crate) fn info_command(args: &InfoArgs) -> Result<()> {
    let Some(given) = args.spec.as_ref().or(args.device.as_ref()) else {
        bail!(
            "info needs a device: `mqblk info SPEC` or `mqblk info --device SPEC`, as in \
             `mqblk info null,size=1G` or `mqblk info file:/dev/sdb`"
        );
    };
    let spec = &device_spec(given);
    // Info has no side effects: it never creates an image (create= is
    // dropped, a stacked device's legs' too), and stacked
    // devices opened read-only write nothing (no resync, no log).
    let spec = &without_create(spec);
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
            Ok(Some(t)) => v["partitiontable"] = crate::partitions::sfdisk_json(t, &disk),
            Ok(None) => {}
            Err(e) => v["partitiontable_error"] = serde_json::json!(e.to_string()),
        }
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    let spec_ro = mqblk::spec::parse(spec).is_ok_and(|p| p.options.contains("ro"));
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
    if dev.is_bio_based() {
        // No request queue of its own: no depth, plug or queue mode acts.
        line(
            "queue:",
            "bio-based: each bio is mapped in the submitting thread and its clones go to the lower devices' queues (bio_remap=0 gives it a request queue)".to_string(),
        );
    } else {
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
    }
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
    line(
        "features:",
        if spec_ro {
            String::new()
        } else {
            "(of this read-only open: a read-write open, as serve's, may offer more)".into()
        },
    );
    line("  write_cache:", yes_no(f.write_cache).into());
    line("  fua:", yes_no(f.fua).into());
    line("  discard:", yes_no(f.discard).into());
    line("  write_zeroes:", yes_no(f.write_zeroes).into());
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
            for l in crate::partitions::text(t, &disk) {
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

/// `spec` without its `create=` options (info never creates), the legs'
/// of a stacked device too, with a note on stderr for each.
fn without_create(spec: &str) -> String {
    let mut out = spec.to_string();
    while let Some(at) = out.find(",create=") {
        let rest = &out[at + 1..];
        let end = rest.find([',', ' ', ';']).map_or(out.len(), |n| at + 1 + n);
        eprintln!(
            "mqblk info: ignoring {} (info never creates an image)",
            &out[at + 1..end]
        );
        out.replace_range(at..end, "");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::without_create;

    #[test]
    fn create_is_dropped_at_the_top_and_in_the_legs() {
        assert_eq!(without_create("ram,size=1M"), "ram,size=1M");
        assert_eq!(without_create("rbd:p/i,create=1G,conf=c"), "rbd:p/i,conf=c");
        assert_eq!(
            without_create(
                "dm-table:0 8 linear rbd:p/a,create=1G 0;8 8 linear file:f,create=1,size=4k 0"
            ),
            "dm-table:0 8 linear rbd:p/a 0;8 8 linear file:f,size=4k 0"
        );
    }
}
