//! Graceful restart: the running process hands its listening sockets to a
//! new one over a Unix socket (`SCM_RIGHTS`), then drains and exits. The
//! sockets are never closed, so no connection is refused: connections
//! queued on them are accepted by whichever process accepts first.
//!
//! With the sockets goes the state a reload would keep (plans' buckets and
//! quotas, route limits, endpoints' health, ejections and circuit
//! breakers), so an upgrade resets nothing either (`sluicegate-proxy`'s
//! `snapshot/carry.rs` describes the document).
//!
//! Protocol, on one connection to the handover socket:
//!
//! 1. The new process sends `listeners state\n`.
//! 2. The old one answers one byte with every listening socket attached
//!    (the byte is `1` when the last one is the admin listener, else `0`).
//! 3. The new process, its config compiled, sends `state\n`. The old one
//!    stops accepting (connections wait in the listen queues), captures its
//!    state and answers `state LEN\n` and LEN bytes of state document.
//! 4. The new process imports the state, starts serving on the sockets and
//!    sends `ready\n`; the old one drains and exits. If the connection
//!    ends before `ready`, the old one accepts again and serves on.
//!
//! Older versions: a running gateway that does not know step 3 closes the
//! connection on `listeners state\n`; the new process then connects again,
//! sends `listeners\n`, and after step 2 goes straight to `ready\n`,
//! starting with empty state (a warning says so). A new process that sends
//! `listeners\n` is served the same way.

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Most listening sockets handed over (addresses times workers).
const MAX_FDS: usize = 256;
/// How long the old process waits for `ready` once it stopped accepting:
/// its clients wait that long at most if the new process hangs.
const READY_WAIT: Duration = Duration::from_secs(15);

/// The handover socket for a config file when none is given: in the
/// temporary directory, named after the config's absolute path.
pub fn default_path(config: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let h = xxhash(abs.to_string_lossy().as_bytes());
    std::env::temp_dir().join(format!("sluicegate-{h:016x}.sock"))
}

fn xxhash(b: &[u8]) -> u64 {
    // FNV-1a: a stable name, nothing more.
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Listening sockets taken over: the workers' and the admin listener's.
pub struct Taken {
    pub data: Vec<TcpListener>,
    pub admin: Option<TcpListener>,
    /// Where to ask for the state and say `ready`.
    pub conn: UnixStream,
    /// Whether the old process hands over its state (false: an older
    /// version that does not).
    pub state: bool,
}

/// The new process's side: takes the listening sockets of the process
/// serving `path`, asking for its state too.
pub fn take(path: &Path) -> io::Result<Taken> {
    match take_with(path, b"listeners state\n")? {
        Some(t) => Ok(Taken { state: true, ..t }),
        // Closed without an answer: an older version. Ask as it expects.
        None => take_with(path, b"listeners\n")?
            .ok_or_else(|| io::Error::other("handover: the old process sent nothing")),
    }
}

/// Asks with `request`; `None` when the old process closed the
/// connection without answering.
fn take_with(path: &Path, request: &[u8]) -> io::Result<Option<Taken>> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "handover socket {}: {e} (is the gateway running?)",
                path.display()
            ),
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request)?;
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = recvmsg(
        &s,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if got.bytes == 0 {
        return Ok(None);
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    let admin = match byte[0] {
        b'1' => fds.pop().map(TcpListener::from),
        _ => None,
    };
    if fds.is_empty() {
        return Err(io::Error::other("handover: no listening socket received"));
    }
    Ok(Some(Taken {
        data: fds.into_iter().map(TcpListener::from).collect(),
        admin,
        conn: s,
        state: false,
    }))
}

/// Asks the old process for its state (step 3): the document, at most
/// `sluicegate_proxy::STATE_MAX_BYTES` long.
pub fn fetch_state(s: &UnixStream) -> io::Result<Vec<u8>> {
    let max = sluicegate_proxy::STATE_MAX_BYTES;
    // Capturing a million apps' counters takes a moment.
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    (&*s).write_all(b"state\n")?;
    let mut reader = BufReader::new(s);
    let mut line = Vec::new();
    (&mut reader).take(64).read_until(b'\n', &mut line)?;
    let len = std::str::from_utf8(&line)
        .ok()
        .and_then(|l| l.strip_prefix("state "))
        .and_then(|l| l.strip_suffix('\n'))
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| {
            io::Error::other(format!(
                "unexpected answer {:?}",
                String::from_utf8_lossy(&line)
            ))
        })?;
    if len > max {
        return Err(io::Error::other(format!(
            "a state document of {len} bytes, over the {max} allowed"
        )));
    }
    let mut doc = vec![0; len];
    reader.read_exact(&mut doc)?;
    Ok(doc)
}

/// Tells the old process the new one serves: it may stop accepting.
pub fn ready(mut s: UnixStream) -> io::Result<()> {
    s.write_all(b"ready\n")
}

/// The sockets a handover passes on (duplicates of the workers' listening
/// sockets, and of the admin listener), shared with the thread serving the
/// handover socket. Emptied on shutdown: the sockets must close then.
pub type Offered =
    std::sync::Arc<std::sync::Mutex<Option<(Vec<TcpListener>, Option<TcpListener>)>>>;

/// What the running process does for a handover beyond passing sockets.
pub struct Hooks {
    /// Stops accepting and returns the state document.
    pub capture: Box<dyn Fn() -> Vec<u8> + Send>,
    /// Accepting again: the handover failed after a capture.
    pub resume: Box<dyn Fn() + Send>,
}

/// The running process's side: serves the handover socket at `path` on a
/// thread of its own, handing the `offered` sockets (and, when asked, the
/// state `hooks` capture) to whoever asks, and calls `done` once the new
/// process is ready. A failed handover leaves this process serving as
/// before.
pub fn serve(
    path: &Path,
    offered: Offered,
    hooks: Hooks,
    done: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    // A socket left by a process that is gone: replace it. One a live
    // gateway serves stays its own (several processes started from one
    // config, e.g. sharing a port with SO_REUSEPORT, each need their own).
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "handover socket {}: another gateway serves it (give each process started \
                     from this config its own --handover-socket)",
                    path.display()
                ),
            ));
        }
        let _ = std::fs::remove_file(path);
    }
    let server = UnixListener::bind(path).map_err(|e| {
        io::Error::new(e.kind(), format!("handover socket {}: {e}", path.display()))
    })?;
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("sluicegate-handover".into())
        .spawn(move || {
            let mut done = Some(done);
            for conn in server.incoming() {
                let Ok(conn) = conn else { continue };
                let result = match offered.lock() {
                    Ok(guard) => match guard.as_ref() {
                        Some((data, admin)) => {
                            let mut held = false;
                            let r = hand_over(conn, data, admin.as_ref(), &hooks, &mut held);
                            if r.is_err() && held {
                                (hooks.resume)();
                            }
                            r
                        }
                        None => return, // shutting down
                    },
                    Err(_) => return,
                };
                match result {
                    // A process checking whether this socket is alive.
                    Ok(false) => {}
                    Ok(true) => {
                        tracing::info!(socket = %path.display(), "listening sockets handed over: draining");
                        if let Some(d) = done.take() {
                            d();
                        }
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "handover failed; still serving"),
                }
            }
        })?;
    Ok(())
}

/// Serves one handover; `held` says whether accepting stopped for it.
/// False for a connection closed before asking anything (a liveness check
/// by a process started with the same socket path).
fn hand_over(
    conn: UnixStream,
    data: &[TcpListener],
    admin: Option<&TcpListener>,
    hooks: &Hooks,
    held: &mut bool,
) -> io::Result<bool> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    (&mut reader).take(64).read_line(&mut line)?;
    let with_state = match line.as_str() {
        "" => return Ok(false),
        "listeners state\n" => true,
        "listeners\n" => false,
        _ => return Err(io::Error::other(format!("unexpected request {line:?}"))),
    };
    let with_admin = admin.is_some();
    let fds: Vec<_> = data.iter().chain(admin).map(|l| l.as_fd()).collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("too many listening sockets to hand over"));
    }
    let kind: &[u8] = if with_admin { b"1" } else { b"0" };
    sendmsg(
        &conn,
        &[IoSlice::new(kind)],
        &mut control,
        SendFlags::empty(),
    )?;
    line.clear();
    (&mut reader).take(64).read_line(&mut line)?;
    if with_state && line == "state\n" {
        *held = true;
        let doc = (hooks.capture)();
        conn.set_read_timeout(Some(READY_WAIT))?;
        conn.set_write_timeout(Some(READY_WAIT))?;
        let mut w = &conn;
        w.write_all(format!("state {}\n", doc.len()).as_bytes())?;
        w.write_all(&doc)?;
        line.clear();
        (&mut reader).take(64).read_line(&mut line)?;
    }
    if line != "ready\n" {
        return Err(io::Error::other(
            "the new process did not confirm it serves (it keeps the sockets too)",
        ));
    }
    Ok(true)
}
