//! The library with no process spawned: a fio-shaped report (written here,
//! fio's field names) plotted to SVG and PNG with its summary, and the
//! typed errors for a file with no report and for no job at all.

use std::path::PathBuf;

use mqblk_plot::{plot, Error, Metric};
use mqblk_test_support::Scratch;

/// One fio-shaped report: a randrw job with percentiles and log-linear
/// buckets in both directions.
const REPORT: &str = r#"note: fio prints notes before its JSON
{
  "jobs": [
    {
      "jobname": "randrw",
      "read": {
        "iops": 120000.5, "bw_bytes": 491522048, "total_ios": 1200,
        "clat_ns": {
          "percentile": {"50.000000": 2048, "99.000000": 9216, "99.900000": 20480},
          "bins": {"1900": 500, "2100": 600, "9000": 100}
        }
      },
      "write": {
        "iops": 60000, "bw_bytes": 245760000, "total_ios": 600,
        "clat_ns": {
          "percentile": {"50.000000": 4096, "99.000000": 16384},
          "bins": {"4000": 550, "16000": 50}
        }
      }
    }
  ]
}
"#;

fn write(dir: &Scratch, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write the report");
    p
}

#[test]
fn a_fio_report_becomes_svg_png_and_a_summary() {
    let d = Scratch::new("plot-lib");
    let input = write(&d, "fio.json", REPORT);
    let stem = d.path().join("figure");
    let out = plot(&[input], Some(&stem), Metric::Bw).expect("plot the report");
    assert_eq!(out.svg, stem.with_extension("svg"));
    assert_eq!(out.png, stem.with_extension("png"));
    let png = std::fs::read(&out.png).expect("read the PNG");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let svg = std::fs::read_to_string(&out.svg).expect("read the SVG");
    for title in [
        "Bandwidth per job",
        "Completion latency percentiles",
        "Completion latency histogram",
    ] {
        assert!(svg.contains(title), "{title} missing");
    }
    let lines: Vec<&str> = out.summary.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.summary);
    // The label is the file's stem and the job's name.
    let words: Vec<Vec<&str>> = lines
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(words[0][..2], ["fio:randrw", "read"], "{}", lines[0]);
    assert_eq!(words[1][..2], ["fio:randrw", "write"], "{}", lines[1]);
    assert!(
        words[0]
            .iter()
            .any(|w| w.starts_with("p99=") && *w != "p99=-"),
        "{}",
        lines[0]
    );
}

#[test]
fn a_file_without_a_report_and_no_jobs_are_typed_errors() {
    let d = Scratch::new("plot-lib-errors");
    let notes = write(&d, "notes.txt", "fio: no JSON here\n");
    match plot(std::slice::from_ref(&notes), None, Metric::Iops) {
        Err(Error::NoReport { path }) => assert_eq!(path, notes),
        other => panic!("expected NoReport, got {other:?}"),
    }
    let empty = write(&d, "empty.json", r#"{"jobs": []}"#);
    match plot(std::slice::from_ref(&empty), None, Metric::Iops) {
        Err(Error::NoReport { path }) => assert_eq!(path, empty),
        other => panic!("expected NoReport, got {other:?}"),
    }
    match plot(&[], None, Metric::Iops) {
        Err(Error::NoJobs { inputs }) => assert_eq!(inputs, ""),
        other => panic!("expected NoJobs, got {other:?}"),
    }
    assert!(
        !d.path().join("notes.svg").exists(),
        "nothing written on an error"
    );
}
