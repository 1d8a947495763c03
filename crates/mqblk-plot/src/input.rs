//! Reading fio-shaped JSON reports: `mqblk bench --output-format=json`,
//! fio's `--output-format=json` and `json+`. A file may hold several
//! reports one after the other (fio's and mqblk's `--status-interval`, or
//! text before the JSON, as fio prints notes): the last report with jobs is
//! the one plotted.

use std::path::Path;

use crate::error::{Error, Result};
use serde_json::Value;

/// The largest report read (fio's `json+` of many jobs is a few MiB): at
/// most one byte past it is read, so `/dev/zero` is refused at once.
pub const INPUT_BYTES_MAX: u64 = 64 << 20;

/// One direction of one job.
#[derive(Clone, Debug, Default)]
pub struct Direction {
    /// `read` or `write`.
    pub name: &'static str,
    /// I/Os per second.
    pub iops: f64,
    /// Bytes per second.
    pub bw_bytes: f64,
    /// (percentile, clat ns), ascending.
    pub percentiles: Vec<(f64, f64)>,
    /// Log-linear buckets (value ns, count), from `clat_ns.bins`.
    pub bins: Vec<(f64, u64)>,
    /// Completed I/Os.
    pub total_ios: u64,
}

/// One job of a report.
#[derive(Clone, Debug)]
pub struct Job {
    /// `FILE:JOBNAME` (with the job's index when names repeat).
    pub label: String,
    /// Reads and writes.
    pub read: Direction,
    /// Writes.
    pub write: Direction,
}

impl Job {
    /// The directions that did any I/O.
    pub fn directions(&self) -> impl Iterator<Item = &Direction> {
        [&self.read, &self.write]
            .into_iter()
            .filter(|d| d.total_ios > 0 || d.iops > 0.0)
    }
}

/// Every JSON value in `text`, skipping any text before the first `{`
/// and between values.
fn values(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let mut stream = serde_json::Deserializer::from_str(&rest[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                out.push(v);
                rest = &rest[start + stream.byte_offset()..];
            }
            _ => rest = &rest[start + 1..],
        }
    }
    out
}

/// The jobs of the last report in `path` that has any.
pub fn load(path: &Path) -> Result<Vec<Job>> {
    let text = mqblk_core::input::read_text_capped(path, "plot input", INPUT_BYTES_MAX)?;
    let file = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(report) = values(&text)
        .into_iter()
        .rfind(|v| v["jobs"].as_array().is_some_and(|j| !j.is_empty()))
    else {
        return Err(Error::NoReport {
            path: path.to_path_buf(),
        });
    };
    jobs(&report, &file)
}

/// The jobs of one report; `file` prefixes their labels.
pub fn jobs(report: &Value, file: &str) -> Result<Vec<Job>> {
    let list = report["jobs"]
        .as_array()
        .ok_or_else(|| Error::NoJobsArray {
            report: file.to_string(),
        })?;
    let names: Vec<&str> = list
        .iter()
        .map(|j| j["jobname"].as_str().unwrap_or("job"))
        .collect();
    let mut out = Vec::with_capacity(list.len());
    for (i, j) in list.iter().enumerate() {
        let name = names[i];
        let repeated = names.iter().filter(|n| **n == name).count() > 1;
        let label = match (file.is_empty(), repeated) {
            (true, false) => name.to_string(),
            (true, true) => format!("{name}.{i}"),
            (false, false) => format!("{file}:{name}"),
            (false, true) => format!("{file}:{name}.{i}"),
        };
        out.push(Job {
            label,
            read: direction(&j["read"], "read"),
            write: direction(&j["write"], "write"),
        });
    }
    Ok(out)
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn direction(d: &Value, name: &'static str) -> Direction {
    let clat = &d["clat_ns"];
    let mut percentiles: Vec<(f64, f64)> = clat["percentile"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.parse::<f64>().ok()?, v.as_f64()?)))
                .filter(|(_, v)| *v > 0.0)
                .collect()
        })
        .unwrap_or_default();
    percentiles.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut bins: Vec<(f64, u64)> = clat["bins"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.parse::<f64>().ok()?, v.as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    bins.sort_by(|a, b| a.0.total_cmp(&b.0));
    Direction {
        name,
        iops: number(&d["iops"]),
        bw_bytes: d["bw_bytes"]
            .as_f64()
            .unwrap_or_else(|| number(&d["bw"]) * 1024.0),
        percentiles,
        bins,
        total_ios: d["total_ios"].as_u64().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_last_report_after_notes() {
        let text = r#"note: both iodepth >= 1 and synchronous I/O engine
{"jobs": [{"jobname": "a", "read": {"iops": 1.0, "total_ios": 1}}]}
{"jobs": [{"jobname": "b", "read": {"iops": 2.0, "total_ios": 2,
  "clat_ns": {"percentile": {"99.000000": 500, "50.000000": 100},
              "bins": {"100": 3, "500": 1}}}},
          {"jobname": "b", "write": {"iops": 5.0, "bw": 4, "total_ios": 5}}]}
"#;
        let v = values(text);
        assert_eq!(v.len(), 2);
        let jobs = jobs(v.last().unwrap(), "f").unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].label, "f:b.0");
        assert_eq!(jobs[0].read.percentiles, vec![(50.0, 100.0), (99.0, 500.0)]);
        assert_eq!(jobs[0].read.bins, vec![(100.0, 3), (500.0, 1)]);
        assert_eq!(jobs[1].write.bw_bytes, 4096.0);
        assert_eq!(jobs[1].directions().count(), 1);
    }
}
