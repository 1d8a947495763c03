//! A property of the data path: any sequence of writes, write-zeroes,
//! discards and flushes, in two sessions (the image closed and opened
//! again between them), reads back exactly as a plain in-memory model of
//! the disk says, on small images of 512 B, 4 KiB and 64 KiB clusters
//! made by `create=` on tmpfs; and `qemu-img check` then finds no error
//! and no leak.

mod common;

use common::{first_diff, open, read_all, Dir};
use mqblk_test_support::run_ok;
use proptest::prelude::*;

const SIZE: u64 = 256 << 10;

#[derive(Clone, Debug)]
enum Op {
    Write { block: u64, blocks: u64, fill: u8 },
    Zero { block: u64, blocks: u64 },
    Discard { block: u64, blocks: u64 },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    let range = (0..SIZE / 512, 1..64u64).prop_map(|(b, n)| {
        (
            b.min(SIZE / 512 - 1),
            n.min(SIZE / 512 - b.min(SIZE / 512 - 1)),
        )
    });
    prop_oneof![
        4 => (range.clone(), any::<u8>()).prop_map(|((block, blocks), fill)| Op::Write { block, blocks, fill }),
        1 => range.clone().prop_map(|(block, blocks)| Op::Zero { block, blocks }),
        1 => range.prop_map(|(block, blocks)| Op::Discard { block, blocks }),
        1 => Just(Op::Flush),
    ]
}

fn session(spec: &str, ops: &[Op], model: &mut [u8]) {
    let dev = open(spec).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(64 * 512);
    for o in ops {
        match *o {
            Op::Write {
                block,
                blocks,
                fill,
            } => {
                let (off, len) = (block * 512, (blocks * 512) as usize);
                let b = &mut buf.as_mut_slice()[..len];
                for (i, x) in b.iter_mut().enumerate() {
                    *x = fill ^ (i / 512) as u8;
                }
                ctx.write_at(b, off).unwrap();
                model[off as usize..off as usize + len].copy_from_slice(b);
            }
            Op::Zero { block, blocks } => {
                ctx.write_zeroes(block * 512, blocks * 512).unwrap();
                model[(block * 512) as usize..((block + blocks) * 512) as usize].fill(0);
            }
            Op::Discard { block, blocks } => {
                ctx.discard(block * 512, blocks * 512).unwrap();
                model[(block * 512) as usize..((block + blocks) * 512) as usize].fill(0);
            }
            Op::Flush => ctx.flush().unwrap(),
        }
    }
    drop(ctx);
    assert_eq!(
        first_diff(&read_all(&dev), model),
        None,
        "{spec}: differs from the model"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn reads_follow_the_model(cs in prop::sample::select(vec![512u64, 4096, 65536]), a in prop::collection::vec(op(), 0..40), b in prop::collection::vec(op(), 0..40)) {
        let dir = Dir::new("model");
        let img = dir.s("m.qcow2");
        let mut model = vec![0u8; SIZE as usize];
        session(&format!("qcow2:{img},create={SIZE},cluster_size={cs}"), &a, &mut model);
        session(&format!("qcow2:{img}"), &b, &mut model);
        let out = run_ok("qemu-img", &["check", &img]);
        prop_assert!(out.contains("No errors were found") && !out.contains("leaked"), "{}", out);
    }
}
