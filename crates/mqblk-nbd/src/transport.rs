//! The byte streams NBD runs over: TCP or a unix socket, optionally
//! wrapped in TLS (rustls) after `NBD_OPT_STARTTLS`.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A connected socket.
#[derive(Debug)]
pub enum Socket {
    /// TCP.
    Tcp(TcpStream),
    /// Unix domain socket.
    Unix(UnixStream),
}

impl Socket {
    /// Receive timeout: a blocked read returns `WouldBlock`/`TimedOut`
    /// after this long, so the caller can look at its deadlines.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(t),
            Socket::Unix(s) => s.set_read_timeout(t),
        }
    }

    /// Send timeout.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(t),
            Socket::Unix(s) => s.set_write_timeout(t),
        }
    }

    /// Shut down both directions (wakes a thread blocked on it).
    pub fn shutdown(&self) {
        let _ = match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
            Socket::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// Another handle to the same socket.
    pub fn try_clone(&self) -> io::Result<Socket> {
        Ok(match self {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
        })
    }

    /// Make reads and writes non-blocking (the server's event loop).
    pub fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_nonblocking(true),
            Socket::Unix(s) => s.set_nonblocking(true),
        }
    }

    /// The descriptor, for an epoll set.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        match self {
            Socket::Tcp(s) => s.as_fd(),
            Socket::Unix(s) => s.as_fd(),
        }
    }

    /// Disable Nagle on TCP: replies and requests are small and latency
    /// bound.
    pub fn set_nodelay(&self) {
        if let Socket::Tcp(s) = self {
            let _ = s.set_nodelay(true);
        }
    }
}

impl Read for Socket {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        }
    }
    #[inline]
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write_vectored(bufs),
            Socket::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A server-side stream: plain, or TLS after `STARTTLS`.
#[derive(Debug)]
pub enum ServerStream {
    /// No TLS.
    Plain(Socket),
    /// TLS over the socket.
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, Socket>>),
}

impl ServerStream {
    /// The socket underneath.
    pub fn socket(&self) -> &Socket {
        match self {
            ServerStream::Plain(s) => s,
            ServerStream::Tls(t) => &t.sock,
        }
    }

    /// True if TLS is running.
    pub fn is_tls(&self) -> bool {
        matches!(self, ServerStream::Tls(_))
    }

    /// Send TLS close_notify if TLS is running.
    pub fn close_tls(&mut self) {
        if let ServerStream::Tls(t) = self {
            t.conn.send_close_notify();
            let _ = t.conn.complete_io(&mut t.sock);
        }
    }
}

impl Read for ServerStream {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ServerStream::Plain(s) => s.read(buf),
            ServerStream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for ServerStream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ServerStream::Plain(s) => s.write(buf),
            ServerStream::Tls(t) => t.write(buf),
        }
    }
    #[inline]
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            ServerStream::Plain(s) => s.write_vectored(bufs),
            ServerStream::Tls(t) => t.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            ServerStream::Plain(_) => Ok(()),
            ServerStream::Tls(t) => t.flush(),
        }
    }
}

/// True for the errors a read or write timeout produces.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A client connection's sending half: plain, or TLS. With TLS the rustls
/// connection is shared with the receiving half ([`ClientRx`]) under a
/// lock; the lock is never held across a blocking read.
#[derive(Debug)]
pub enum ClientTx {
    /// No TLS.
    Plain(Socket),
    /// TLS over the socket.
    Tls {
        /// The socket (a clone of the receiving half's).
        sock: Socket,
        /// The TLS state both halves use.
        conn: std::sync::Arc<std::sync::Mutex<rustls::ClientConnection>>,
    },
}

/// A client connection's receiving half (see [`ClientTx`]).
#[derive(Debug)]
pub enum ClientRx {
    /// No TLS.
    Plain(Socket),
    /// TLS over the socket.
    Tls {
        /// The socket.
        sock: Socket,
        /// The TLS state both halves use.
        conn: std::sync::Arc<std::sync::Mutex<rustls::ClientConnection>>,
        /// Ciphertext read from the socket and not yet given to rustls.
        raw: Box<[u8]>,
        /// `raw[start..end]` is pending.
        start: usize,
        /// End of the pending bytes.
        end: usize,
    },
}

fn lock_tls(
    m: &std::sync::Mutex<rustls::ClientConnection>,
) -> std::sync::MutexGuard<'_, rustls::ClientConnection> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ClientTx {
    /// The socket underneath.
    pub fn socket(&self) -> &Socket {
        match self {
            ClientTx::Plain(s) | ClientTx::Tls { sock: s, .. } => s,
        }
    }

    /// Shut the socket down (wakes the receiving half).
    pub fn shutdown(&self) {
        self.socket().shutdown();
    }

    /// The receiving half, on a clone of the socket.
    pub fn receiver(&self) -> io::Result<ClientRx> {
        Ok(match self {
            ClientTx::Plain(s) => ClientRx::Plain(s.try_clone()?),
            ClientTx::Tls { sock, conn } => ClientRx::Tls {
                sock: sock.try_clone()?,
                conn: conn.clone(),
                raw: vec![0u8; 64 * 1024].into_boxed_slice(),
                start: 0,
                end: 0,
            },
        })
    }
}

impl Write for ClientTx {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientTx::Plain(s) => s.write(buf),
            ClientTx::Tls { sock, conn } => {
                let mut c = lock_tls(conn);
                let n = c.writer().write(buf)?;
                while c.wants_write() {
                    c.write_tls(sock)?;
                }
                Ok(n)
            }
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            ClientTx::Plain(s) => s.write_vectored(bufs),
            ClientTx::Tls { .. } => {
                let buf = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &**b);
                self.write(buf)
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `recv` that does not wait (`MSG_DONTWAIT`): the socket itself stays
/// blocking for the sending half, which shares its file description.
fn recv_now(sock: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::net::recv(sock.fd(), &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok((n, _)) => return Ok(n),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

impl ClientRx {
    /// Shut the socket down.
    pub fn shutdown(&self) {
        match self {
            ClientRx::Plain(s) | ClientRx::Tls { sock: s, .. } => s.shutdown(),
        }
    }

    /// The socket underneath.
    pub fn socket(&self) -> &Socket {
        match self {
            ClientRx::Plain(s) | ClientRx::Tls { sock: s, .. } => s,
        }
    }

    /// Read what has arrived, without waiting: `WouldBlock` if nothing
    /// has, `Ok(0)` at the end of the stream.
    pub fn read_now(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf, true)
    }

    fn read_inner(&mut self, buf: &mut [u8], now: bool) -> io::Result<usize> {
        let (sock, conn, raw, start, end) = match self {
            ClientRx::Plain(s) if now => return recv_now(s, buf),
            ClientRx::Plain(s) => return s.read(buf),
            ClientRx::Tls {
                sock,
                conn,
                raw,
                start,
                end,
            } => (sock, conn, raw, start, end),
        };
        loop {
            {
                let mut c = lock_tls(conn);
                match c.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if *start < *end {
                    let mut rd = &raw[*start..*end];
                    let n = c.read_tls(&mut rd)?;
                    *start += n;
                    c.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    while c.wants_write() {
                        c.write_tls(sock)?;
                    }
                    continue;
                }
            }
            // Nothing decrypted and nothing pending: wait for the socket,
            // without the lock (the sending half may need it meanwhile).
            let n = if now {
                recv_now(sock, raw)?
            } else {
                sock.read(raw)?
            };
            if n == 0 {
                return Ok(0);
            }
            *start = 0;
            *end = n;
        }
    }
}

impl Read for ClientRx {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf, false)
    }
}
