//! Graceful restart: the running process hands its listening sockets to a
//! new one over a Unix socket (`SCM_RIGHTS`), then drains and exits. The
//! sockets are never closed, so no connection is refused: connections
//! queued on them are accepted by whichever process accepts first.
//!
//! Protocol, on one connection to the handover socket: the new process
//! sends `listeners\n`; the old one answers one byte with every listening
//! socket attached (the byte is `1` when the last one is the admin
//! listener, else `0`); the new process starts serving on them and sends
//! `ready\n`; the old one stops accepting and drains.

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Write};
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
    /// Where to say `ready`.
    pub conn: UnixStream,
}

/// The new process's side: takes the listening sockets of the process
/// serving `path`.
pub fn take(path: &Path) -> io::Result<Taken> {
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
    s.write_all(b"listeners\n")?;
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = recvmsg(
        &s,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if got.bytes != 1 {
        return Err(io::Error::other("handover: the old process sent nothing"));
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
    Ok(Taken {
        data: fds.into_iter().map(TcpListener::from).collect(),
        admin,
        conn: s,
    })
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

/// The running process's side: serves the handover socket at `path` on a
/// thread of its own, handing the `offered` sockets to whoever asks, and
/// calls `done` once the new process is ready. A failed handover leaves
/// this process serving as before.
pub fn serve(
    path: &Path,
    offered: Offered,
    done: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    // A socket left by a process that is gone: replace it.
    if path.exists() && UnixStream::connect(path).is_err() {
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
                        Some((data, admin)) => hand_over(conn, data, admin.as_ref()),
                        None => return, // shutting down
                    },
                    Err(_) => return,
                };
                match result {
                    Ok(()) => {
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

fn hand_over(
    conn: UnixStream,
    data: &[TcpListener],
    admin: Option<&TcpListener>,
) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if line != "listeners\n" {
        return Err(io::Error::other(format!("unexpected request {line:?}")));
    }
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
    reader.read_line(&mut line)?;
    if line != "ready\n" {
        return Err(io::Error::other(
            "the new process did not confirm it serves (it keeps the sockets too)",
        ));
    }
    Ok(())
}
