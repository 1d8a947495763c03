//! `serve_all` with exports that are plain threads: reports come in the
//! order given; a failing or panicking export stops the others, and each
//! result says how its export ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqblk_export::{serve_all, Error, Export, ExportReport, StopSignal};

/// How long a fake export waits for its stop before it says it was never
/// stopped (a bound, not a speed: a stop arrives in microseconds).
const STOP_WAIT_MAX: Duration = Duration::from_secs(10);

enum End {
    /// Serve until stopped, then report.
    WaitForStop,
    /// Fail at once.
    Fail,
    /// Panic at once.
    Panic,
}

struct Fake {
    name: &'static str,
    end: End,
    stop: Arc<AtomicBool>,
}

impl Fake {
    fn boxed(name: &'static str, end: End) -> Box<dyn Export> {
        Box::new(Fake {
            name,
            end,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }
}

impl Export for Fake {
    fn kind(&self) -> &'static str {
        self.name
    }

    fn started(&self) -> String {
        format!("{} started", self.name)
    }

    fn stop_signal(&self) -> StopSignal {
        let stop = self.stop.clone();
        StopSignal::new(move || stop.store(true, Ordering::Release))
    }

    fn serve(self: Box<Self>) -> Result<ExportReport, Error> {
        match self.end {
            End::Fail => Err(Error::option("fake", format!("{} failed", self.name))),
            End::Panic => panic!("{} panics on purpose", self.name),
            End::WaitForStop => {
                let start = Instant::now();
                while !self.stop.load(Ordering::Acquire) {
                    if start.elapsed() > STOP_WAIT_MAX {
                        return Err(Error::option("fake", "never stopped"));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                eprintln!(
                    "{} stopped {} ms after it started (bound {} ms)",
                    self.name,
                    start.elapsed().as_millis(),
                    STOP_WAIT_MAX.as_millis()
                );
                Ok(ExportReport {
                    lines: vec![format!("{} stopped", self.name)],
                })
            }
        }
    }
}

#[test]
fn a_failing_export_stops_the_others_and_results_keep_their_order() {
    let out = serve_all(vec![
        Fake::boxed("a", End::WaitForStop),
        Fake::boxed("b", End::Fail),
        Fake::boxed("c", End::WaitForStop),
    ]);
    let kinds: Vec<&str> = out.iter().map(|r| r.0).collect();
    assert_eq!(kinds, ["a", "b", "c"]);
    assert_eq!(out[0].1.as_ref().unwrap().lines, ["a stopped"]);
    assert_eq!(out[1].1.as_ref().unwrap_err().to_string(), "b failed");
    assert_eq!(out[2].1.as_ref().unwrap().lines, ["c stopped"]);
}

#[test]
fn a_panicking_export_is_an_error_and_stops_the_others() {
    let out = serve_all(vec![
        Fake::boxed("p", End::Panic),
        Fake::boxed("w", End::WaitForStop),
    ]);
    assert!(matches!(out[0].1, Err(Error::Panicked { kind: "p" })));
    assert_eq!(
        out[0].1.as_ref().unwrap_err().to_string(),
        "the p export panicked"
    );
    assert_eq!(out[1].1.as_ref().unwrap().lines, ["w stopped"]);
}

#[test]
fn exports_that_are_stopped_from_outside_all_report() {
    let a = Fake::boxed("a", End::WaitForStop);
    let b = Fake::boxed("b", End::WaitForStop);
    let stops = [a.stop_signal(), b.stop_signal()];
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        stops.iter().for_each(StopSignal::stop);
    });
    let out = serve_all(vec![a, b]);
    stopper.join().expect("the stopper thread");
    assert_eq!(out.len(), 2);
    for (kind, r) in out {
        assert_eq!(r.unwrap().lines, [format!("{kind} stopped")]);
    }
}

#[test]
fn no_export_no_result() {
    assert!(serve_all(Vec::new()).is_empty());
}
