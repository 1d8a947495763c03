//! The bound of a context's waits (`reap_until` in
//! `crates/mqblk-core/src/context/wait.rs`): a wait for this context's own
//! I/O ends by the request timeout plus a 5 s grace. Here a bio waits for
//! a tag that another context keeps in its plug and never issues: it
//! fails with `Status::Resource` once the bound passes, instead of
//! waiting for as long as the other context sleeps.

use std::time::{Duration, Instant};

use mqblk::Status;

const TIMEOUT_MS: u64 = 200;
/// The wait's bound: the request timeout plus the grace period.
const BOUND: Duration = Duration::from_millis(TIMEOUT_MS + 5_000);

#[test]
fn a_bio_waiting_for_a_tag_another_context_keeps_fails_at_the_bound() {
    // One hardware queue with one tag: the two contexts share it.
    let dev = mqblk::open(&format!(
        "null,size=1G,hw_queues=1,queue_depth=1,io_timeout_ms={TIMEOUT_MS}"
    ))
    .unwrap();
    let mut holder = dev.context().unwrap();
    let mut waiter = dev.context().unwrap();
    // Plugged, never unplugged: the holder's request keeps the only tag.
    holder
        .submit(mqblk::Bio::read_at(0, dev.alloc_buf(4096)))
        .unwrap();

    let mut buf = dev.alloc_buf(4096);
    let t = Instant::now();
    let err = waiter.read_at(buf.as_mut_slice(), 4096).unwrap_err();
    let took = t.elapsed();
    println!("the waiting read: {err} after {took:?}");
    assert_eq!(err.status(), Status::Resource, "{err}");
    assert!(
        took >= BOUND,
        "failed after {took:?}, before the bound {BOUND:?}"
    );
    assert!(
        mqblk_test_support::time_bound("failed", took, BOUND + Duration::from_secs(2)),
        "failed after {took:?}, past the bound {BOUND:?} by more than 2 s"
    );
    // The tag was never lost: once the holder issues its request, the
    // waiter's next read goes through.
    assert_eq!(holder.poll_wait(1, |c| c.result().unwrap()), 1);
    waiter.read_at(buf.as_mut_slice(), 4096).unwrap();
}
