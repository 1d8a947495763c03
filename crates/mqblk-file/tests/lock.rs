//! Image files are locked as qemu locks them: shared to read, exclusive to
//! write, with `lock=off` to opt out. A second writer is refused naming the
//! file and the holder.

mod common;

use common::{open, Scratch};

const MIB: u64 = 1 << 20;

#[test]
fn a_second_writer_is_refused_naming_the_file_and_the_holder() {
    let s = Scratch::new("lock-writers");
    let p = s.file("disk.img", MIB);
    let first = open(&p, "").unwrap();
    let e = open(&p, "").unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "{} is locked: this process (pid {}: another device on the same file) has it open with a write lock, and two writers of one image corrupt it",
            p.display(),
            std::process::id()
        )),
        "{e}"
    );
    assert!(e.contains("lock=off"), "{e}");
    // A reader beside the writer is refused too, and so is a writer beside
    // a reader.
    let e = open(&p, "ro=1").unwrap_err().to_string();
    assert!(
        e.contains("has it open with a write lock, and it is being changed under this reader"),
        "{e}"
    );
    drop(first);
    let reader = open(&p, "ro=1").unwrap();
    let e = open(&p, "").unwrap_err().to_string();
    assert!(
        e.contains("has it open with a read lock, and a writer would change it under its reader"),
        "{e}"
    );
    drop(reader);
    // Closed, the lock is gone.
    open(&p, "").unwrap();
}

#[test]
fn readers_share_and_lock_off_opts_out() {
    let s = Scratch::new("lock-readers");
    let p = s.file("disk.img", MIB);
    let a = open(&p, "ro=1").unwrap();
    let b = open(&p, "ro=1").unwrap();
    let mut buf = a.alloc_buf(4096);
    a.context().unwrap().read_at(buf.as_mut_slice(), 0).unwrap();
    b.context().unwrap().read_at(buf.as_mut_slice(), 0).unwrap();
    drop((a, b));
    let w = open(&p, "").unwrap();
    let also = open(&p, "lock=off").unwrap();
    let ro = open(&p, "ro=1,lock=0").unwrap();
    drop((w, also, ro));
}

#[test]
fn a_holder_in_another_process_is_named_by_pid() {
    let s = Scratch::new("lock-pid");
    let p = s.file("disk.img", MIB);
    // A child that holds an OFD write lock on the file: flock(1) takes
    // flock locks, so python's fcntl does it.
    let python = [
        "python3",
        "-c",
        &format!(
            "import fcntl,os,struct,sys,time\n\
         fd=os.open({:?},os.O_RDWR)\n\
         fcntl.fcntl(fd,fcntl.F_OFD_SETLK,struct.pack('hhqqi4x',fcntl.F_WRLCK,0,0,0,0))\n\
         print('locked',flush=True)\n\
         sys.stdin.read()",
            p.display().to_string()
        ),
    ];
    let Ok(mut child) = std::process::Command::new(python[0])
        .args(&python[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    else {
        panic!("python3 must be installed: it holds the lock in this test");
    };
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let e = open(&p, "").unwrap_err().to_string();
    drop(child.stdin.take());
    child.wait().unwrap();
    assert!(
        e.contains(&format!(
            "is locked: pid {} (python3) has it open with a write lock",
            child.id()
        )),
        "{e}"
    );
}
