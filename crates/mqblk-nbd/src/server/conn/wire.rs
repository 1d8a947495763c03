//! The bottom of a server connection: its bytes in and out, plain or
//! through TLS (rustls's non-blocking API). Everything above reads and
//! writes through a [`Wire`]; it knows nothing of the protocol.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::BorrowedFd;

use crate::transport::Socket;

/// A connection's socket, and its TLS session once `STARTTLS` started it.
pub(super) struct Wire {
    pub(super) sock: Socket,
    pub(super) tls: Option<Box<rustls::ServerConnection>>,
}

pub(super) fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Wire {
    pub(super) fn new(sock: Socket) -> Wire {
        Wire { sock, tls: None }
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.fd()
    }

    /// Read what is there. `Ok(0)` is the end of the stream.
    pub(super) fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_mut() else {
            return self.sock.read(buf);
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(e),
            }
            match tls.read_tls(&mut self.sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    let r = tls.process_new_packets();
                    // Handshake messages and alerts go out even on error.
                    while tls.wants_write() {
                        match tls.write_tls(&mut self.sock) {
                            Ok(_) => {}
                            Err(e) if would_block(&e) => break,
                            Err(e) => return Err(e),
                        }
                    }
                    if let Err(e) = r {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// True if a `recv` of `asked` bytes that returned `got` left the
    /// socket empty. A stream socket's read takes everything queued up to
    /// the buffer's end, so a short one drained it; whatever arrives later
    /// raises a new edge in epoll. Through TLS, a short read says nothing
    /// of the socket.
    pub(super) fn drained(&self, asked: usize, got: usize) -> bool {
        self.tls.is_none() && got < asked
    }

    /// Push what TLS holds to the socket. `Ok(true)` when all is out.
    pub(super) fn push_tls(&mut self) -> io::Result<bool> {
        push_tls_on(&mut self.sock, &mut self.tls)
    }

    /// Send from `iov`; `WouldBlock` when nothing could be taken.
    pub(super) fn send(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        send_on(&mut self.sock, &mut self.tls, iov)
    }
}

/// Push what TLS holds to the socket. `Ok(true)` when all is out.
fn push_tls_on(
    sock: &mut Socket,
    tls: &mut Option<Box<rustls::ServerConnection>>,
) -> io::Result<bool> {
    let Some(tls) = tls.as_mut() else {
        return Ok(true);
    };
    while tls.wants_write() {
        match tls.write_tls(sock) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Send from `iov` (through TLS if it runs); `WouldBlock` when nothing
/// could be taken.
fn send_on(
    sock: &mut Socket,
    tls: &mut Option<Box<rustls::ServerConnection>>,
    iov: &[IoSlice<'_>],
) -> io::Result<usize> {
    if tls.is_none() {
        return sock.write_vectored(iov);
    }
    // rustls takes nothing while its send buffer is full: push that out,
    // then try once more.
    for _ in 0..2 {
        let t = tls.as_mut().expect("checked above");
        let n = t.writer().write_vectored(iov)?;
        let all_out = push_tls_on(sock, tls)?;
        if n > 0 || iov.iter().all(|s| s.is_empty()) {
            return Ok(n);
        }
        if !all_out {
            break;
        }
    }
    Err(io::ErrorKind::WouldBlock.into())
}
