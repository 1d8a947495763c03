//! The parser alone: messages built as the kernel builds them, and any
//! bytes at all.

use super::*;
use crate::abi::{body_len, opcode, WRITE_PREFIX_LEN};
use proptest::prelude::*;

/// A message: header, then `body`.
fn msg(op: u32, unique: u64, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((IN_HEADER_LEN + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&op.to_ne_bytes());
    m.extend_from_slice(&unique.to_ne_bytes());
    m.extend_from_slice(&1u64.to_ne_bytes());
    m.extend_from_slice(&[0u8; 16]);
    m.extend_from_slice(body);
    m
}

fn body(fields: &[(usize, &[u8])], len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    for (at, v) in fields {
        b[*at..*at + v.len()].copy_from_slice(v);
    }
    b
}

#[test]
fn a_read_is_read() {
    let b = body(
        &[(8, &4096u64.to_ne_bytes()), (16, &65536u32.to_ne_bytes())],
        body_len::READ_IN,
    );
    let Parsed::Request(h, op) = parse(&msg(opcode::READ, 7, &b)) else {
        panic!("not a request")
    };
    assert_eq!(h.unique, 7);
    assert_eq!(
        op,
        Op::Read {
            offset: 4096,
            size: 65536
        }
    );
}

#[test]
fn a_write_carries_its_data_after_the_prefix() {
    let mut b = body(
        &[(8, &8192u64.to_ne_bytes()), (16, &3u32.to_ne_bytes())],
        WRITE_IN_LEN,
    );
    b.extend_from_slice(b"abc");
    let m = msg(opcode::WRITE, 9, &b);
    assert_eq!(&m[WRITE_PREFIX_LEN..], b"abc");
    assert_eq!(
        parse(&m),
        Parsed::Request(
            header(&m).unwrap(),
            Op::Write {
                offset: 8192,
                size: 3
            }
        )
    );
}

#[test]
fn a_write_whose_size_disagrees_is_malformed() {
    let mut b = body(&[(16, &4u32.to_ne_bytes())], WRITE_IN_LEN);
    b.extend_from_slice(b"abc");
    assert!(matches!(
        parse(&msg(opcode::WRITE, 1, &b)),
        Parsed::Malformed(_, _)
    ));
}

#[test]
fn init_reads_both_flag_words() {
    let b = body(
        &[
            (0, &7u32.to_ne_bytes()),
            (4, &41u32.to_ne_bytes()),
            (8, &131072u32.to_ne_bytes()),
            (12, &0x4000_0001u32.to_ne_bytes()),
            (16, &2u32.to_ne_bytes()),
        ],
        64,
    );
    let Parsed::Request(_, op) = parse(&msg(opcode::INIT, 1, &b)) else {
        panic!("not a request")
    };
    assert_eq!(
        op,
        Op::Init {
            major: 7,
            minor: 41,
            max_readahead: 131072,
            flags: 0x4000_0001 | 2 << 32
        }
    );
}

#[test]
fn short_bodies_are_malformed_with_their_unique() {
    for op in [
        opcode::INIT,
        opcode::SETATTR,
        opcode::OPEN,
        opcode::READ,
        opcode::WRITE,
        opcode::FSYNC,
        opcode::FALLOCATE,
        opcode::LSEEK,
    ] {
        match parse(&msg(op, 42, &[0u8; 7])) {
            Parsed::Malformed(h, _) => assert_eq!(h.unique, 42, "opcode {op}"),
            other => panic!("opcode {op}: {other:?}"),
        }
    }
}

#[test]
fn fallocate_lseek_fsync_setattr_are_read() {
    let b = body(
        &[
            (8, &1u64.to_ne_bytes()),
            (16, &2u64.to_ne_bytes()),
            (24, &3u32.to_ne_bytes()),
        ],
        body_len::FALLOCATE_IN,
    );
    assert_eq!(
        parse(&msg(opcode::FALLOCATE, 1, &b)),
        Parsed::Request(
            header(&msg(opcode::FALLOCATE, 1, &b)).unwrap(),
            Op::Fallocate {
                offset: 1,
                len: 2,
                mode: 3
            }
        )
    );
    let b = body(
        &[(8, &5u64.to_ne_bytes()), (16, &4u32.to_ne_bytes())],
        body_len::LSEEK_IN,
    );
    let Parsed::Request(_, op) = parse(&msg(opcode::LSEEK, 1, &b)) else {
        panic!()
    };
    assert_eq!(
        op,
        Op::Lseek {
            offset: 5,
            whence: 4
        }
    );
    let b = body(&[(8, &1u32.to_ne_bytes())], body_len::FSYNC_IN);
    let Parsed::Request(_, op) = parse(&msg(opcode::FSYNC, 1, &b)) else {
        panic!()
    };
    assert_eq!(op, Op::Fsync { datasync: true });
    let b = body(
        &[
            (0, &8u32.to_ne_bytes()),
            (16, &1234u64.to_ne_bytes()),
            (68, &0o600u32.to_ne_bytes()),
        ],
        body_len::SETATTR_IN,
    );
    let Parsed::Request(_, Op::SetAttr(sa)) = parse(&msg(opcode::SETATTR, 1, &b)) else {
        panic!()
    };
    assert_eq!((sa.valid, sa.size, sa.mode), (8, 1234, 0o600));
}

#[test]
fn unknown_opcodes_are_unsupported_and_forget_wants_no_reply() {
    let Parsed::Request(_, op) = parse(&msg(999, 1, &[])) else {
        panic!()
    };
    assert_eq!(op, Op::Unsupported(999));
    assert!(wants_reply(&op));
    let Parsed::Request(_, op) = parse(&msg(opcode::FORGET, 1, &[0; 8])) else {
        panic!()
    };
    assert!(!wants_reply(&op));
}

#[test]
fn a_length_unlike_the_read_is_broken() {
    let mut m = msg(opcode::GETATTR, 1, &[0; 16]);
    m.push(0);
    assert!(matches!(parse(&m), Parsed::Broken(_)));
    assert!(matches!(parse(&m[..10]), Parsed::Broken(_)));
}

proptest! {
    /// Any bytes: no panic; a request's header states the length read,
    /// and a write's data is exactly what follows its prefix.
    #[test]
    fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        match parse(&bytes) {
            Parsed::Request(h, op) => {
                prop_assert_eq!(h.len as usize, bytes.len());
                if let Op::Write { size, .. } = op {
                    prop_assert_eq!(bytes.len() - WRITE_PREFIX_LEN, size as usize);
                }
            }
            Parsed::Malformed(h, _) => prop_assert_eq!(h.len as usize, bytes.len()),
            Parsed::Broken(_) => {}
        }
    }

    /// A well-formed header with any opcode and any body: never broken.
    #[test]
    fn a_true_header_is_never_broken(op in 0u32..60, body in proptest::collection::vec(any::<u8>(), 0..120)) {
        prop_assert!(!matches!(parse(&msg(op, 3, &body)), Parsed::Broken(_)));
    }
}
