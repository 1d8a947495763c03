//! Helpers shared by the qcow2 driver's tests: a scratch directory on
//! tmpfs, qemu-img and qemu-io as the judges, and whole-device reads.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use mqblk_core::queue::Device;
use mqblk_test_support::{require_tool, run_ok};

/// A directory on tmpfs (`/dev/shm`) for one test, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("mqblk-qcow2-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn qemu_img(args: &[&str]) -> String {
    require_tool("qemu-img");
    run_ok("qemu-img", args)
}

/// Run qemu-io commands on an image (format qcow2).
pub fn qemu_io(img: &str, cmds: &[&str]) {
    require_tool("qemu-io");
    let mut args = vec!["-f", "qcow2"];
    for c in cmds {
        args.push("-c");
        args.push(c);
    }
    args.push(img);
    run_ok("qemu-io", &args);
}

/// The guest contents of `img` as qemu sees them.
pub fn qemu_raw(dir: &Dir, img: &str) -> Vec<u8> {
    let out = dir.s("judge.raw");
    let _ = std::fs::remove_file(&out);
    qemu_img(&["convert", "-O", "raw", img, &out]);
    let b = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    b
}

/// Open a device spec through the qcow2 driver.
pub fn open(spec: &str) -> mqblk_core::Result<Device> {
    let s = mqblk_core::spec::parse(spec)?;
    assert_eq!(s.kind, "qcow2", "{spec}");
    mqblk_qcow2::open(s.target.as_deref().unwrap(), s.options)
}

/// Read the whole device.
pub fn read_all(dev: &Device) -> Vec<u8> {
    let mut ctx = dev.context().unwrap();
    let cap = dev.capacity_bytes();
    let chunk = 1u64 << 20;
    let mut buf = dev.alloc_buf(chunk as usize);
    let mut out = Vec::with_capacity(cap as usize);
    let mut at = 0;
    while at < cap {
        let n = chunk.min(cap - at) as usize;
        ctx.read_at(&mut buf.as_mut_slice()[..n], at).unwrap();
        out.extend_from_slice(&buf.as_mut_slice()[..n]);
        at += n as u64;
    }
    out
}

/// The first differing byte of two buffers, for a readable failure.
pub fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// A file of `len` bytes of a seeded, half-compressible pattern.
pub fn pattern_file(path: &Path, len: usize, seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut b = vec![0u8; len];
    for (i, chunk) in b.chunks_mut(512).enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if i % 3 == 0 {
            chunk.fill((x & 0xff) as u8);
        } else {
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = (x >> (j % 56)) as u8 ^ j as u8;
            }
        }
    }
    std::fs::write(path, b).unwrap();
}

/// `qemu-img create -f qcow2 -o OPTIONS IMG SIZE`.
pub fn create_qcow2(options: &str, img: &str, size: &str) {
    qemu_img(&["create", "-q", "-f", "qcow2", "-o", options, img, size]);
}

/// xorshift, seeded.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
