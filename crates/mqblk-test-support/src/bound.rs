//! A time bound that defines correctness (a timeout plus its grace, a
//! signal's deadline), printed in one line that `scripts/time-bounds.sh`
//! reads, so that the worst figure of a run can be quoted against its
//! bound:
//!
//! ```text
//! bound: <test>[<what>] <figure> ms of <bound> ms
//! ```

use std::time::Duration;

/// Print `figure` against `bound` for the running test (`what` names the
/// bound when a test has several; spaces in either become `_`), and
/// whether it is within: the caller asserts on it with its own message.
pub fn time_bound(what: &str, figure: Duration, bound: Duration) -> bool {
    let what = what.replace(char::is_whitespace, "_");
    let name = crate::machine::test_name().replace(char::is_whitespace, "_");
    let name = if what.is_empty() {
        name
    } else {
        format!("{name}[{what}]")
    };
    eprintln!(
        "bound: {name} {} ms of {} ms",
        figure.as_millis(),
        bound.as_millis()
    );
    figure < bound
}
