//! `mqblk serve` under an address-space limit (issue 34, item 5): 200
//! clients with no credentials negotiate, queue 32 MiB reads and never read
//! the replies. Each connection may hold 64 MiB, so without a server-wide
//! bound they ask for 12.5 GiB, and under `ulimit -v` 4 GiB the server
//! aborts (`memory allocation of 33554432 bytes failed`) and drops every
//! client. With `--max-memory 1G` it stops taking requests from the
//! connections that hold the most, says so, serves a polite client's read
//! within 1 s, drops the clients that do not read their replies after
//! `--stall-timeout`, and lives. The server is killed by its own pid.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_nbd_proto::consts::{
    client_flags, handshake_flags, opt, IHAVEOPT, NBDMAGIC, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC,
};
use mqblk_test_support::Watched;

/// The address space the server runs in (KiB, as `ulimit -v` takes it).
const AS_LIMIT_KIB: u64 = 4 << 20;
/// The server-wide budget given: well inside the address space.
const MAX_MEMORY: &str = "1G";
/// Clients that never read.
const GREEDY: usize = 200;
/// Reads each greedy client queues, of `GREEDY_READ` bytes (the largest
/// payload): twice what its connection may hold.
const READS_EACH: u64 = 4;
const GREEDY_READ: u32 = 32 << 20;
/// Seconds a client may leave its replies unread.
const STALL_S: u64 = 10;
/// The bound on a polite client's read while the budget is full.
const POLITE_BOUND: Duration = Duration::from_secs(1);

/// Negotiate the default export (fixed newstyle, `EXPORT_NAME`, no
/// zeroes): the stream is then in transmission.
fn negotiate(addr: &str) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_nodelay(true)?;
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting)?;
    assert_eq!(
        u64::from_be_bytes(greeting[..8].try_into().unwrap()),
        NBDMAGIC
    );
    assert_eq!(
        u64::from_be_bytes(greeting[8..16].try_into().unwrap()),
        IHAVEOPT
    );
    let server_flags = u16::from_be_bytes([greeting[16], greeting[17]]);
    assert_ne!(
        server_flags & handshake_flags::NO_ZEROES,
        0,
        "the server sends zeroes"
    );
    let mut hello = Vec::new();
    hello.extend_from_slice(
        &(client_flags::C_FIXED_NEWSTYLE | client_flags::C_NO_ZEROES).to_be_bytes(),
    );
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&opt::EXPORT_NAME.to_be_bytes());
    hello.extend_from_slice(&0u32.to_be_bytes());
    s.write_all(&hello)?;
    let mut export = [0u8; 10];
    s.read_exact(&mut export)?;
    Ok(s)
}

/// An `NBD_CMD_READ` request.
fn read_request(cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut r = [0u8; 28];
    r[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    // Flags 0, type 0 (read).
    r[8..16].copy_from_slice(&cookie.to_be_bytes());
    r[16..24].copy_from_slice(&offset.to_be_bytes());
    r[24..28].copy_from_slice(&len.to_be_bytes());
    r
}

/// Fail with the server's last words if it is gone.
fn assert_alive(server: &mut Option<Watched>, when: &str) {
    let w = server.as_mut().expect("the server is watched");
    if let Some(st) = w.try_wait() {
        let (_, _, err) = server.take().unwrap().finish(Duration::from_secs(5));
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        eprintln!("the server died {when}: {st}; its last words: {tail:?}");
        panic!("the server died {when}: {st}: {tail:?}");
    }
}

#[test]
fn clients_that_never_read_cannot_exhaust_the_server_and_a_polite_client_is_served() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let script = format!(
        "ulimit -v {AS_LIMIT_KIB} && exec \"$0\" serve null,size=1G --listen {addr} \
         --max-memory {MAX_MEMORY} --max-connections-per-peer 256 --stall-timeout {STALL_S}"
    );
    let mut server = Some(Watched::spawn(Command::new("sh").args([
        "-c",
        &script,
        env!("CARGO_BIN_EXE_mqblk"),
    ])));
    let up = server
        .as_ref()
        .unwrap()
        .wait_err("mqblk serve: listening on", Duration::from_secs(60));
    eprintln!("{}", up.text);
    assert!(
        up.text
            .contains("buffer memory up to 1024 MiB (--max-memory)"),
        "{}",
        up.text
    );

    // The greedy clients: each queues its reads and never reads a reply.
    let started = Instant::now();
    let mut greedy = Vec::with_capacity(GREEDY);
    for i in 0..GREEDY {
        let mut s = match negotiate(&addr) {
            Ok(s) => s,
            Err(e) => {
                assert_alive(&mut server, &format!("as greedy client {i} connected"));
                panic!("greedy client {i} could not negotiate: {e}");
            }
        };
        let mut reqs = Vec::new();
        for r in 0..READS_EACH {
            let offset = (i as u64 * READS_EACH + r) * u64::from(GREEDY_READ) % (1 << 30);
            reqs.extend_from_slice(&read_request(r, offset, GREEDY_READ));
        }
        s.write_all(&reqs).expect("queue the reads");
        greedy.push(s);
    }
    eprintln!(
        "{GREEDY} greedy clients queued {READS_EACH} reads of {} MiB each in {:?}",
        GREEDY_READ >> 20,
        started.elapsed()
    );
    // A server that runs out of memory aborts at once; give it a moment.
    std::thread::sleep(Duration::from_millis(500));
    assert_alive(&mut server, "under the greedy clients");
    let full = server
        .as_ref()
        .unwrap()
        .wait_err("memory budget full", Duration::from_secs(10));
    eprintln!("{}", full.text);

    // A polite client: negotiates, reads a block, reads its reply.
    let t = Instant::now();
    let mut polite = negotiate(&addr).expect("the polite client negotiates");
    polite
        .write_all(&read_request(7, 4096, 4096))
        .expect("send the polite read");
    let mut reply = [0u8; 16 + 4096];
    polite
        .read_exact(&mut reply)
        .expect("the polite client's reply");
    let took = t.elapsed();
    eprintln!(
        "the polite client was served (connect, negotiate, 4 KiB read) in {took:?}, bound \
         {POLITE_BOUND:?}"
    );
    assert_eq!(
        u32::from_be_bytes(reply[..4].try_into().unwrap()),
        SIMPLE_REPLY_MAGIC
    );
    assert_eq!(u32::from_be_bytes(reply[4..8].try_into().unwrap()), 0);
    assert_eq!(u64::from_be_bytes(reply[8..16].try_into().unwrap()), 7);
    assert!(
        mqblk_test_support::time_bound("polite client served", took, POLITE_BOUND),
        "the polite client waited {took:?} (bound {POLITE_BOUND:?})"
    );
    assert_alive(&mut server, "after the polite client");

    // The greedy clients do not read their replies: dropped after the
    // stall timeout (counted from when their replies stopped going out).
    let stall = Duration::from_secs(STALL_S);
    let dropped = server
        .as_ref()
        .unwrap()
        .wait_err("not reading replies", stall + Duration::from_secs(10));
    let after = dropped.at.duration_since(started);
    eprintln!(
        "{} ({} ms after the greedy clients started, stall timeout {} ms)",
        dropped.text,
        after.as_millis(),
        stall.as_millis()
    );
    assert!(
        dropped.text.contains(&format!(
            "not reading replies for {} ms (stall timeout)",
            stall.as_millis()
        )),
        "{}",
        dropped.text
    );
    assert!(
        after >= stall,
        "dropped after {after:?}, before the stall timeout"
    );
    assert_alive(&mut server, "after dropping the greedy clients");
    drop(greedy);
    drop(polite);
}
