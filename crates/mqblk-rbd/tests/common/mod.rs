//! A throwaway Ceph cluster for one test (scripts/micro-ceph under a temp
//! dir), stopped, with every daemon it started, when dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use mqblk_test_support::{require_tool, skip_unless_ci};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct MicroCeph {
    pub dir: PathBuf,
    pub conf: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/micro-ceph")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl MicroCeph {
    /// Start one, or `None` after recording a skip where this build has no
    /// librbd (a failure in CI, where scripts/test installs it).
    pub fn start() -> Option<MicroCeph> {
        if !mqblk_rbd::AVAILABLE {
            skip_unless_ci(
                "built without librbd (install librbd-dev librados-dev; scripts/test does)",
            );
            return None;
        }
        for t in ["ceph-mon", "ceph-osd", "ceph", "rbd", "monmaptool"] {
            require_tool(t);
        }
        let dir = std::env::temp_dir().join(format!(
            "mqblk-ceph-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = MicroCeph {
            conf: dir.join("ceph.conf"),
            dir,
        };
        let o = c.script("start");
        assert!(o.status.success(), "micro-ceph start: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout).trim(), c.conf.to_str().unwrap());
        Some(c)
    }

    fn script(&self, cmd: &str) -> Output {
        Command::new(script())
            .arg(cmd)
            .arg(&self.dir)
            .output()
            .expect("run scripts/micro-ceph")
    }

    pub fn kill_osd(&self) {
        let o = self.script("kill-osd");
        assert!(o.status.success(), "kill-osd: {}", text(&o.stderr));
    }

    pub fn start_osd(&self) {
        let o = self.script("start-osd");
        assert!(o.status.success(), "start-osd: {}", text(&o.stderr));
    }

    /// Run the `rbd` command against this cluster; panics on failure.
    pub fn rbd(&self, args: &[&str]) -> Vec<u8> {
        let o = Command::new("rbd")
            .arg("-c")
            .arg(&self.conf)
            .args(args)
            .output()
            .expect("run rbd");
        assert!(o.status.success(), "rbd {args:?}: {}", text(&o.stderr));
        o.stdout
    }

    /// A device spec for `image` on this cluster, with more options.
    pub fn spec(&self, image: &str, more: &str) -> String {
        let mut s = format!("rbd:rbd/{image},conf={}", self.conf.display());
        if !more.is_empty() {
            s.push(',');
            s.push_str(more);
        }
        s
    }
}

impl Drop for MicroCeph {
    fn drop(&mut self) {
        let o = self.script("stop");
        if !o.status.success() {
            eprintln!("micro-ceph stop: {}", text(&o.stderr));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
