//! A raw HTTP/2 client for the attack tests, frame by frame, over
//! cleartext (prior knowledge) or TLS (rustls, ALPN `h2`): it writes
//! whatever frames a test makes, then reads the server's frames to the end
//! of the connection and reports how that end came (a GOAWAY and its
//! code, a TLS close_notify, a FIN, a reset), so a test can tell a server
//! that said why it closed from one that just dropped the connection.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use rustls::pki_types::{CertificateDer, ServerName};

/// Frame types (RFC 9113 6).
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const GOAWAY: u8 = 7;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One frame: its header's fields and payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A whole `GET` request on stream `id`: HEADERS with END_STREAM and
/// END_HEADERS, its fields coded from HPACK's static table and literals
/// that are never indexed (so no dynamic table state), `cookie` among
/// them when not empty.
pub fn get(id: u32, https: bool, path: &str, cookie: &str) -> Vec<u8> {
    let mut block = vec![0x82, if https { 0x87 } else { 0x86 }];
    // Static table indexes: 4 `:path`, 1 `:authority`, 32 `cookie`.
    for (name, value) in [(4, path), (1, "a.test"), (32, cookie)] {
        if !value.is_empty() {
            hpack_int(&mut block, 0, 4, name);
            hpack_int(&mut block, 0, 7, value.len());
            block.extend_from_slice(value.as_bytes());
        }
    }
    frame(HEADERS, 0x5, id, &block)
}

/// An HPACK integer (RFC 7541 5.1) with an `n`-bit prefix after `flags`.
fn hpack_int(out: &mut Vec<u8>, flags: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push(0x80 | (v & 0x7f) as u8);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Rapid Reset (CVE-2023-44487): `n` streams from `first` on, each opened
/// with a request (carrying `cookie`) and cancelled at once (RST_STREAM
/// `CANCEL`), each stream's frames a piece of its own.
pub fn rapid_reset(first: u32, n: u32, https: bool, cookie: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let id = first + 2 * i;
            let mut s = get(id, https, "/fixed", cookie);
            s.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
            s
        })
        .collect()
}

/// How the server ended the connection, in the order it came.
#[derive(Debug, Default)]
pub struct Ending {
    /// The GOAWAY's error code, if one came.
    pub goaway: Option<u32>,
    /// Frames (of any type) read after the GOAWAY.
    pub after_goaway: usize,
    /// A TLS close_notify came (TLS only), after everything else.
    pub close_notify: bool,
    /// Then the TCP stream ended with a FIN.
    pub fin: bool,
    /// The stream was reset, or failed otherwise: what it said.
    pub error: Option<String>,
    /// Nothing ended it before the wait ran out.
    pub timed_out: bool,
    pub elapsed: Duration,
}

/// One client connection.
pub struct Client {
    tls: Option<rustls::ClientConnection>,
    tcp: TcpStream,
    https: bool,
}

impl Client {
    /// Connects to 127.0.0.1:`port` in cleartext, the preface and an empty
    /// SETTINGS sent. `sndbuf` sets the socket's send buffer (fixed, so
    /// that the kernel does not grow it): how much the client can have in
    /// flight that the server has not read.
    pub fn plain(port: u16, sndbuf: Option<usize>) -> Client {
        Client::open(port, None, sndbuf)
    }

    /// Connects over TLS to 127.0.0.1:`port` as `a.test`, trusting the CA
    /// whose PEM body (base64) is `ca_b64`, and checks `h2` was chosen.
    pub fn tls(port: u16, ca_b64: &str, sndbuf: Option<usize>) -> Client {
        let der = base64::engine::general_purpose::STANDARD
            .decode(ca_b64)
            .expect("the CA's base64");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(der)).expect("the test CA");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let name = ServerName::try_from("a.test").expect("a server name");
        let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a TLS client");
        Client::open(port, Some(conn), sndbuf)
    }

    fn open(port: u16, tls: Option<rustls::ClientConnection>, sndbuf: Option<usize>) -> Client {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        if let Some(size) = sndbuf {
            socket.set_send_buffer_size(size).expect("SO_SNDBUF");
        }
        socket
            .connect_timeout(&addr.into(), Duration::from_secs(5))
            .expect("connect");
        let tcp = TcpStream::from(socket);
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let https = tls.is_some();
        let mut c = Client { tls, tcp, https };
        if let Some(t) = c.tls.as_mut() {
            while t.is_handshaking() {
                t.complete_io(&mut c.tcp).expect("TLS handshake");
            }
            assert_eq!(t.alpn_protocol(), Some(&b"h2"[..]), "ALPN h2");
        }
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        assert!(c.send(&hello), "the preface was not taken");
        c
    }

    pub fn https(&self) -> bool {
        self.https
    }

    /// Writes `bytes`; false when the server stopped taking them (it may
    /// have closed, which the reading tells).
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        match self.tls.as_mut() {
            Some(t) => {
                let mut s = rustls::Stream::new(t, &mut self.tcp);
                s.write_all(bytes).and_then(|()| s.flush()).is_ok()
            }
            None => self.tcp.write_all(bytes).is_ok(),
        }
    }

    /// Reads what the server sends until the connection ends or `wait`
    /// passes, and says how it ended.
    pub fn ending(&mut self, wait: Duration) -> Ending {
        let began = Instant::now();
        let deadline = began + wait;
        let mut end = Ending::default();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.read_by(deadline, true, &mut chunk) {
                Got::Bytes(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    take_frames(&mut buf, &mut end);
                    continue;
                }
                // rustls reads nothing more only after a close_notify;
                // then the socket itself should end with a FIN.
                Got::End if self.tls.is_some() => {
                    end.close_notify = true;
                    match self.read_by(deadline, false, &mut chunk) {
                        Got::End => end.fin = true,
                        Got::Bytes(_) => end.error = Some("bytes after the close_notify".into()),
                        Got::Failed(e) => end.error = Some(e),
                        Got::TimedOut => end.timed_out = true,
                    }
                }
                Got::End => end.fin = true,
                Got::Failed(e) => end.error = Some(e),
                Got::TimedOut => end.timed_out = true,
            }
            break;
        }
        end.elapsed = began.elapsed();
        end
    }

    /// One read by `deadline`: of plaintext (`tls`, on a TLS connection)
    /// or of the socket itself.
    fn read_by(&mut self, deadline: Instant, tls: bool, chunk: &mut [u8]) -> Got {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Got::TimedOut;
            }
            self.tcp.set_read_timeout(Some(left)).unwrap();
            let read = match self.tls.as_mut() {
                Some(t) if tls => tls_read(t, &mut self.tcp, chunk),
                _ => self.tcp.read(chunk),
            };
            match read {
                Ok(0) => return Got::End,
                Ok(n) => return Got::Bytes(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => return Got::Failed(e.to_string()),
            }
        }
    }
}

/// What one read got.
enum Got {
    Bytes(usize),
    End,
    Failed(String),
    TimedOut,
}

/// Reads plaintext from a TLS connection without writing anything (what
/// a failed write left unsent stays so): `Ok(0)` after a close_notify,
/// `UnexpectedEof` when the socket ended without one.
fn tls_read(
    t: &mut rustls::ClientConnection,
    tcp: &mut TcpStream,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    loop {
        match t.reader().read(buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            r => return r,
        }
        if t.read_tls(tcp)? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        t.process_new_packets().map_err(std::io::Error::other)?;
    }
}

/// Takes the whole frames at the start of `buf`, noting a GOAWAY and what
/// follows it.
fn take_frames(buf: &mut Vec<u8>, end: &mut Ending) {
    let mut at = 0;
    while buf.len() - at >= 9 {
        let h = &buf[at..at + 9];
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        if buf.len() - at < 9 + len {
            break;
        }
        let payload = &buf[at + 9..at + 9 + len];
        if end.goaway.is_some() {
            end.after_goaway += 1;
        } else if h[3] == GOAWAY && len >= 8 {
            end.goaway = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
        }
        at += 9 + len;
    }
    buf.drain(..at);
}
