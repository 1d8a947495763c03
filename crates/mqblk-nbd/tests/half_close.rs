//! A client that sends its last requests and shuts its side of the socket
//! (`shutdown(SHUT_WR)`) gets every reply, then the server's close. The
//! end of input arrives with the requests, often in one wake-up of the
//! server: a read that comes back short must not be taken as "nothing
//! more until the next edge" when the peer has already closed. Over TCP,
//! where taking the replies raises no new edge on the server's socket.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::*;
use mqblk_nbd::ConnLimits;
use mqblk_nbd_proto::consts::cmd;
use mqblk_nbd_proto::{ReplyHeader, Request, TlsMode};

#[test]
#[cfg_attr(miri, ignore)]
fn requests_then_a_half_close_get_every_reply_then_the_close() {
    let srv = TestServer::start_with(
        vec![export("", "ram,size=8M")],
        ConnLimits::default(),
        TlsMode::Off,
        None,
        true,
    );
    let addr = srv.tcp.expect("a TCP server");
    for round in 0..20u64 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(matches!(go(&mut s), Go::Served));
        let n = 1 + round * 3;
        // Every request and the shutdown in one burst.
        let mut burst = Vec::new();
        for i in 0..n {
            let r = Request {
                flags: 0,
                cmd: cmd::READ,
                cookie: i,
                offset: i * 512,
                len: 512,
            };
            burst.extend_from_slice(&r.encode());
        }
        s.write_all(&burst).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        for i in 0..n {
            let mut h = [0u8; 16];
            s.read_exact(&mut h).unwrap();
            match ReplyHeader::decode(&h).unwrap() {
                ReplyHeader::Simple { error, cookie } => {
                    assert_eq!((error, cookie), (0, i), "round {round}")
                }
                other => panic!("round {round}: expected a simple reply, got {other:?}"),
            }
            let mut b = [0xffu8; 512];
            s.read_exact(&mut b).unwrap();
            assert_eq!(b, [0u8; 512]);
        }
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => {}
            other => panic!("round {round}: the server did not close after the replies: {other:?}"),
        }
    }
    srv.stop();
}
