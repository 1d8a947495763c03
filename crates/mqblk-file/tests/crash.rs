//! Crash consistency of flushed writes: a writer (this test binary again,
//! in a child process) writes 4 KiB blocks through the file driver and
//! flushes after every N of them, saying on stdout, as each flush ends,
//! how many of its writes that flush covered; it is SIGKILLed (by its
//! pid) after a different number of flushes each round. Then every block
//! that a finished flush covered must hold that write or a later one to
//! the same block, whole. 20 rounds on a tmpfs and 20 on an ext4 on a
//! loop device (a file system whose flushes go to a journal), one code
//! path for both; the rounds cycle through the engines (uring, psync),
//! direct=0/1 (ext4 only: tmpfs refuses O_DIRECT on older kernels), the
//! depths 1, 16 and 64 and fsync=1 and fsync=8.

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Tmpfs;
use mqblk_core::{Bio, Op};
use mqblk_test_support::{Ext4, Watched};

/// The environment variable that makes this binary the writer.
const CHILD: &str = "MQBLK_CRASH_CHILD";
/// Crash points per file system.
const ROUNDS: u32 = 20;
/// Block size of every write.
const BS: usize = 4096;
/// The file: 1024 blocks, so a round's writes wrap around and overwrite.
const FILE_BYTES: u64 = 4 << 20;
/// Longest a writer runs before it stops by itself (the parent kills it
/// long before).
const CHILD_LIFE: Duration = Duration::from_secs(60);
/// Longest the parent waits for one flush to be said.
const FLUSH_WAIT: Duration = Duration::from_secs(30);

/// One round's writer.
struct Round {
    engine: &'static str,
    direct: bool,
    depth: usize,
    fsync: u64,
    /// Flushes to see before the kill.
    kill_after: u32,
}

impl Round {
    fn nth(r: u32, direct_ok: bool) -> Round {
        Round {
            engine: ["uring", "psync"][r as usize % 2],
            direct: direct_ok && (r / 2) % 2 == 1,
            depth: [1, 16, 64][(r as usize / 4) % 3],
            fsync: [1, 8][(r as usize / 3) % 2],
            kill_after: 2 + (r * 7) % 23,
        }
    }

    fn opts(&self) -> String {
        format!("engine={},direct={}", self.engine, u8::from(self.direct))
    }

    /// As the child reads it from [`CHILD`].
    fn encode(&self, file: &Path) -> String {
        format!(
            "{}|{}|{}|{}",
            file.display(),
            self.opts(),
            self.depth,
            self.fsync
        )
    }
}

/// The contents of write `id` (ids start at 1; 0 is a block never
/// written): its id in the first 8 bytes, then bytes that depend on the
/// id and the offset.
fn fill(buf: &mut [u8], id: u64, offset: u64) {
    common::pattern(buf, offset, id);
    buf[..8].copy_from_slice(&id.to_le_bytes());
}

fn block_of(id: u64) -> u64 {
    let blocks = FILE_BYTES / BS as u64;
    (id - 1) % blocks
}

/// The writer: writes ids 1, 2, ... to block `block_of(id)`, `depth` at
/// a time, and a flush after every `fsync` completed writes, whose
/// private word is the prefix of ids completed when it was submitted.
/// Prints `synced P` when that flush ends well. Any error ends it with
/// a message on stderr and exit code 2.
fn writer(spec: &str) {
    let mut it = spec.split('|');
    let (path, opts) = (it.next().unwrap(), it.next().unwrap());
    let depth: usize = it.next().unwrap().parse().unwrap();
    let fsync: u64 = it.next().unwrap().parse().unwrap();
    let dev = common::open(Path::new(path), opts).unwrap_or_else(|e| {
        eprintln!("writer: open {path},{opts}: {e}");
        std::process::exit(2)
    });
    let mut ctx = dev.context().unwrap();
    let mut free: Vec<_> = (0..depth).map(|_| dev.alloc_buf(BS)).collect();
    let mut flushes: Vec<u64> = Vec::new();
    let mut done = BTreeSet::new();
    let (mut next_id, mut prefix, mut since_flush) = (1u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < CHILD_LIFE {
        while let Some(mut buf) = free.pop() {
            let offset = block_of(next_id) * BS as u64;
            fill(buf.as_mut_slice(), next_id, offset);
            let mut bio = Bio::write_at(offset, buf);
            bio.private = next_id;
            if let Err(e) = ctx.submit(bio) {
                free.extend(e.into_bio().into_buffers());
                break;
            }
            next_id += 1;
        }
        while let Some(&covers) = flushes.first() {
            let mut bio = Bio::flush();
            bio.private = covers;
            if ctx.submit(bio).is_err() {
                break;
            }
            flushes.remove(0);
        }
        ctx.poll_wait(1, |c| {
            let (op, id, status) = (c.bio().op(), c.bio().private, c.status());
            if !status.is_ok() {
                eprintln!("writer: {op} (id {id}) failed: {status}");
                std::process::exit(2);
            }
            if op == Op::Flush {
                println!("synced {id}");
                return;
            }
            done.insert(id);
            while done.remove(&(prefix + 1)) {
                prefix += 1;
            }
            since_flush += 1;
            if since_flush == fsync {
                since_flush = 0;
                flushes.push(prefix);
            }
            free.extend(c.into_bio().into_buffers());
        });
    }
}

/// Read the file back after the kill: every block a said flush covered
/// holds that write or a later one to it, whole. An error names the
/// block.
fn check(file: &Path, synced: u64) -> Result<(), String> {
    let data = std::fs::read(file).map_err(|e| format!("read {}: {e}", file.display()))?;
    let blocks = FILE_BYTES / BS as u64;
    for b in 0..blocks {
        // The last covered write to block b: ids b+1, b+1+blocks, ...
        let want = if synced > b {
            b + 1 + (synced - b - 1) / blocks * blocks
        } else {
            0
        };
        let offset = b * BS as u64;
        let got = &data[offset as usize..offset as usize + BS];
        let id = u64::from_le_bytes(got[..8].try_into().unwrap());
        if id == 0 && want == 0 {
            continue;
        }
        if id < want || id == 0 || block_of(id) != b {
            return Err(format!(
                "block {b}: holds write {id}, the flush covered write {want}"
            ));
        }
        let mut expect = vec![0u8; BS];
        fill(&mut expect, id, offset);
        if got != &expect[..] {
            return Err(format!("block {b}: write {id} is torn"));
        }
    }
    Ok(())
}

/// `ROUNDS` crash points on files in `dir`; `direct_ok`: the file system
/// takes O_DIRECT. `test` is the calling test's name (the child runs it).
fn crash_rounds(test: &str, dir: &Path, direct_ok: bool) {
    let exe = std::env::current_exe().unwrap();
    let mut clean = 0;
    let mut failures = Vec::new();
    for r in 0..ROUNDS {
        let round = Round::nth(r, direct_ok);
        let file = dir.join(format!("crash{r}.img"));
        std::fs::File::create(&file)
            .and_then(|f| f.set_len(FILE_BYTES))
            .unwrap();
        let mut child = Watched::spawn(
            Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD, round.encode(&file)),
        );
        for n in 0..round.kill_after {
            let said = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                child.wait_out("synced", FLUSH_WAIT);
            }));
            if said.is_err() {
                let (status, _, err) = child.finish(FLUSH_WAIT);
                panic!(
                    "round {r} ({} depth={} fsync={}): the writer stopped ({status}) after {n} \
                     flushes: {err}",
                    round.opts(),
                    round.depth,
                    round.fsync
                );
            }
        }
        assert!(
            child.try_wait().is_none(),
            "round {r}: the writer exited by itself"
        );
        child.kill();
        let (status, out, err) = child.finish(FLUSH_WAIT);
        assert_eq!(status.signal(), Some(libc::SIGKILL), "round {r}: {err}");
        assert!(!err.contains("writer:"), "round {r}: {err}");
        // Every line printed before the kill is a flush that ended.
        let synced = out
            .lines()
            .filter_map(|l| l.strip_prefix("synced "))
            .map(|n| n.trim().parse::<u64>().unwrap())
            .max()
            .unwrap_or(0);
        let what = format!(
            "{} depth={} fsync={} killed after {} flushes, {synced} writes covered",
            round.opts(),
            round.depth,
            round.fsync,
            round.kill_after
        );
        match check(&file, synced) {
            Ok(()) => clean += 1,
            Err(e) => failures.push(format!("round {r} ({what}): {e}")),
        }
        eprintln!("round {r}: {what}");
        let _ = std::fs::remove_file(&file);
    }
    eprintln!(
        "{clean} of {ROUNDS} crash points clean on {}",
        dir.display()
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(clean, ROUNDS);
}

#[test]
fn flushed_writes_survive_sigkill_on_tmpfs() {
    if let Ok(spec) = std::env::var(CHILD) {
        writer(&spec);
        return;
    }
    let Some(fs) = Tmpfs::mount("crash", "64M") else {
        return;
    };
    crash_rounds("flushed_writes_survive_sigkill_on_tmpfs", &fs.dir, false);
}

#[test]
fn flushed_writes_survive_sigkill_on_ext4() {
    if let Ok(spec) = std::env::var(CHILD) {
        writer(&spec);
        return;
    }
    let Some(fs) = Ext4::new("crash-ext4", 256 << 20) else {
        return;
    };
    crash_rounds("flushed_writes_survive_sigkill_on_ext4", fs.path(), true);
}
