//! TLS over a TCP socket, driven by readiness like the plain socket: the
//! rustls state machine is fed with raw `recv` and drained with raw `send`
//! (the same calls as plain TCP; on a worker with a ring, the ring's
//! buffered receive and send, see [`Socket`]), so sessions see one kind of
//! stream and the worker's deadlines bound every wait. The handshake runs in the
//! connection's own task, bounded by `timeouts.tls_handshake`.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::task::{Context, Poll};

use super::identity::ClientIdentity;
pub(crate) use super::socket::Socket;
use crate::clock::deadline::{Stop, Wait};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};

/// A TLS connection (server or client side) over a TCP socket.
pub(crate) struct TlsStream {
    sock: Socket,
    conn: RefCell<Connection>,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("sock", &self.sock)
            .finish()
    }
}

/// Why a handshake failed, for the failure counter's `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeError {
    /// Not TLS at all (plain HTTP to a TLS port, or garbage).
    NotTls,
    /// TLS, but refused: no common version, cipher or group, a bad
    /// client certificate, an alert from the peer.
    Refused,
    /// The handshake did not finish within `timeouts.tls_handshake`.
    Timeout,
    /// The peer closed or reset the connection mid-handshake.
    Closed,
    /// The worker is shutting down.
    Shutdown,
}

impl HandshakeError {
    pub(crate) fn label(self) -> &'static str {
        match self {
            HandshakeError::NotTls => "not_tls",
            HandshakeError::Refused => "refused",
            HandshakeError::Timeout => "timeout",
            HandshakeError::Closed => "closed",
            HandshakeError::Shutdown => "shutdown",
        }
    }
}

/// `recv` on the socket for rustls's `read_tls`, with the same readiness
/// clearing after a short read as plain reads.
struct SocketRead<'a>(&'a Socket);

impl Read for SocketRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.recv(buf)
    }
}

/// `send` on the socket for rustls's `write_tls`.
struct SocketWrite<'a>(&'a Socket);

impl Write for SocketWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.send(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Sends what rustls holds encrypted; `WouldBlock` while some is left.
fn flush(c: &mut Connection, sock: &Socket) -> io::Result<()> {
    while c.wants_write() {
        if c.write_tls(&mut SocketWrite(sock))? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

impl TlsStream {
    /// Runs the server side of a handshake on `sock`, waiting at most until
    /// `wait`'s deadline. Bytes the client sent after its handshake (its
    /// first request) stay buffered for the first read.
    pub(crate) async fn accept(
        sock: impl Into<Socket>,
        config: Arc<ServerConfig>,
        wait: Wait<'_>,
    ) -> Result<TlsStream, HandshakeError> {
        let conn = ServerConnection::new(config).map_err(|_| HandshakeError::Refused)?;
        let s = TlsStream {
            sock: sock.into(),
            conn: RefCell::new(Connection::Server(conn)),
        };
        match wait.bound(s.handshake()).await {
            Ok(Ok(())) => Ok(s),
            Ok(Err((e, _))) => Err(e),
            Err(Stop::Timeout) => Err(HandshakeError::Timeout),
            Err(Stop::Shutdown) => Err(HandshakeError::Shutdown),
        }
    }

    /// Runs the client side of a handshake with an upstream, verifying it
    /// as `name`, until `wait`'s deadline. The error says why (a failed
    /// verification names the problem).
    pub(crate) async fn connect(
        sock: impl Into<Socket>,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        wait: Wait<'_>,
    ) -> io::Result<TlsStream> {
        let conn = ClientConnection::new(config, name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let s = TlsStream {
            sock: sock.into(),
            conn: RefCell::new(Connection::Client(conn)),
        };
        match wait.bound(s.handshake()).await {
            Ok(Ok(())) => Ok(s),
            Ok(Err((_, Some(e)))) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("TLS handshake: {e}"),
            )),
            Ok(Err((e, None))) => Err(io::Error::other(format!("TLS handshake: {}", e.label()))),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        }
    }

    /// Drives the handshake to its end, unbounded (the caller bounds it).
    async fn handshake(&self) -> Result<(), (HandshakeError, Option<rustls::Error>)> {
        let mut got_any = false;
        loop {
            // Some: wait for the socket to be readable (true) or writable.
            let blocked = {
                let mut c = self.conn.borrow_mut();
                match flush(&mut c, &self.sock) {
                    Ok(()) if !c.is_handshaking() => return Ok(()),
                    Ok(()) => match c.read_tls(&mut SocketRead(&self.sock)) {
                        Ok(0) => return Err((HandshakeError::Closed, None)),
                        Ok(_) => {
                            if let Err(e) = c.process_new_packets() {
                                // Tell the peer why (the alert), as far as
                                // the socket takes it now.
                                let _ = flush(&mut c, &self.sock);
                                return Err((classify(&e, got_any), Some(e)));
                            }
                            got_any = true;
                            None
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(true),
                        Err(_) => return Err((HandshakeError::Closed, None)),
                    },
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(false),
                    Err(_) => return Err((HandshakeError::Closed, None)),
                }
            };
            let Some(readable) = blocked else { continue };
            let r = if readable {
                std::future::poll_fn(|cx| self.sock.poll_read_ready(cx)).await
            } else {
                self.sock.writable().await
            };
            if r.is_err() {
                return Err((HandshakeError::Closed, None));
            }
        }
    }

    /// The socket under the TLS layer.
    pub(crate) fn socket(&self) -> &Socket {
        &self.sock
    }

    // Out of line: the plain-TCP branch of `Stream`'s match stays small
    // enough to inline into the hot read and write paths.
    #[inline(never)]
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut c = self.conn.borrow_mut();
        loop {
            match c.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: an end like any
                // other, as for plain TCP; framing tells a cut message.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if c.read_tls(&mut SocketRead(&self.sock))? == 0 {
                return Ok(0);
            }
            if let Err(e) = c.process_new_packets() {
                let _ = flush(&mut c, &self.sock);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // Answers to post-handshake messages (a key update) go out
            // with the next write if the socket is full now.
            if c.wants_write() {
                let _ = flush(&mut c, &self.sock);
            }
        }
    }

    // Out of line: the plain-TCP branch of `Stream`'s match stays small
    // enough to inline into the hot read and write paths.
    #[inline(never)]
    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut c = self.conn.borrow_mut();
        // What was encrypted earlier goes first: a full socket holds the
        // writer back instead of growing rustls's buffer.
        flush(&mut c, &self.sock)?;
        let n = c.writer().write(bytes)?;
        if n == 0 && !bytes.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match flush(&mut c, &self.sock) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    // Out of line: the plain-TCP branch of `Stream`'s match stays small
    // enough to inline into the hot read and write paths.
    #[inline(never)]
    pub(crate) fn try_flush(&self) -> io::Result<()> {
        flush(&mut self.conn.borrow_mut(), &self.sock)
    }

    // Out of line: the plain-TCP branch of `Stream`'s match stays small
    // enough to inline into the hot read and write paths.
    #[inline(never)]
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Decrypted bytes waiting (a second request that came in the same
        // record as the first), or a close already seen: no need to wait.
        let waiting = match self.conn.borrow_mut().process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
            Err(_) => true,
        };
        if waiting {
            return Poll::Ready(Ok(()));
        }
        self.sock.poll_read_ready(cx)
    }

    /// Sends close_notify (as much as the socket takes now), then shuts
    /// the socket's write side.
    pub(crate) fn shutdown_write(&self) {
        let mut c = self.conn.borrow_mut();
        c.send_close_notify();
        let _ = flush(&mut c, &self.sock);
        self.sock.shutdown_write();
    }

    /// Who the client's certificate names, when it sent one (the listener
    /// verified it against its `client_ca` during the handshake).
    pub(crate) fn client_identity(&self) -> Option<ClientIdentity> {
        let c = self.conn.borrow();
        let der = c.peer_certificates()?.first()?;
        ClientIdentity::of(der.as_ref())
    }

    /// HTTP/2 was chosen by ALPN (by the client, on a listener; by the
    /// server, on an upstream connection).
    pub(crate) fn alpn_h2(&self) -> bool {
        self.conn.borrow().alpn_protocol() == Some(b"h2")
    }

    /// The negotiated protocol version and cipher suite, for the log.
    pub(crate) fn version_and_cipher(&self) -> (&'static str, &'static str) {
        let c = self.conn.borrow();
        let version = match c.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "",
        };
        let cipher = c
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str())
            .unwrap_or("");
        (version, cipher)
    }
}

/// A record layer error: garbage or plain HTTP before any TLS record was
/// understood is `NotTls`, anything else a refusal.
fn classify(e: &rustls::Error, got_any: bool) -> HandshakeError {
    match e {
        rustls::Error::InvalidMessage(_) if !got_any => HandshakeError::NotTls,
        _ => HandshakeError::Refused,
    }
}
