//! How a degraded mirror is shown ([`mqblk::degraded_legs`]): one text
//! line and one JSON object per failed leg, which device, which leg, why
//! and when, the same in `bench`, `stat`, `serve` and `qos show`.

use std::time::{SystemTime, UNIX_EPOCH};

use mqblk::DegradedLeg;
use serde_json::{json, Value};

/// Milliseconds since the epoch of `t`.
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// Milliseconds from `since` to the leg's failure (`None`: it failed
/// before `since`, or is being replaced).
pub(crate) fn ms_after(d: &DegradedLeg, since: SystemTime) -> Option<u64> {
    let f = d.failure.as_ref()?;
    f.at.duration_since(since)
        .ok()
        .map(|x| x.as_millis() as u64)
}

/// `dm-0 (table line 1): mirror leg 1 (SPEC) is out: a write failed (I/O
/// error) at Thu Nov 26 10:00:01.250 2026 UTC[, 1.250 s into the run]`.
pub fn text(d: &DegradedLeg, run_ms: Option<u64>) -> String {
    let mut s = d.to_string();
    if let Some(f) = &d.failure {
        let ms = unix_ms(f.at);
        let c = crate::ctime::ctime(ms / 1000);
        // ctime's `HH:MM:SS YYYY`: the milliseconds go after the seconds.
        let (day, year) = c.rsplit_once(' ').unwrap_or((&c, ""));
        s.push_str(&format!(" at {day}.{:03} {year} UTC", ms % 1000));
        if let Some(r) = run_ms {
            s.push_str(&format!(", {}.{:03} s into the run", r / 1000, r % 1000));
        }
    }
    s
}

/// The JSON object of one failed leg: `device` (the stacked device whose
/// table holds the mirror), `table_line`, `leg`, `leg_spec`, `op` and
/// `error` (why; `null` and `being replaced` for a leg taken out to be
/// replaced), `errno`, `time_ms` (since the epoch), given, `run_ms`, and
/// all of it as the line [`text`] writes (`message`).
pub fn json(d: &DegradedLeg, run_ms: Option<u64>) -> Value {
    let mut v = json!({
        "message": text(d, run_ms),
        "device": d.device,
        "table_line": d.line,
        "leg": d.leg,
        "leg_spec": d.spec,
    });
    match &d.failure {
        Some(f) => {
            v["op"] = json!(f.op);
            v["error"] = json!(f.status.to_string());
            v["errno"] = json!(f.status.errno());
            v["time_ms"] = json!(unix_ms(f.at));
        }
        None => {
            v["op"] = Value::Null;
            v["error"] = json!("being replaced");
        }
    }
    if let Some(r) = run_ms {
        v["run_ms"] = json!(r);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn leg() -> DegradedLeg {
        DegradedLeg {
            device: "dm-0".into(),
            line: 1,
            leg: 1,
            spec: "nbd+unix:///?socket=s".into(),
            failure: Some(mqblk::LegFailure {
                op: "write",
                status: mqblk::driver::Status::IoError,
                at: UNIX_EPOCH + Duration::from_millis(86_400_000 + 1_250),
            }),
        }
    }

    #[test]
    fn a_failed_leg_names_device_leg_why_and_when() {
        let d = leg();
        let t = text(&d, Some(1_250));
        assert!(
            t.starts_with("dm-0 (table line 1): mirror leg 1 (nbd+unix:///?socket=s) is out: a write failed ("),
            "{t}"
        );
        assert!(
            t.ends_with("at Fri Jan  2 00:00:01.250 1970 UTC, 1.250 s into the run"),
            "{t}"
        );
        let v = json(&d, Some(1_250));
        assert_eq!(v["leg"], 1);
        assert_eq!(v["op"], "write");
        assert_eq!(v["errno"], libc::EIO);
        assert_eq!(v["time_ms"], 86_401_250u64);
        assert_eq!(v["run_ms"], 1_250);
        assert_eq!(
            ms_after(&d, UNIX_EPOCH + Duration::from_secs(86_400)),
            Some(1_250)
        );
        assert_eq!(ms_after(&d, UNIX_EPOCH + Duration::from_secs(90_000)), None);
    }

    #[test]
    fn a_leg_being_replaced_says_so() {
        let d = DegradedLeg {
            failure: None,
            ..leg()
        };
        assert!(text(&d, None).ends_with("is out: being replaced"));
        assert_eq!(json(&d, None)["error"], "being replaced");
    }
}
