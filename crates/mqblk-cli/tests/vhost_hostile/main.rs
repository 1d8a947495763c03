//! A hostile guest cannot hurt the host (issue 35): an in-process
//! vhost-user frontend (`mqblk_test_support::vhost_frontend`) puts each
//! bad chain the issue names on a queue of `mqblk serve SPEC
//! --vhost-user-blk SOCKET --num-queues 2`: addresses outside guest
//! memory (past its end, and in the hole between its two regions), chains
//! too short for a header or a status byte, wrong directions, loops,
//! nested and malformed indirect tables, lengths that overflow, requests
//! past SIZE_MAX and SEG_MAX, unknown request types, reads, writes and
//! discards past the end, malformed discards, an avail index that jumps
//! past the queue size, and writes to a `--read-only` device.
//!
//! Each case is sent by a new frontend (so every case also checks that
//! the server serves the next client), and must get its status byte or a
//! broken ring (no used element within [`NO_ANSWER_WAIT`]); then a good
//! write and read succeed on the same queue, or on the other one if the
//! ring is broken. The server stays up throughout, a last frontend reads
//! back everything the good requests wrote, so does nbdcopy over the same
//! server's NBD export (`--socket`), and SIGINT ends the server with exit
//! 0 within 2 s. Each case prints what it got. A used element
//! whose status byte was left unwritten meets no case: the issue allows a
//! status or a broken ring, nothing else. An answer that comes after
//! `NO_ANSWER_WAIT` (a slow machine) is judged as any other.
//!
//! The server is started by one function ([`SERVE`]): `serve_mqblk`, or
//! `serve_qsd` for the peer, qemu-storage-daemon, whose answers
//! `qemu_storage_daemon_is_the_peer` prints.

mod cases;
mod run;
mod server;

use std::time::Duration;

use mqblk_test_support::vhost_frontend::virtio_bindings;
use mqblk_test_support::vhost_frontend::{
    header, linked, req, segment, segment_bytes, status, Outcome, Request, SECTOR_BYTES,
};
use mqblk_test_support::Scratch;

use run::{hostile_table, pattern};
use server::{serve_mqblk, serve_mqblk_with, serve_qsd, Serve, DEVICE_BYTES};

/// How long a good request may take before the test calls it lost.
const ANSWER_MAX: Duration = Duration::from_secs(10);
/// How long a case that may break its ring waits for a used element
/// before it counts the ring as broken.
const NO_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// The server the hostile cases judge: the one switch between mqblk and
/// the peer.
const SERVE: Serve = serve_mqblk;

#[test]
fn every_hostile_case_gets_its_status_or_a_broken_ring_and_the_server_goes_on() {
    let dir = Scratch::new("vhost-hostile");
    let (reports, mut server, readback) = hostile_table(SERVE, dir.path(), ANSWER_MAX);
    server.assert_alive("every case");
    let missed: Vec<&str> = reports.iter().filter(|r| !r.met).map(|r| r.name).collect();
    let n = reports.len();
    eprintln!("{} of {n} hostile cases met", n - missed.len());
    readback.expect("a new frontend reads back what the good writes wrote");
    let err = server.interrupt();
    assert!(
        missed.is_empty(),
        "{} of {n} cases not met: {missed:?}; server stderr:\n{err}",
        missed.len()
    );
}

/// A ring the driver broke takes requests again once the driver has
/// stopped it (GET_VRING_BASE) and set it up afresh, as a guest that
/// resets its device does; the other queue served throughout.
#[test]
fn a_broken_ring_serves_again_after_the_driver_resets_it() {
    let dir = Scratch::new("vhost-hostile-reset");
    let mut server = SERVE(dir.path(), false);
    let mut fe = server.connect();
    fe.write(0, 8, &pattern(7)[..4096], ANSWER_MAX)
        .expect("a write before the ring breaks");
    // A chain of one readable header: no status byte to answer in.
    let h = fe.layout().header_gpa(0);
    fe.mem()
        .put_bytes(h, &header(req::IN, 0))
        .expect("write a header");
    let got = fe
        .exchange(0, &linked(0, &[(h, 16, false)]), None, NO_ANSWER_WAIT)
        .expect("submit a chain with no status byte");
    assert!(
        matches!(got, Outcome::NoAnswer),
        "a chain with no status byte got {got}"
    );
    fe.read(1, 8, 4096, ANSWER_MAX)
        .expect("the other queue serves while queue 0 is broken");
    fe.reset_ring(0)
        .expect("GET_VRING_BASE and set the ring up again");
    let back = fe
        .read(0, 8, 4096, ANSWER_MAX)
        .expect("a read on the reset ring");
    assert!(
        back[..] == pattern(7)[..4096],
        "the reset ring read other data"
    );
    eprintln!("{}: queue 0 broken, reset, and served again", server.name);
    drop(fe);
    server.assert_alive("a reset ring");
    server.interrupt();
}

/// `--serial` is what GET_ID answers, NUL-padded to 20 bytes.
#[test]
fn get_id_answers_the_serial_given() {
    let dir = Scratch::new("vhost-hostile-serial");
    let mut server = serve_mqblk_with(dir.path(), &["--serial", "vm0-disk"]);
    let mut fe = server.connect();
    for q in 0..2 {
        let id = fe.get_id(q, ANSWER_MAX).expect("GET_ID");
        assert_eq!(&id[..8], b"vm0-disk", "queue {q}: {id:?}");
        assert!(id[8..].iter().all(|&b| b == 0), "queue {q}: {id:?}");
    }
    drop(fe);
    server.assert_alive("GET_ID");
    server.interrupt();
}

/// Writes, discards and write-zeroes on a `--read-only` device get IOERR;
/// reads go on.
#[test]
fn a_read_only_device_answers_writes_with_ioerr() {
    let dir = Scratch::new("vhost-hostile-ro");
    let mut server = SERVE(dir.path(), true);
    let mut fe = server.connect();
    let ro = 1u64 << virtio_bindings::virtio_blk::VIRTIO_BLK_F_RO;
    assert_ne!(
        fe.features() & ro,
        0,
        "{} does not offer RO when read-only",
        server.name
    );
    let a = (u64::from(fe.config().blk_size.max(512)) / SECTOR_BYTES).max(1) as u32;
    let seg = segment_bytes(&[segment(0, a, 0)]);
    let seg_len = seg.len() as u32;
    fe.mem()
        .put_bytes(fe.layout().segments_gpa(0), &seg)
        .expect("write a segment");
    let cases: [(&str, Request); 3] = [
        ("write", Request::new(req::OUT, 0).data(4096, false)),
        ("discard", {
            let mut r = Request::new(req::DISCARD, 0).data(seg_len, false);
            r.at_segments = true;
            r
        }),
        ("write-zeroes", {
            let mut r = Request::new(req::WRITE_ZEROES, 0).data(seg_len, false);
            r.at_segments = true;
            r
        }),
    ];
    for (i, (op, r)) in cases.into_iter().enumerate() {
        let q = (i % 2) as u16;
        let got = fe.request(q, r, ANSWER_MAX).expect(op);
        eprintln!("{}: {op} on a read-only device: {got}", server.name);
        assert!(
            matches!(
                got,
                Outcome::Status {
                    status: status::IOERR,
                    ..
                }
            ),
            "{op} on a read-only device got {got}, expected IOERR"
        );
        fe.read(q, 0, 4096, ANSWER_MAX)
            .unwrap_or_else(|e| panic!("a read after the {op}: {e}"));
    }
    drop(fe);
    server.assert_alive("writes to a read-only device");
    server.interrupt();
}

/// The frontend itself, on good requests: reads, writes, flush, discard,
/// write-zeroes and get-id on both queues, read back by a second frontend.
fn good_requests(serve: Serve, tag: &str) {
    let dir = Scratch::new(tag);
    let mut server = serve(dir.path(), false);
    let mut fe = server.connect();
    let cfg = fe.config();
    eprintln!(
        "{}: features {:#x}, protocol {:?}, config {cfg:?}",
        server.name,
        fe.features(),
        fe.protocol_features()
    );
    assert_eq!(
        cfg.capacity_bytes(),
        DEVICE_BYTES,
        "{} capacity",
        server.name
    );
    assert!(
        cfg.num_queues >= 2,
        "{} has {} queues",
        server.name,
        cfg.num_queues
    );
    // 4 KiB in sectors, or a block if that is larger.
    let a = (u64::from(cfg.blk_size.max(4096)) / SECTOR_BYTES).max(1);
    for q in 0..2u16 {
        let base = 8 * 64 * u64::from(q);
        for k in 0..4u64 {
            let sector = base + 8 * k;
            fe.write(q, sector, &pattern(100 + sector), ANSWER_MAX)
                .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        }
        fe.flush(q, ANSWER_MAX)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        for k in 0..4u64 {
            let sector = base + 8 * k;
            let back = fe
                .read(q, sector, 4096, ANSWER_MAX)
                .unwrap_or_else(|e| panic!("{}: {e}", server.name));
            assert!(
                back == pattern(100 + sector),
                "{}: sector {sector} on queue {q}",
                server.name
            );
        }
        // Write-zeroes over the block at base + 8, discard of the one at
        // base + 16: both read back as zeroes (the peer's and ours do).
        fe.write_zeroes(q, &[segment(base + 8, a as u32, 0)], ANSWER_MAX)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        let z = fe
            .read(q, base + 8, 4096, ANSWER_MAX)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        assert!(
            z.iter().all(|&b| b == 0),
            "{}: write-zeroes on queue {q}",
            server.name
        );
        fe.discard(q, &[segment(base + 16, a as u32, 0)], ANSWER_MAX)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        let id = fe
            .get_id(q, ANSWER_MAX)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        eprintln!(
            "{}: queue {q}: 4 writes, flush, 4 reads, write-zeroes, discard; id {:?}",
            server.name,
            String::from_utf8_lossy(&id).trim_end_matches('\0')
        );
    }
    fe.disconnect()
        .unwrap_or_else(|e| panic!("{}: {e}", server.name));
    let mut fe = server.connect();
    for q in 0..2u16 {
        let sector = 8 * 64 * u64::from(q);
        let back = fe
            .read(1 - q, sector, 4096, ANSWER_MAX)
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
        assert!(
            back == pattern(100 + sector),
            "{}: a second frontend reads sector {sector}",
            server.name
        );
    }
    drop(fe);
    server.assert_alive("good requests");
    server.interrupt();
}

#[test]
fn the_frontend_serves_good_requests_on_two_queues() {
    good_requests(SERVE, "vhost-good");
}

/// The same frontend against the peer: its good requests are checked;
/// its answers to the hostile cases are printed, not judged (it is the
/// peer: libvhost-user marks the whole device broken on most of them, so
/// the other queue stops too, and it ignores directions and SEG_MAX), but
/// it must survive every case and serve each next frontend. The good
/// requests after a case wait only `NO_ANSWER_WAIT` here, since a broken
/// device leaves both queues silent.
#[test]
fn qemu_storage_daemon_is_the_peer() {
    good_requests(serve_qsd, "vhost-good-qsd");
    let dir = Scratch::new("vhost-hostile-qsd");
    let (reports, mut server, readback) = hostile_table(serve_qsd, dir.path(), NO_ANSWER_WAIT);
    let met = reports.iter().filter(|r| r.met).count();
    eprintln!(
        "qemu-storage-daemon: {met} of {} hostile cases as mqblk must answer them; read-back: {readback:?}",
        reports.len()
    );
    server.assert_alive("every hostile case");
    let err = server.interrupt();
    eprintln!("qemu-storage-daemon said:\n{err}");
}
