//! `mqblk qos` against a running `mqblk serve --control`: limits, groups
//! and the scheduler change while the server serves, a real NBD client
//! (nbdcopy) moves data through the changes, and bad requests get errors
//! that name what is wrong. The server is stopped by its pid.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn mqblk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
}

/// The server this test started, stopped by its pid.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn qos(ctl: &Path, req: &[&str]) -> Output {
    mqblk()
        .arg("qos")
        .arg(format!("--control={}", ctl.display()))
        .args(req)
        .output()
        .unwrap()
}

#[test]
fn a_serving_device_takes_limits_groups_and_schedulers_live() {
    mqblk_test_support::require_tool("nbdcopy");
    let scratch = mqblk_test_support::Scratch::new("qos-serve");
    let dir = scratch.path();
    let sock = dir.join("nbd.sock");
    let ctl = dir.join("control");
    let child = mqblk()
        .args(["serve", "ram,size=16M", "--socket"])
        .arg(&sock)
        .arg(format!("--control={}", ctl.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let server = Server(child);
    mqblk_test_support::wait_for_path(&sock, "mqblk serve", None);
    mqblk_test_support::wait_for_path(&ctl, "the control socket", None);

    for req in [
        &["device", "riops=2000", "wbps=64m"][..],
        &["scheduler", "mq-deadline", "read_expire=2"],
        &["create", "tenant", "weight=300"],
        &["group", "default", "weight=200", "prioclass=be"],
    ] {
        let out = qos(&ctl, req);
        assert!(
            out.status.success(),
            "{req:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let show = qos(&ctl, &["show"]);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["devices"][0]["limits"]["riops"], 2000);
    assert_eq!(v["devices"][0]["groups"][0]["weight"], 200);
    assert_eq!(v["devices"][0]["groups"][1]["name"], "tenant");

    // Data moves through the limits and a scheduler switch.
    let src = dir.join("src.img");
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let st = Command::new("nbdcopy")
        .arg(&src)
        .arg(&uri)
        .status()
        .unwrap();
    assert!(st.success());
    let out = qos(&ctl, &["scheduler", "bfq"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = dir.join("back.img");
    let st = Command::new("nbdcopy")
        .arg(&uri)
        .arg(&back)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(
        std::fs::read(&back).unwrap()[..4 << 20] == data[..],
        "data changed"
    );

    for (req, says) in [
        (&["group", "nobody", "riops=5"][..], "nobody"),
        (&["group", "tenant", "weight=0"], "weight"),
        (&["device", "riops=-1"], "riops"),
        (&["scheduler", "noop"], "scheduler"),
    ] {
        let out = qos(&ctl, req);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{req:?}: {err}"
        );
    }
    drop(server);
}
