//! Printing a [`RunResult`](crate::RunResult) the way fio prints its results, so that people
//! and scripts that read fio read mqblk too: `normal` mimics fio's text
//! report (job blocks, then `Run status group 0 (all jobs):`), and `json`
//! has the shape of fio's `--output-format=json`. Both end with the layer's
//! own figures (the `mqblk` block), which fio has no place for.
//!
//! Jobs are in fio's reporting groups (a new one at each `stonewall` or
//! `new_group`); `numjobs` copies of a section are reported one by one, or
//! folded into one entry with `group_reporting`, by fio's rules
//! (`group`).
//!
//! In call order: `figures` (fio's units and the latencies of a job),
//! `group` (the report's entries), then the reports: [`json`] (and
//! json+), [`terse`] (fio's version 3) and `text` ([`normal`]).

mod figures;

pub(crate) mod group;

mod json;

mod terse;

mod text;

pub(crate) use figures::fmt_iops;
pub use figures::{num2str, Format};
pub use json::{json, json_plus};
pub use terse::terse;
pub use text::{normal, starting};

#[cfg(test)]
mod tests {
    use super::figures::*;
    use super::json::*;
    use super::text::*;

    use std::time::Duration;

    use crate::result::{DirResult, JobResult, RunResult};
    use mqblk::stats::StatGroup;
    use mqblk_fio::job::JobSpec;
    use serde_json::json;

    use crate::result::LayerResult;
    use mqblk::stats::Histograms;
    use mqblk_fio::job::RwMode;

    fn synthetic() -> (Vec<JobSpec>, RunResult) {
        let spec = JobSpec {
            rw: RwMode::RandRw,
            iodepth: 8,
            numjobs: 2,
            runtime: Some(Duration::from_secs(3)),
            time_based: true,
            ..JobSpec::default()
        };
        let mut clat = Histograms::new();
        for ns in 50..2_000u64 {
            clat.record(StatGroup::Read, ns);
            clat.record(StatGroup::Write, ns * 2);
        }
        let job = |index: usize| JobResult {
            group: 0,
            name: "job0".into(),
            index,
            device: "nullb0".into(),
            read: DirResult {
                ios: 3_000_000,
                bytes: 3_000_000 * 4096,
                errors: 0,
            },
            write: DirResult {
                ios: 1_000_000,
                bytes: 1_000_000 * 4096,
                errors: 0,
            },
            trim: DirResult::default(),
            clat: clat.clone(),
            clat_valid: true,
            slat: None,
            lat: None,
            runtime_ns: 3_000_000_000,
            usr_ns: 2_900_000_000,
            sys_ns: 10_000_000,
            first_error: None,
            unfinished: false,
            stopped_at: None,
            verify: None,
            latency_depth: None,
            steadystate: None,
        };
        let run = RunResult {
            jobs: vec![job(0), job(1)],
            layer: LayerResult {
                queue_mode: "mq".into(),
                allocs: 0,
                ios: 8_000_000,
                stats: mqblk::DiskStats {
                    requests: 8_000_000,
                    bios: 8_000_000,
                    ..mqblk::DiskStats::default()
                },
                cpu_ns: 5_800_000_000,
                descriptor_bytes: 256,
                ..LayerResult::default()
            },
        };
        (vec![spec], run)
    }

    #[test]
    fn iops_like_fio() {
        assert_eq!(fmt_iops(0.0), "0");
        assert_eq!(fmt_iops(999.0), "999");
        assert_eq!(fmt_iops(4_012_345.0), "4012k");
        assert_eq!(fmt_iops(16_200_000.0), "16.2M");
        assert_eq!(fmt_iops(12_345.0), "12.3k");
        assert_eq!(fmt_iops(10_000.0), "10.0k");
        assert_eq!(fmt_iops(258_400.0), "258k");
        assert_eq!(fmt_iops(f64::NAN), "0");
    }

    #[test]
    fn sizes_like_fio() {
        assert_eq!(num2str(4096, 4, true), "4096");
        assert_eq!(num2str(1 << 30, 4, true), "1024Mi");
        assert_eq!(num2str(3 << 30, 4, true), "3072Mi");
        assert_eq!(num2str(66_500_000_000, 4, false), "66.5G");
        assert_eq!(num2str(u64::MAX, 4, true), "16.0Ei");
    }

    #[test]
    fn json_has_fios_shape() {
        let (specs, run) = synthetic();
        let v = json(&specs, &run);
        assert!(v["fio version"].as_str().unwrap().starts_with("mqblk-"));
        assert!(v["timestamp"].is_u64());
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2);
        for job in jobs {
            assert_eq!(job["jobname"], "job0");
            assert_eq!(job["groupid"], 0);
            assert_eq!(job["error"], 0);
            assert_eq!(job["ctx"], 0);
            assert!(job["elapsed"].is_u64());
            assert!(job["usr_cpu"].is_f64());
            assert!(job["sys_cpu"].is_f64());
            let opts = job["job options"].as_object().unwrap();
            for k in [
                "rw",
                "bs",
                "iodepth",
                "numjobs",
                "runtime",
                "time_based",
                "device",
            ] {
                assert!(opts[k].is_string(), "job options.{k}");
            }
            assert_eq!(opts["rw"], "randrw");
            for dir in ["read", "write", "trim"] {
                let d = &job[dir];
                for k in [
                    "io_bytes",
                    "io_kbytes",
                    "bw_bytes",
                    "bw",
                    "runtime",
                    "total_ios",
                    "short_ios",
                    "drop_ios",
                ] {
                    assert!(d[k].is_u64(), "{dir}.{k}: {}", d[k]);
                }
                assert!(d["iops"].is_f64(), "{dir}.iops");
                for lat in ["clat_ns", "lat_ns"] {
                    let l = &d[lat];
                    for k in ["min", "max", "N"] {
                        assert!(l[k].is_u64(), "{dir}.{lat}.{k}");
                    }
                    for k in ["mean", "stddev"] {
                        assert!(l[k].is_f64(), "{dir}.{lat}.{k}");
                    }
                    let pct = l["percentile"].as_object().unwrap();
                    assert_eq!(pct.len(), 17);
                    for k in [
                        "1.000000",
                        "5.000000",
                        "10.000000",
                        "20.000000",
                        "30.000000",
                        "40.000000",
                        "50.000000",
                        "60.000000",
                        "70.000000",
                        "80.000000",
                        "90.000000",
                        "95.000000",
                        "99.000000",
                        "99.500000",
                        "99.900000",
                        "99.950000",
                        "99.990000",
                    ] {
                        assert!(pct[k].is_u64(), "{dir}.{lat}.percentile.{k}");
                    }
                }
            }
            let r = &job["read"];
            assert_eq!(r["total_ios"], 3_000_000);
            assert_eq!(r["io_bytes"], 3_000_000u64 * 4096);
            assert_eq!(r["runtime"], 3000);
            assert!((r["iops"].as_f64().unwrap() - 1_000_000.0).abs() < 1.0);
            assert_eq!(r["bw"], r["bw_bytes"].as_u64().unwrap() / 1024);
            assert_eq!(r["clat_ns"]["N"], 1950);
            let p50 = r["clat_ns"]["percentile"]["50.000000"].as_u64().unwrap();
            assert!((900..=1100).contains(&p50), "{p50}");
            assert_eq!(job["trim"]["total_ios"], 0);
            assert!((job["usr_cpu"].as_f64().unwrap() - 96.666).abs() < 0.01);
        }
        let m = &v["mqblk"];
        assert_eq!(m["queue_mode"], "mq");
        assert!(m["allocs_per_io"].is_f64());
        assert!(m["ns_per_io_cpu"].is_f64());
        for k in [
            "bytes_copied",
            "requests",
            "bios",
            "merges",
            "splits",
            "descriptor_bytes",
        ] {
            assert!(m[k].is_u64(), "mqblk.{k}");
        }
        assert_eq!(m["devices"], json!(["nullb0"]));
    }

    #[test]
    fn no_clat_without_iostats() {
        let (specs, mut run) = synthetic();
        for j in &mut run.jobs {
            j.clat_valid = false;
        }
        let v = json(&specs, &run);
        assert_eq!(v["jobs"][0]["read"]["clat_ns"]["N"], 0);
        let text = normal(&specs, &run);
        assert!(!text.contains("clat"), "{text}");
        assert!(text.contains("IOPS="), "{text}");
    }

    #[test]
    fn slat_is_shown_when_measured_with_percentiles_as_asked() {
        let (mut specs, mut run) = synthetic();
        let v = json(&specs, &run);
        let slat = &v["jobs"][0]["read"]["slat_ns"];
        assert_eq!(slat["N"], 0);
        assert!(slat.get("percentile").is_none(), "{slat}");
        assert!(!normal(&specs, &run).contains("slat"));
        let mut h = Histograms::new();
        for ns in 10..110u64 {
            h.record(StatGroup::Read, ns);
        }
        for j in &mut run.jobs {
            j.slat = Some(h.clone());
        }
        // Measured (a latency log asked): the summary, no percentiles.
        let v = json(&specs, &run);
        let slat = &v["jobs"][0]["read"]["slat_ns"];
        assert_eq!(slat["N"], 100);
        assert_eq!(slat["min"], 10);
        assert!(slat.get("percentile").is_none(), "{slat}");
        assert_eq!(v["jobs"][0]["write"]["slat_ns"]["N"], 0);
        let text = normal(&specs, &run);
        assert!(text.contains("    slat (nsec): min=10, max=109"), "{text}");
        assert!(!text.contains("slat percentiles"), "{text}");
        // slat_percentiles=1: fio's percentile object and block, the slat
        // block before the clat block.
        specs[0].slat_percentiles = true;
        let v = json(&specs, &run);
        let pct = &v["jobs"][0]["read"]["slat_ns"]["percentile"];
        assert_eq!(pct.as_object().unwrap().len(), PERCENTILES.len());
        assert!(pct["50.000000"].as_u64().is_some(), "{pct}");
        // No samples, no percentiles (the write direction has none).
        assert!(v["jobs"][0]["write"]["slat_ns"].get("percentile").is_none());
        let text = normal(&specs, &run);
        let read = &text[text.find("  read:").unwrap()..text.find("  write:").unwrap()];
        let order: Vec<usize> = [
            "    slat (nsec):",
            "    clat (nsec):",
            "    slat percentiles (nsec):",
            "    clat percentiles (nsec):",
        ]
        .iter()
        .map(|k| read.find(k).unwrap_or_else(|| panic!("{k} in {read}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{read}");
        let write = &text[text.find("  write:").unwrap()..];
        assert!(!write[..write.find("  cpu").unwrap()].contains("slat"));
    }

    #[test]
    fn lat_is_the_total_latency_when_slat_is_measured() {
        let (specs, mut run) = synthetic();
        // Without stamps, lat is clat (nothing else is known).
        let v = json(&specs, &run);
        assert_eq!(
            v["jobs"][0]["read"]["lat_ns"]["N"],
            v["jobs"][0]["read"]["clat_ns"]["N"]
        );
        assert!(!normal(&specs, &run).contains("    lat ("));
        let mut total = Histograms::new();
        for us in 1000..1100u64 {
            total.record(StatGroup::Read, us * 1000);
        }
        for j in &mut run.jobs {
            j.slat = Some(Histograms::new());
            j.lat = Some(total.clone());
        }
        let v = json(&specs, &run);
        let lat = &v["jobs"][0]["read"]["lat_ns"];
        assert_eq!(lat["N"], 100);
        assert!(lat["min"].as_u64().unwrap() >= 990_000, "{lat}");
        assert!(lat["percentile"]["99.000000"].as_u64().unwrap() >= 1_090_000);
        // A direction without samples falls back to its clat.
        assert_eq!(
            v["jobs"][0]["write"]["lat_ns"]["N"],
            v["jobs"][0]["write"]["clat_ns"]["N"]
        );
        let text = normal(&specs, &run);
        let read = &text[text.find("  read:").unwrap()..text.find("  write:").unwrap()];
        let (clat, lat) = (
            read.find("    clat (").unwrap(),
            read.find("    lat (usec): min=").unwrap(),
        );
        assert!(clat < lat, "{read}");
    }

    #[test]
    fn normal_reads_like_fio() {
        let (specs, mut run) = synthetic();
        run.jobs[1].write = DirResult::default();
        let text = normal(&specs, &run);
        assert!(
            text.contains("job0: (groupid=0, jobs=1): err= 0: pid="),
            "{text}"
        );
        assert!(
            text.contains("\n  read: IOPS=1000k, BW=3906MiB/s (4096MB/s)(11.4GiB/3000msec)\n"),
            "{text}"
        );
        assert_eq!(text.matches("\n  write: IOPS=").count(), 1, "{text}");
        assert!(text.contains("    clat (nsec): min=50, max="), "{text}");
        assert!(text.contains("    clat percentiles (nsec):"), "{text}");
        assert!(text.contains("     |  1.00th=["), "{text}");
        assert!(text.contains("     | 99.99th=["), "{text}");
        assert!(
            text.contains("  cpu          : usr=96.67%, sys=0.33%"),
            "{text}"
        );
        assert!(text.contains("Run status group 0 (all jobs):"), "{text}");
        assert!(text.contains("   READ: bw="), "{text}");
        assert!(text.contains("  WRITE: bw="), "{text}");
        assert!(text.contains("run=3000-3000msec"), "{text}");
        for k in [
            "\nmqblk: ",
            "queue_mode=mq",
            "allocs_per_io=",
            "bytes_copied=",
            "requests=",
            "bios=",
            "requests/bios=",
            "ns_per_io_cpu=",
            "descriptor_bytes=256",
        ] {
            assert!(text.contains(k), "{k}: {text}");
        }
        // Seventeen percentiles, four to a line.
        assert_eq!(text.matches("th=[").count(), 2 * 17 + 17, "{text}");
    }

    #[test]
    fn errors_are_reported() {
        let (specs, mut run) = synthetic();
        run.jobs[0].read.errors = 3;
        run.jobs[0].first_error = Some("I/O error at sector 8".into());
        assert_eq!(json(&specs, &run)["jobs"][0]["error"], EIO);
        assert!(normal(&specs, &run).contains("err= 5 (I/O error at sector 8)"));
    }

    #[test]
    fn preamble_counts_threads() {
        let (specs, _) = synthetic();
        let s = starting(&specs);
        assert!(s.contains("rw=randrw, bs=(R) 4096B-4096B"), "{s}");
        assert!(s.contains("Starting 2 threads"), "{s}");
    }
}
