//! The unix socket a server listens on (control plane): claimed safely,
//! released only if it is still ours.
//!
//! nbdkit's rule, kept here: a path that holds anything but a socket is
//! never touched. A socket is replaced only when it is stale (a connect is
//! refused: nothing listens), and only while holding `PATH.lock`, an
//! `flock`ed file, so two servers never share one path. On exit the socket
//! is removed only if the path still names the socket this server bound,
//! and the lock file only if this server created it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// How many times a lock file that was removed under us is reopened.
const LOCK_ATTEMPTS_MAX: u32 = 8;

/// A bound unix socket and the lock that guards its path.
#[derive(Debug)]
pub(crate) struct ClaimedSocket {
    pub(crate) listener: UnixListener,
    path: PathBuf,
    /// `(st_dev, st_ino)` of the socket this server bound.
    id: (u64, u64),
    _lock: SocketLock,
}

#[derive(Debug)]
struct SocketLock {
    /// Held open (and so locked) for the server's life.
    _file: File,
    path: PathBuf,
    created: bool,
    id: (u64, u64),
}

/// The lock file's path for socket `path`: `PATH.lock`.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

fn id_of(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

fn describe(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else {
        "not a socket"
    }
}

/// Claim `path`: take its lock, refuse anything but a missing path or a
/// stale socket, and bind. Errors say what is at the path and what to do.
pub(crate) fn claim(path: &Path) -> Result<ClaimedSocket, String> {
    let shown = path.display();
    // A path that is not a socket is refused before any file is made.
    check_not_other(path)?;
    let lock = SocketLock::take(path)?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot look at {shown}: {e}")),
        Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => {
                return Err(format!(
                    "{shown} is in use: a server is listening on it; stop that server or \
                     choose another --socket path"
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                // Stale: nothing listens, and we hold the lock.
                std::fs::remove_file(path)
                    .map_err(|e| format!("cannot remove the stale socket {shown}: {e}"))?;
            }
            Err(e) => {
                return Err(format!(
                    "{shown} is a socket that cannot be checked ({e}); remove it if no \
                     server uses it, or choose another --socket path"
                ))
            }
        },
        Ok(_) => check_not_other(path)?,
    }
    let listener = bind_listening(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => format!(
            "cannot listen on {shown}: the directory {} does not exist",
            path.parent().unwrap_or(Path::new(".")).display()
        ),
        _ => format!("cannot listen on {shown}: {e}"),
    })?;
    let id = std::fs::symlink_metadata(path)
        .map(|m| id_of(&m))
        .map_err(|e| format!("cannot look at {shown} after binding it: {e}"))?;
    Ok(ClaimedSocket {
        listener,
        path: path.to_path_buf(),
        id,
        _lock: lock,
    })
}

/// Bind and listen on `path` so that the path appears only once it
/// listens: a client that sees the file can connect. (A plain bind makes
/// the file before `listen`, and a connect in between is refused.) The
/// socket is bound under a short temporary name beside it, then renamed
/// into place; a temporary name too long for a socket address falls back
/// to binding `path` itself.
fn bind_listening(path: &Path) -> io::Result<UnixListener> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".mqblk-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = match UnixListener::bind(&tmp) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => return UnixListener::bind(path),
        Err(e) => return Err(e),
    };
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// Refuse a path that holds anything but a socket (or nothing).
fn check_not_other(path: &Path) -> Result<(), String> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => Ok(()),
        Ok(m) if m.file_type().is_dir() => Err(format!(
            "{shown} is a directory; --socket needs the path of a socket to create, such \
             as {}",
            path.join("mqblk.sock").display()
        )),
        Ok(m) => Err(format!(
            "{shown} exists and is {}, not a socket; it is left alone: remove it yourself \
             or choose another --socket path",
            describe(&m.file_type())
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot look at {shown}: {e}")),
    }
}

impl SocketLock {
    fn take(socket: &Path) -> Result<SocketLock, String> {
        let path = lock_path(socket);
        let shown = path.display();
        for _ in 0..LOCK_ATTEMPTS_MAX {
            let (file, created) = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => (f, true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let m = std::fs::symlink_metadata(&path)
                        .map_err(|e| format!("cannot look at the lock file {shown}: {e}"))?;
                    if !m.file_type().is_file() {
                        return Err(format!(
                            "the lock file {shown} is {}, not a regular file; remove it or \
                             choose another --socket path",
                            describe(&m.file_type())
                        ));
                    }
                    match OpenOptions::new().read(true).open(&path) {
                        Ok(f) => (f, false),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(format!("cannot open the lock file {shown}: {e}")),
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    return Err(format!(
                        "cannot listen on {}: the directory {} does not exist",
                        socket.display(),
                        socket.parent().unwrap_or(Path::new(".")).display()
                    ))
                }
                Err(e) => return Err(format!("cannot create the lock file {shown}: {e}")),
            };
            // flock(LOCK_EX | LOCK_NB).
            if let Err(e) = file.try_lock() {
                if created {
                    // Never left behind: it is ours, and empty.
                    let _ = std::fs::remove_file(&path);
                }
                if matches!(e, std::fs::TryLockError::WouldBlock) {
                    return Err(format!(
                        "{} is taken: another mqblk serve holds {shown}; stop it or choose \
                         another --socket path",
                        socket.display()
                    ));
                }
                return Err(format!("cannot lock {shown}: {e}"));
            }
            // The file we locked must still be the one at the path: a
            // server that exits removes its lock file, and whoever opened
            // it just before holds a lock on nothing.
            let fid = file
                .metadata()
                .map(|m| id_of(&m))
                .map_err(|e| format!("cannot look at the lock file {shown}: {e}"))?;
            match std::fs::symlink_metadata(&path) {
                Ok(m) if id_of(&m) == fid => {
                    if created {
                        use std::io::Write;
                        let _ = writeln!(&file, "{}", std::process::id());
                    }
                    return Ok(SocketLock {
                        _file: file,
                        path,
                        created,
                        id: fid,
                    });
                }
                _ => continue,
            }
        }
        Err(format!(
            "cannot take the lock file {shown}: it keeps being replaced by another process"
        ))
    }
}

impl Drop for ClaimedSocket {
    fn drop(&mut self) {
        // Remove the socket only if the path still names the one we bound.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| id_of(&m) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
        // The lock goes next (a field), with its file.
    }
}

impl Drop for SocketLock {
    /// The lock file goes with the lock, if this server made it: after a
    /// refused claim (something else listens at the path) as after a run.
    fn drop(&mut self) {
        if self.created && std::fs::symlink_metadata(&self.path).is_ok_and(|m| id_of(&m) == self.id)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "mqblk-sockpath-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_regular_file_is_left_byte_identical() {
        let d = tempdir("file");
        let p = d.join("data");
        std::fs::write(&p, b"precious bytes").unwrap();
        let e = claim(&p).unwrap_err();
        assert!(
            e.contains("exists and is a regular file, not a socket"),
            "{e}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"precious bytes");
        assert!(!lock_path(&p).exists(), "no lock file is left behind");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_is_named() {
        let d = tempdir("dir");
        let e = claim(&d).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_live_path_is_refused_and_kept() {
        let d = tempdir("live");
        let p = d.join("s");
        let first = claim(&p).unwrap();
        let e = claim(&p).unwrap_err();
        assert!(e.contains("another mqblk serve holds"), "{e}");
        assert!(p.exists(), "the first server's socket is still there");
        // Another program's listener, without our lock, is refused too.
        let other = d.join("other");
        let _l = UnixListener::bind(&other).unwrap();
        let e = claim(&other).unwrap_err();
        assert!(e.contains("a server is listening on it"), "{e}");
        assert!(other.exists());
        assert!(
            !lock_path(&other).exists(),
            "the refused claim left its lock file behind"
        );
        drop(first);
        assert!(!p.exists(), "the socket it bound is removed");
        assert!(!lock_path(&p).exists(), "the lock it created is removed");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_foreign_one_is_not_removed() {
        let d = tempdir("stale");
        let p = d.join("s");
        drop(UnixListener::bind(&p).unwrap());
        assert!(p.exists(), "a dropped listener leaves a stale socket");
        let c = claim(&p).unwrap();
        // Someone replaces the path while we serve: not ours to remove.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"theirs").unwrap();
        drop(c);
        assert_eq!(std::fs::read(&p).unwrap(), b"theirs");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let d = tempdir("nodir");
        let e = claim(&d.join("no/such/s")).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
