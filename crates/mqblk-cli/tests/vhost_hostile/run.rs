//! Running the cases: each from a new frontend, then a good write and
//! read, then the next; at the end a new frontend reads back.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mqblk_test_support::require_tool;
use mqblk_test_support::vhost_frontend::{status, Outcome, VhostBlk, SECTOR_BYTES};

use crate::cases::{cases, Case, Ctx, Expect, BROKEN};
use crate::server::{Serve, Server};
use crate::{ANSWER_MAX, NO_ANSWER_WAIT};

/// 4 KiB that say which case wrote them.
pub(crate) fn pattern(seed: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(0x9e37)) as u8)
        .collect()
}

/// The sector the good write after case `i` goes to (4 KiB apart, past
/// the first MiB).
pub(crate) fn check_sector(i: usize) -> u64 {
    2048 + 8 * i as u64
}

/// What one case got.
pub(crate) struct Report {
    pub(crate) name: &'static str,
    pub(crate) queue: u16,
    pub(crate) outcome: Result<Outcome, String>,
    /// The used element came only after `NO_ANSWER_WAIT`.
    pub(crate) late: bool,
    /// The queue the good write and read then went to, and whether they
    /// came back right (or why not).
    pub(crate) after: (u16, Result<(), String>),
    /// The case was met.
    pub(crate) met: bool,
}

/// Whether `got` is one of `expect`.
pub(crate) fn meets(got: &Outcome, expect: &[Expect]) -> bool {
    expect.iter().any(|e| match (e, got) {
        (Expect::Status(s), Outcome::Status { status, .. }) => s == status,
        (Expect::Broken, Outcome::NoAnswer) => true,
        _ => false,
    })
}

/// A good write of `pattern(seed)` at `sector` on queue `q`, read back.
pub(crate) fn write_read(
    fe: &mut VhostBlk,
    q: u16,
    sector: u64,
    seed: u64,
    max: Duration,
) -> Result<(), String> {
    let data = pattern(seed);
    fe.write(q, sector, &data, max).map_err(|e| e.to_string())?;
    let back = fe.read(q, sector, 4096, max).map_err(|e| e.to_string())?;
    if back != data {
        return Err(format!(
            "sector {sector} read back other bytes than were written"
        ));
    }
    Ok(())
}

/// Send `case` (number `i`) from a new frontend on queue `i % 2`, then a
/// good write and read on the same queue or, if the ring broke, the
/// other; the frontend then closes.
pub(crate) fn run_case(server: &mut Server, i: usize, case: &Case, after_max: Duration) -> Report {
    let mut fe = server.connect();
    let q = (i % 2) as u16;
    let (l, cfg) = (fe.layout(), fe.config());
    let mut ctx = Ctx {
        fe: &mut fe,
        l,
        cfg,
        q,
    };
    let sent = (case.build)(&mut ctx);
    let status_gpa = sent.as_ref().ok().and_then(|s| s.status_gpa);
    let outcome = sent.and_then(|s| {
        let wait = if case.expect.contains(&BROKEN) {
            NO_ANSWER_WAIT
        } else {
            ANSWER_MAX
        };
        fe.exchange_raw(q, &s.descs, s.head, s.avail_advance, s.status_gpa, wait)
            .map_err(|e| e.to_string())
    });
    server.assert_alive(case.name);
    let check_q = match outcome {
        Ok(Outcome::Status { .. }) => q,
        _ => 1 - q,
    };
    let after = write_read(&mut fe, check_q, check_sector(i), i as u64, after_max);
    // A used element that came after the wait (a slow machine): the ring
    // was not broken, and the answer is judged as any other.
    let mut late = false;
    let outcome = match outcome {
        Ok(Outcome::NoAnswer) => match fe.wait_used(q, Duration::ZERO) {
            Ok(Some(u)) => {
                late = true;
                let s = status_gpa.map(|g| fe.mem().get::<u8>(g));
                Ok(match s {
                    Some(Ok(s)) if s != status::UNWRITTEN => Outcome::Status {
                        status: s,
                        len: u.len,
                    },
                    _ => Outcome::UsedNoStatus { len: u.len },
                })
            }
            _ => Ok(Outcome::NoAnswer),
        },
        o => o,
    };
    drop(fe);
    server.assert_alive(case.name);
    let met = matches!(&outcome, Ok(o) if meets(o, case.expect)) && after.is_ok();
    Report {
        name: case.name,
        queue: q,
        outcome,
        late,
        after: (check_q, after),
        met,
    }
}

/// Every case against `serve`'s server, each printed, the good requests
/// after each waiting at most `after_max`; then a new frontend reads back
/// what the good writes wrote. The reports, and the server (still
/// running).
pub(crate) fn hostile_table(
    serve: Serve,
    dir: &Path,
    after_max: Duration,
) -> (Vec<Report>, Server, Result<(), String>) {
    let mut server = serve(dir, false);
    let mut reports = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        let r = run_case(&mut server, i, case, after_max);
        let got = match &r.outcome {
            Ok(o) if r.late => format!("{o}, after more than {NO_ANSWER_WAIT:?}"),
            Ok(o) => o.to_string(),
            Err(e) => format!("not sent: {e}"),
        };
        let after = match &r.after.1 {
            Ok(()) => format!("queue {} then served a write and a read", r.after.0),
            Err(e) => format!("queue {} then failed: {e}", r.after.0),
        };
        let expect: Vec<String> = case
            .expect
            .iter()
            .map(|e| match e {
                Expect::Status(s) => status::name(*s),
                Expect::Broken => "broken ring".into(),
            })
            .collect();
        eprintln!(
            "{} case {i:2} on queue {}: {}: got {got} (expected {}); {after}{}",
            server.name,
            r.queue,
            r.name,
            expect.join(" or "),
            if r.met { "" } else { "  <-- NOT MET" }
        );
        reports.push(r);
    }
    let mut fe = server.connect();
    let mut readback = Ok(());
    for (i, r) in reports.iter().enumerate() {
        if r.after.1.is_err() {
            continue;
        }
        let q = (i % 2) as u16;
        match fe.read(q, check_sector(i), 4096, ANSWER_MAX) {
            Ok(b) if b == pattern(i as u64) => {}
            Ok(_) => readback = Err(format!("case {i}'s write read back wrong")),
            Err(e) => readback = Err(format!("case {i}'s write: {e}")),
        }
    }
    drop(fe);
    let readback = readback.and_then(|()| nbd_readback(&server, dir, &reports));
    (reports, server, readback)
}

/// The good writes, read by a host tool (nbdcopy) over the same server's
/// NBD export, if it has one: the hostile guest did not stop it either.
fn nbd_readback(server: &Server, dir: &Path, reports: &[Report]) -> Result<(), String> {
    let Some(nbd) = &server.nbd else {
        return Ok(());
    };
    require_tool("nbdcopy");
    let copy = dir.join("copy.img");
    let uri = format!("nbd+unix:///?socket={}", nbd.display());
    let out = Command::new("timeout")
        .args(["60", "nbdcopy", &uri])
        .arg(&copy)
        .output()
        .map_err(|e| format!("run nbdcopy: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nbdcopy {uri}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let img = std::fs::read(&copy).map_err(|e| format!("read nbdcopy's copy: {e}"))?;
    let mut checked = 0;
    for (i, r) in reports.iter().enumerate() {
        if r.after.1.is_err() {
            continue;
        }
        let at = (check_sector(i) * SECTOR_BYTES) as usize;
        if img.get(at..at + 4096) != Some(&pattern(i as u64)[..]) {
            return Err(format!(
                "nbdcopy: case {i}'s write reads back wrong over NBD"
            ));
        }
        checked += 1;
    }
    eprintln!(
        "{}: nbdcopy over NBD read back {checked} good writes",
        server.name
    );
    Ok(())
}
