//! The Rust conventions a user expects: `?` on submit, errors that become
//! `std::io::Error`, closures as completions, futures joined without a
//! runtime, and rejected I/Os counted alike whatever the reason.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mqblk::{Bio, Completion, Error};

fn submit_with_question_mark(
    ctx: &mut mqblk::Context,
    bio: Bio,
) -> Result<(), Box<dyn std::error::Error>> {
    ctx.submit(bio)?;
    Ok(())
}

fn io_result(ctx: &mut mqblk::Context) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    ctx.read_at(&mut buf, 1 << 40)?;
    Ok(())
}

#[test]
fn submit_errors_work_with_question_mark_and_keep_the_bio() {
    let dev = mqblk::open("null,size=8M,bioset_size=2,completion=inline").unwrap();
    let mut ctx = dev.context().unwrap();
    submit_with_question_mark(&mut ctx, Bio::read_at(0, dev.alloc_buf(4096))).unwrap();
    submit_with_question_mark(&mut ctx, Bio::read_at(4096, dev.alloc_buf(4096))).unwrap();
    ctx.unplug();
    // Both slots now hold completions nobody polled.
    assert_eq!(ctx.ready(), 2);
    let e =
        submit_with_question_mark(&mut ctx, Bio::read_at(8192, dev.alloc_buf(4096))).unwrap_err();
    assert!(e.to_string().contains("poll"), "{e}");
    let e = ctx
        .submit(Bio::read_at(8192, dev.alloc_buf(4096)))
        .unwrap_err();
    assert!(matches!(e.error(), Error::Unpolled { slots: 2, .. }), "{e}");
    let bio = e.into_bio();
    assert_eq!(bio.offset_bytes(), 16 * 512);
    assert_eq!(ctx.poll(|c| c.result().unwrap()), 2);
    ctx.submit(bio).unwrap();
}

#[test]
fn errors_convert_to_io_errors_with_a_fitting_kind() {
    let dev = mqblk::open("null,size=8M").unwrap();
    let mut ctx = dev.context().unwrap();
    let e = io_result(&mut ctx).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let inner = e.get_ref().unwrap().downcast_ref::<Error>().unwrap();
    assert!(matches!(inner, Error::OutOfRange { .. }));
    let ro = mqblk::open("null,size=8M,ro=1").unwrap();
    let mut rctx = ro.context().unwrap();
    let e: std::io::Error = rctx.write_at(&[0u8; 512], 0).unwrap_err().into();
    assert_eq!(e.kind(), std::io::ErrorKind::ReadOnlyFilesystem);
}

#[test]
fn closures_are_completion_handlers() {
    let dev = mqblk::open("null,size=8M").unwrap();
    let mut ctx = dev.context().unwrap();
    let bytes = Arc::new(AtomicU64::new(0));
    let b = bytes.clone();
    let handler: Arc<dyn mqblk::EndIo> = Arc::new(move |c: Completion<'_>| {
        b.fetch_add(c.bio().len_bytes(), Ordering::Relaxed);
    });
    for i in 0..4 {
        let mut bio = Bio::read_at(i * 4096, dev.alloc_buf(4096));
        bio.set_end_io(Some(handler.clone()));
        ctx.submit(bio).unwrap();
    }
    ctx.poll_wait(4, |_| panic!("handled by the closure"));
    assert_eq!(bytes.load(Ordering::Relaxed), 4 * 4096);
}

#[test]
fn futures_join_without_a_runtime() {
    let dev = mqblk::open("null,size=8M,memory_backed=1,completion=deferred").unwrap();
    let actx = mqblk::AsyncContext::new(dev.context().unwrap());
    let writes = (0..8u64).map(|i| {
        let mut b = dev.alloc_buf(4096);
        b.as_mut_slice().fill(i as u8 + 1);
        actx.write(b, i * 4096)
    });
    for (_, r) in mqblk::block_on(mqblk::join_all(writes)) {
        r.unwrap();
    }
    let reads = (0..8u64).map(|i| actx.read(dev.alloc_buf(4096), i * 4096));
    for (i, (buf, r)) in mqblk::block_on(mqblk::join_all(reads))
        .into_iter()
        .enumerate()
    {
        r.unwrap();
        assert!(buf.as_slice().iter().all(|&b| b == i as u8 + 1));
    }
}

#[test]
fn rejected_ios_are_counted_alike_whatever_the_reason() {
    let dev = mqblk::open("null,size=8M,bounce=0").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(8192);
    let before = dev.stats().snapshot();
    // Misaligned offset, bad length, out of range, misaligned buffer.
    assert!(ctx.read_at(&mut buf.as_mut_slice()[..4096], 100).is_err());
    assert!(ctx.read_at(&mut buf.as_mut_slice()[..1000], 0).is_err());
    assert!(ctx
        .read_at(&mut buf.as_mut_slice()[..4096], 8 << 20)
        .is_err());
    assert!(ctx.read_at(&mut buf.as_mut_slice()[1..4097], 0).is_err());
    drop(ctx);
    let after = dev.stats().snapshot();
    assert_eq!(after.bios - before.bios, 4, "every rejected I/O is a bio");
    assert_eq!(after.errors - before.errors, 4, "and an error");
}

/// The first bounce on a context is said once on stderr, with the
/// offending address and length; later ones are only counted. Run in a
/// child process (this test binary again), whose stderr the test reads.
#[test]
fn the_first_bounce_on_a_context_is_said_once() {
    if std::env::var_os("MQBLK_BOUNCE_CHILD").is_some() {
        let dev = mqblk::open("null,size=8M,memory_backed=1").unwrap();
        let mut ctx = dev.context().unwrap();
        let mut raw = vec![0u8; 4096 + 1];
        for i in 0..3 {
            ctx.read_at(&mut raw[1..], i * 4096).unwrap();
        }
        assert_eq!(dev.stats().snapshot().bytes_copied, 3 * 4096);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "the_first_bounce_on_a_context_is_said_once",
            "--exact",
            "--nocapture",
        ])
        .env("MQBLK_BOUNCE_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("bounce buffer").count(), 1, "{err}");
    assert!(
        err.contains("of 4096 bytes is not aligned to 512 bytes"),
        "{err}"
    );
}
