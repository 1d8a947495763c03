//! Structured replies on a sparse export: a large read of a range with
//! holes comes back as `OFFSET_DATA` and `OFFSET_HOLE` chunks, and the
//! chunks cover the request exactly once.

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::*;
use mqblk_nbd_proto::consts::{cmd, reply_flags, reply_type};
use mqblk_nbd_proto::transmission::decode_offset_hole;
use mqblk_nbd_proto::ReplyHeader;

const MIB: u64 = 1 << 20;

/// Read every chunk of the reply to `cookie`: (type, offset, len, data).
fn chunks(c: &mut RawClient, cookie: u64) -> Vec<(u16, u64, u32, Vec<u8>)> {
    let mut v = Vec::new();
    loop {
        let mut h = [0u8; 20];
        c.s.read_exact(&mut h).unwrap();
        let ReplyHeader::Chunk(h) = ReplyHeader::decode(&h).unwrap() else {
            panic!("expected a chunk");
        };
        assert_eq!(h.cookie, cookie);
        let mut p = vec![0u8; h.len as usize];
        c.s.read_exact(&mut p).unwrap();
        match h.typ {
            reply_type::OFFSET_DATA => {
                let off = u64::from_be_bytes(p[..8].try_into().unwrap());
                v.push((h.typ, off, h.len - 8, p[8..].to_vec()));
            }
            reply_type::OFFSET_HOLE => {
                let (off, len) = decode_offset_hole(&p).unwrap();
                v.push((h.typ, off, len, Vec::new()));
            }
            t => panic!("unexpected chunk type {t}"),
        }
        if h.flags & reply_flags::DONE != 0 {
            return v;
        }
    }
}

#[test]
fn a_sparse_read_comes_back_as_data_and_hole_chunks() {
    let srv = TestServer::start(vec![export("", "ram,size=16M")]);
    let s = UnixStream::connect(&srv.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut c = RawClient::handshake(s, "", true);
    let data = pattern(9, 64 << 10);
    c.send(cmd::WRITE, 0, 1, MIB, data.len() as u32, &data);
    // Replies without data stay simple replies.
    assert_eq!(c.simple_reply(), (0, 1));

    c.send(cmd::READ, 0, 2, 0, (4 * MIB) as u32, &[]);
    let got = chunks(&mut c, 2);
    let kinds: Vec<u16> = got.iter().map(|g| g.0).collect();
    assert_eq!(
        kinds,
        [
            reply_type::OFFSET_HOLE,
            reply_type::OFFSET_DATA,
            reply_type::OFFSET_HOLE
        ],
        "{:?}",
        got.iter().map(|g| (g.0, g.1, g.2)).collect::<Vec<_>>()
    );
    // The chunks tile the request, and the data is what was written.
    let mut at = 0;
    for (typ, off, len, bytes) in &got {
        assert_eq!(*off, at);
        at += u64::from(*len);
        if *typ == reply_type::OFFSET_DATA {
            assert_eq!(*off, MIB);
            assert!(bytes[..] == data[..]);
        }
    }
    assert_eq!(at, 4 * MIB);

    // A small read stays one data chunk (no extent lookup on the hot path).
    c.send(cmd::READ, 0, 3, 0, 4096, &[]);
    let got = chunks(&mut c, 3);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, reply_type::OFFSET_DATA);
    assert!(got[0].3.iter().all(|&b| b == 0));
    drop(c);
    srv.stop();
}
