//! Crash consistency, as QEMU orders it: a writer process (this test
//! binary, re-executed with `MQBLK_QCOW2_WRITER` set) writes, zeroes and
//! discards through the qcow2 driver with a flush after every 8
//! operations, printing each operation before it starts and each flush
//! after it ends; the test SIGKILLs it (by its pid) at a seeded random
//! moment, 20 times, on images of several kinds. After each kill
//! `qemu-img check` must find no corruption (leaks are allowed, exit
//! code 3), every block that the last completed flush covered and no
//! later operation touched must read back (through qemu-img) as written,
//! and the image must open again through mqblk and read as qemu reads it.

mod common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{create_qcow2, first_diff, open, qemu_raw, read_all, Dir, Rng};
use mqblk_test_support::{require_tool, Watched};

const ROUNDS: u32 = 20;
const SIZE: u64 = 16 << 20;
const BLOCK: u64 = 4096;
/// Operations between flushes.
const FSYNC_EVERY: u64 = 8;
/// Longest wait for the writer's first flush (a hang guard).
const WAIT_MAX: Duration = Duration::from_secs(60);
/// The latest kill after the first flush.
const KILL_WITHIN_MS: u64 = 600;
/// Longest wait for a killed writer's lock to go.
const LOCK_WAIT_MAX: Duration = Duration::from_secs(10);
const WRITER_ENV: &str = "MQBLK_QCOW2_WRITER";

#[derive(Clone, Copy, Debug)]
enum Op {
    Write { off: u64, len: u64, fill: u64 },
    Zero { off: u64, len: u64 },
    Discard { off: u64, len: u64 },
}

/// Operation `k` of the sequence seeded by `seed` (every one after the
/// `FSYNC_EVERY`-th is followed by a flush).
fn op(seed: u64, k: u64) -> Op {
    let mut r = Rng((seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
    for _ in 0..3 {
        r.next();
    }
    let len = (1 + r.next() % 16) * BLOCK;
    let off = r.next() % ((SIZE - len) / BLOCK + 1) * BLOCK;
    match r.next() % 10 {
        0 => Op::Zero { off, len },
        1 => Op::Discard { off, len },
        _ => Op::Write {
            off,
            len,
            fill: r.next(),
        },
    }
}

fn data(fill: u64, off: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (fill >> ((off + i) % 61)) as u8 ^ ((off + i) / BLOCK) as u8)
        .collect()
}

/// The writer process: runs until killed (or 60 s, if nobody does).
fn writer(img: &str, seed: u64) {
    let dev = open(&format!("qcow2:{img}")).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf((16 * BLOCK) as usize);
    let out = std::io::stdout();
    let start = Instant::now();
    for k in 0.. {
        if start.elapsed() > Duration::from_secs(60) {
            break;
        }
        writeln!(out.lock(), "start {k}").unwrap();
        match op(seed, k) {
            Op::Write { off, len, fill } => {
                let b = &mut buf.as_mut_slice()[..len as usize];
                b.copy_from_slice(&data(fill, off, len));
                ctx.write_at(b, off).unwrap();
            }
            Op::Zero { off, len } => ctx.write_zeroes(off, len).unwrap(),
            Op::Discard { off, len } => ctx.discard(off, len).unwrap(),
        }
        if k % FSYNC_EVERY == FSYNC_EVERY - 1 {
            ctx.flush().unwrap();
            writeln!(out.lock(), "synced {k}").unwrap();
        }
    }
}

/// The model after operations `0..=last`.
fn model(seed: u64, last: Option<u64>) -> Vec<u8> {
    let mut m = vec![0u8; SIZE as usize];
    if let Some(last) = last {
        for k in 0..=last {
            match op(seed, k) {
                Op::Write { off, len, fill } => {
                    m[off as usize..(off + len) as usize].copy_from_slice(&data(fill, off, len))
                }
                Op::Zero { off, len } | Op::Discard { off, len } => {
                    m[off as usize..(off + len) as usize].fill(0)
                }
            }
        }
    }
    m
}

fn last_number(out: &str, word: &str) -> Option<u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix(word))
        .filter_map(|n| n.trim().parse().ok())
        .max()
}

struct Round {
    synced: u64,
    started: u64,
    checked_blocks: u64,
    leaks: bool,
}

fn round(dir: &Dir, n: u32, seed: u64, kill_ms: u64) -> Round {
    let kinds = [
        "compat=1.1,cluster_size=65536",
        "compat=1.1,cluster_size=4096",
        "compat=0.10,cluster_size=65536",
        "compat=1.1,cluster_size=4096,lazy_refcounts=on",
    ];
    let img = dir.s(&format!("crash{n}.qcow2"));
    create_qcow2(kinds[n as usize % kinds.len()], &img, &SIZE.to_string());
    let mut w = Watched::spawn(
        Command::new(std::env::current_exe().unwrap())
            .env(WRITER_ENV, &img)
            .env("MQBLK_QCOW2_SEED", seed.to_string()),
    );
    w.wait_out("synced", WAIT_MAX);
    std::thread::sleep(Duration::from_millis(kill_ms));
    assert!(w.try_wait().is_none(), "the writer ended before the kill");
    w.kill();
    let (_, out, err) = w.finish(WAIT_MAX);
    let synced = last_number(&out, "synced ").expect("a flush was seen");
    let started = last_number(&out, "start ").unwrap();
    // No corruption: exit 0, or 3 (leaks only). The killed writer's
    // io_uring lets go of the file (and its lock) a moment after it dies.
    let o = check_when_unlocked(&img);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let code = o.status.code();
    assert!(
        code == Some(0) || code == Some(3),
        "round {n}: qemu-img check exited {code:?}:\n{text}\nwriter: {err}"
    );
    assert!(
        !text.contains("ERROR") && !text.contains("corrupt"),
        "round {n}: {text}"
    );
    // Every block the last flush covered, that no later operation
    // touched, reads back.
    let got = qemu_raw(dir, &img);
    let want = model(seed, Some(synced));
    let mut touched = vec![false; (SIZE / BLOCK) as usize];
    for k in synced + 1..=started {
        let (Op::Write { off, len, .. } | Op::Zero { off, len } | Op::Discard { off, len }) =
            op(seed, k);
        for b in off / BLOCK..(off + len) / BLOCK {
            touched[b as usize] = true;
        }
    }
    let mut checked = 0;
    for (b, t) in touched.iter().enumerate() {
        if *t {
            continue;
        }
        let r = b * BLOCK as usize..(b + 1) * BLOCK as usize;
        assert_eq!(
            first_diff(&got[r.clone()], &want[r]),
            None,
            "round {n}: block {b} (byte {}) lost what flush after op {synced} made durable",
            b as u64 * BLOCK
        );
        checked += 1;
    }
    // It opens again, writable, and reads as qemu reads it.
    {
        let dev = open(&format!("qcow2:{img}")).unwrap();
        assert_eq!(
            first_diff(&read_all(&dev), &got),
            None,
            "round {n}: mqblk reads differently"
        );
    }
    let o = Command::new("qemu-img")
        .args(["check", &img])
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0) | Some(3)),
        "round {n}: after reopen: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    std::fs::remove_file(&img).unwrap();
    Round {
        synced,
        started,
        checked_blocks: checked,
        leaks: code == Some(3),
    }
}

/// `qemu-img check` once the image's lock is free (a bounded wait).
fn check_when_unlocked(img: &str) -> std::process::Output {
    let start = Instant::now();
    loop {
        let o = Command::new("qemu-img")
            .args(["check", img])
            .output()
            .unwrap();
        if !String::from_utf8_lossy(&o.stderr).contains("Failed to lock") {
            return o;
        }
        assert!(
            start.elapsed() < LOCK_WAIT_MAX,
            "{img} still locked {LOCK_WAIT_MAX:?} after the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    if let Ok(img) = std::env::var(WRITER_ENV) {
        let seed = std::env::var("MQBLK_QCOW2_SEED").unwrap().parse().unwrap();
        writer(&img, seed);
        return;
    }
    require_tool("qemu-img");
    let dir = Dir::new("crash");
    let seed = std::env::var("MQBLK_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("seed {seed} (MQBLK_CRASH_SEED={seed} repeats these kill moments)");
    let mut rng = Rng(seed | 1);
    let mut clean = 0;
    for n in 0..ROUNDS {
        let kill_ms = rng.next() % KILL_WITHIN_MS;
        let r = round(&dir, n, rng.next(), kill_ms);
        eprintln!(
            "crash {n:2}: killed {kill_ms:3} ms after the first flush, op {} started, op {} flushed; \
             no corruption{}; {} blocks read back as flushed",
            r.started,
            r.synced,
            if r.leaks { " (leaked clusters)" } else { ", no leaks" },
            r.checked_blocks
        );
        clean += 1;
    }
    eprintln!("{clean} of {ROUNDS} crash points clean");
    assert_eq!(clean, ROUNDS);
}
