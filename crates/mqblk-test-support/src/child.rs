//! A child process a test starts and watches: its stdout and stderr are
//! read line by line as they come (each line with the moment it was read)
//! and kept whole for the end, every wait has a bound, and the process is
//! signalled and killed only by its own pid, and only while it is not yet
//! reaped (so the pid cannot be another process's).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One line of a child's output, and when it was read.
#[derive(Clone, Debug)]
pub struct Line {
    /// When the reading thread got it.
    pub at: Instant,
    /// The line, without its newline.
    pub text: String,
}

/// One output pipe of a child, read by a thread of its own: each line
/// goes to a channel, and all of it is the thread's result.
struct Pipe {
    name: &'static str,
    lines: Receiver<Line>,
    all: Option<JoinHandle<String>>,
}

impl Pipe {
    fn read(name: &'static str, r: impl Read + Send + 'static) -> Pipe {
        let (tx, lines) = mpsc::channel();
        let all = std::thread::spawn(move || {
            let mut all = String::new();
            for text in BufReader::new(r).lines() {
                let Ok(text) = text else { break };
                all.push_str(&text);
                all.push('\n');
                let _ = tx.send(Line {
                    at: Instant::now(),
                    text,
                });
            }
            all
        });
        Pipe {
            name,
            lines,
            all: Some(all),
        }
    }

    /// The first line from now on that holds `what`, within `max`.
    fn wait_for(&self, who: &str, what: &str, max: Duration) -> Line {
        let start = Instant::now();
        loop {
            let left = max.saturating_sub(start.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.text.contains(what) => return l,
                Ok(_) => {}
                Err(e) => panic!(
                    "{who}: never saw {what:?} on {} within {max:?}: {e}",
                    self.name
                ),
            }
        }
    }

    /// All it read, once the pipe is closed.
    fn all(&mut self) -> String {
        self.all
            .take()
            .expect("a pipe's text is taken once")
            .join()
            .expect("the pipe's reader")
    }
}

/// A child with stdin from /dev/null and stdout and stderr watched.
/// Dropped, it is killed (SIGKILL, by its pid) and reaped, unless it was
/// reaped already.
pub struct Watched {
    /// Its command line, for messages.
    who: String,
    child: Child,
    /// Set once it is reaped: from then on its pid is not signalled.
    status: Option<ExitStatus>,
    /// The last signal this test sent it, for messages.
    signalled: Option<String>,
    out: Pipe,
    err: Pipe,
}

impl Watched {
    /// Start `cmd`, its stdin from /dev/null, its stdout and stderr
    /// piped and read as they come.
    pub fn spawn(cmd: &mut Command) -> Watched {
        let who = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start `{who}`: {e}"));
        let out = Pipe::read("stdout", child.stdout.take().expect("piped stdout"));
        let err = Pipe::read("stderr", child.stderr.take().expect("piped stderr"));
        Watched {
            who,
            child,
            status: None,
            signalled: None,
            out,
            err,
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `sig` (as `kill` takes it: `-INT`, `-TERM`, ...) to its pid.
    pub fn signal(&mut self, sig: &str) {
        assert!(
            self.status.is_none(),
            "`{}` is reaped: its pid is no longer its own",
            self.who
        );
        let pid = self.pid().to_string();
        let st = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("run kill");
        assert!(st.success(), "kill {sig} {pid} (`{}`)", self.who);
        self.signalled = Some(sig.to_string());
    }

    /// SIGKILL it, by its pid, and reap it; nothing if it is reaped
    /// already.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Its exit status if it has exited (reaping it), without waiting.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Wait for it to exit, at most `max`: past that it is killed and the
    /// test fails. Its exit status.
    pub fn wait(&mut self, max: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                return st;
            }
            if start.elapsed() > max {
                self.kill();
                let after = match &self.signalled {
                    Some(sig) => format!(" (after kill {sig})"),
                    None => String::new(),
                };
                panic!("`{}` did not exit within {max:?}{after}", self.who);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait for it to exit (as [`Watched::wait`]): its exit status, all
    /// of its stdout and all of its stderr.
    pub fn finish(mut self, max: Duration) -> (ExitStatus, String, String) {
        let st = self.wait(max);
        (st, self.out.all(), self.err.all())
    }

    /// The next stdout line that holds `what`, within `max`; the test
    /// fails if none comes (or stdout closes first).
    pub fn wait_out(&self, what: &str, max: Duration) -> Line {
        self.out.wait_for(&self.who, what, max)
    }

    /// The next stderr line that holds `what`, as [`Watched::wait_out`].
    pub fn wait_err(&self, what: &str, max: Duration) -> Line {
        self.err.wait_for(&self.who, what, max)
    }

    /// Wait until `path` (its socket) exists, as [`crate::wait_for_path`]:
    /// failing at once if it exits first.
    pub fn wait_for_path(&mut self, path: &std::path::Path) {
        crate::wait::wait_for_path(path, &self.who, Some(&mut self.child));
    }
}

/// Run `cmd` to its end (as a [`Watched`] child), at most `max`: past
/// that it is killed, by its pid, and the test fails; and fail the test
/// unless it succeeds, with its stdout and stderr. Its stdout.
pub fn run_ok_within(cmd: &mut Command, max: Duration) -> String {
    let w = Watched::spawn(cmd);
    let who = w.who.clone();
    let (status, out, err) = w.finish(max);
    assert!(status.success(), "`{who}` exited {status}:\n{out}{err}");
    out
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)]
    fn lines_come_as_written_and_whole_at_the_end() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo one; echo two >&2; echo three; exit 3"]);
        let w = Watched::spawn(&mut c);
        assert_eq!(w.wait_out("thr", Duration::from_secs(30)).text, "three");
        assert_eq!(w.wait_err("two", Duration::from_secs(30)).text, "two");
        let (st, out, err) = w.finish(Duration::from_secs(30));
        assert_eq!(st.code(), Some(3));
        assert_eq!(out, "one\nthree\n");
        assert_eq!(err, "two\n");
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_signal_goes_to_its_pid() {
        let mut w = Watched::spawn(Command::new("sleep").arg("60"));
        w.signal("-TERM");
        let st = w.wait(Duration::from_secs(30));
        assert!(!st.success(), "{st}");
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    #[should_panic(expected = "did not exit within")]
    fn a_wait_past_its_bound_fails() {
        let mut w = Watched::spawn(Command::new("sleep").arg("60"));
        w.wait(Duration::from_millis(50));
    }
}
