//! fio's steady state criterion (`ss=`/`steadystate=`): what a job
//! watches (IOPS or bandwidth) and how it is judged (slope or deviation,
//! against a limit). mqblk-bench's `steadystate` judges it.

/// What `ss=` watches and how it is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SteadySpec {
    /// IOPS (else bandwidth, bytes per second).
    pub iops: bool,
    /// The least-squares slope (else the largest deviation from the mean).
    pub slope: bool,
    /// The limit the criterion must fall below.
    pub limit: f64,
    /// The limit is a percentage of the window's mean.
    pub percent: bool,
}

impl SteadySpec {
    /// Parse fio's `iops:10%`, `bw_slope:1%`, `iops_slope:0.1`,
    /// `bw:2000000` (bytes per second, suffixes allowed).
    pub fn parse(s: &str) -> Result<SteadySpec, String> {
        let (kind, limit) = s
            .split_once(':')
            .ok_or("a criterion and a limit, such as iops:10% or bw_slope:1%")?;
        let (iops, slope) = match kind.trim() {
            "iops" => (true, false),
            "iops_slope" => (true, true),
            "bw" => (false, false),
            "bw_slope" => (false, true),
            k => {
                return Err(format!(
                    "unknown criterion `{k}`: iops, iops_slope, bw or bw_slope"
                ))
            }
        };
        let limit = limit.trim();
        let (value, percent) = match limit.strip_suffix('%') {
            Some(p) => (
                p.trim()
                    .parse::<f64>()
                    .map_err(|_| format!("{p:?} is not a number"))?,
                true,
            ),
            None if iops => (
                limit
                    .parse::<f64>()
                    .map_err(|_| format!("{limit:?} is not a number"))?,
                false,
            ),
            None => (mqblk::spec::parse_size(limit)? as f64, false),
        };
        if !value.is_finite() || value < 0.0 {
            return Err(format!("the limit {value} must be 0 or more"));
        }
        Ok(SteadySpec {
            iops,
            slope,
            limit: value,
            percent,
        })
    }

    /// fio's spelling, for the report.
    pub fn name(&self) -> String {
        format!(
            "{}{}:{}{}",
            if self.iops { "iops" } else { "bw" },
            if self.slope { "_slope" } else { "" },
            self.limit,
            if self.percent { "%" } else { "" }
        )
    }
}
