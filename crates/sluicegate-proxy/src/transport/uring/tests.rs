//! The io_uring transport's tests: big bodies, partial sends, buffer
//! exhaustion, resets, accepts and holds, on a worker-like runtime.

use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::task::Poll;
use std::time::Duration;

/// A non-blocking loopback listener whose backlog holds `n` connects
/// made before the first accept.
fn listener_with_backlog(n: i32) -> TcpListener {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    s.listen(n).unwrap();
    let l: TcpListener = s.into();
    l.set_nonblocking(true).unwrap();
    l
}

/// Runs `f` on a worker-like runtime with a ring: the before-park
/// hook makes the turn's enter, a task takes completions in.
fn on_ring<F, Fut>(f: F)
where
    F: FnOnce(Rc<Ring>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(turn)
        .build_local(tokio::runtime::LocalOptions::default())
        .unwrap();
    rt.block_on(async {
        let ring = Ring::new().expect("io_uring on this kernel");
        set_current(Some(ring.clone()));
        tokio::task::spawn_local(ring.clone().drive());
        tokio::time::timeout(Duration::from_secs(60), f(ring))
            .await
            .expect("within a minute");
    });
    drop(rt);
    set_current(None);
}

/// Our end on the ring, and the peer's as a blocking std socket.
fn pair(ring: &Rc<Ring>, l: &TcpListener) -> (UringTcp, TcpStream) {
    let peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (ours, _) = l.accept().unwrap();
    (UringTcp::new(ring.clone(), OwnedFd::from(ours)), peer)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn send_all(s: &UringTcp, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match s.try_send(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::future::poll_fn(|cx| s.poll_write_ready(cx))
                    .await
                    .unwrap();
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Reads until the end of the stream, in reads of at most `chunk`.
async fn read_to_end(s: &UringTcp, chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        match s.try_recv(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::future::poll_fn(|cx| s.poll_read_ready(cx))
                    .await
                    .unwrap();
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
}

#[test]
fn big_bodies_both_ways_with_partial_sends() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    on_ring(|ring| async move {
        let (ours, mut peer) = pair(&ring, &l);
        // Far more than the socket buffers and our 64 KiB send
        // buffer hold: sends go out in parts while the peer reads
        // slowly, and the receive side uses many provided buffers.
        let down = pattern(8 << 20, 1);
        let up = pattern(8 << 20, 7);
        let up2 = up.clone();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 3000];
            loop {
                let n = peer.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if got.len() < (1 << 20) {
                    std::thread::yield_now();
                }
            }
            (got, peer)
        });
        let writer = {
            let mut p = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (theirs, _) = l.accept().unwrap();
            let ours2 = UringTcp::new(ring.clone(), OwnedFd::from(theirs));
            let w = std::thread::spawn(move || {
                p.write_all(&up2).unwrap();
                p.shutdown(std::net::Shutdown::Write).unwrap();
                p
            });
            (ours2, w)
        };
        send_all(&ours, &down).await;
        ours.shutdown_write();
        let got_up = read_to_end(&writer.0, 1500).await;
        assert!(got_up == up, "upload differs ({} bytes)", got_up.len());
        drop(writer.1.join().unwrap());
        writer.0.shutdown_write();
        // The download's end arrives once every byte is out.
        let (got, _peer) = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert!(got == down, "download differs ({} bytes)", got.len());
    });
}

/// A connection holds a send buffer only while it has bytes to send:
/// an idle one holds none, and the next sender reuses the spare.
#[test]
fn an_idle_connection_holds_no_send_buffer() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    on_ring(|ring| async move {
        let (ours, mut peer) = pair(&ring, &l);
        let (other, mut peer2) = pair(&ring, &l);
        send_all(&ours, b"hello").await;
        let mut got = [0u8; 5];
        tokio::task::spawn_blocking(move || {
            peer.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"hello");
            peer
        })
        .await
        .unwrap();
        // The completion came in with the read: the buffer is spare.
        let idle = std::future::poll_fn(|cx| {
            if ours.state.inner.borrow().tx.capacity() == 0 {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        });
        idle.await;
        assert_eq!(ring.tx_spare.borrow().len(), 1);
        send_all(&other, b"again").await;
        assert_eq!(ring.tx_spare.borrow().len(), 0, "the spare was not reused");
        tokio::task::spawn_blocking(move || {
            let mut got = [0u8; 5];
            peer2.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"again");
        })
        .await
        .unwrap();
    });
}

#[test]
fn bytes_taken_before_a_drop_still_go_out_then_the_socket_closes() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    on_ring(|ring| async move {
        let (ours, mut peer) = pair(&ring, &l);
        let body = pattern(TX_CAP - 1, 3);
        assert_eq!(ours.try_send(&body).unwrap(), body.len());
        drop(ours);
        let got = tokio::task::spawn_blocking(move || {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        })
        .await
        .unwrap();
        assert!(got == body);
        // Its slot went with its last completion.
        assert!(ring.entries.borrow().is_empty());
    });
}

#[test]
fn running_out_of_buffers_delays_receives_and_loses_nothing() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    on_ring(|ring| async move {
        // More connections than the ring's buffers can serve MAX_HELD
        // each, each sending far more than that, nobody reading at
        // first: held buffers stop at MAX_HELD a connection, so some
        // receives end on ENOBUFS. Read one after another, a starving
        // one cannot wait for the buffers the later ones hold: it
        // reads the socket itself on readiness until buffers come back.
        const CONNS: usize = BUFS as usize / MAX_HELD + 20;
        const EACH: usize = 4 * MAX_HELD * BUF_SIZE;
        let mut ours = Vec::new();
        let mut writers = Vec::new();
        for c in 0..CONNS {
            let (o, mut p) = pair(&ring, &l);
            ours.push(o);
            writers.push(std::thread::spawn(move || {
                p.write_all(&pattern(EACH, c as u8)).unwrap();
                p.shutdown(std::net::Shutdown::Write).unwrap();
                p
            }));
        }
        // Let data pile up until the ring has handed out every buffer
        // it can (bounded: the test's timeout).
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let held: usize = ours.iter().map(|o| o.state.inner.borrow().rx.len()).sum();
            let starving = ours
                .iter()
                .filter(|o| o.state.inner.borrow().recv == Recv::Starving)
                .count();
            if held + MAX_HELD > BUFS as usize && starving > 0 {
                break;
            }
        }
        for (c, o) in ours.iter().enumerate() {
            let got = read_to_end(o, 16 << 10).await;
            assert!(got == pattern(EACH, c as u8), "connection {c}");
        }
        for w in writers {
            drop(tokio::task::spawn_blocking(move || w.join().unwrap()).await);
        }
    });
}

#[test]
fn a_reset_is_an_error_and_multishot_accept_takes_many() {
    // A backlog for every connect made before the first accept.
    let l = listener_with_backlog(1024);
    on_ring(|ring| async move {
        let acceptor = Acceptor::new(ring.clone(), l.as_raw_fd());
        let addr = l.local_addr().unwrap();
        let peers: Vec<TcpStream> = (0..300)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let mut ours = Vec::new();
        while ours.len() < peers.len() {
            let fd = std::future::poll_fn(|cx| acceptor.poll_accept(cx))
                .await
                .unwrap();
            ours.push(UringTcp::new(ring.clone(), fd));
        }
        // Each one answers its own peer.
        for (i, o) in ours.iter().enumerate() {
            send_all(o, format!("{i}\n").as_bytes()).await;
        }
        // The peers read on another thread: this one must get to the
        // end of its turn for the sends to leave.
        tokio::task::spawn_blocking(move || {
            for (i, mut p) in peers.into_iter().enumerate() {
                p.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut buf = [0u8; 8];
                let n = p.read(&mut buf).unwrap();
                assert_eq!(&buf[..n], format!("{i}\n").as_bytes());
                if i == 0 {
                    // A reset (linger 0): the read side reports it.
                    socket2::SockRef::from(&p)
                        .set_linger(Some(Duration::ZERO))
                        .unwrap();
                }
            }
        })
        .await
        .unwrap();
        let mut buf = [0u8; 8];
        let e = loop {
            match ours[0].try_recv(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::future::poll_fn(|cx| ours[0].poll_read_ready(cx))
                        .await
                        .unwrap();
                }
                other => break other,
            }
        };
        assert!(
            matches!(&e, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
            "{e:?}"
        );
    });
}

/// A hold while clients keep connecting (an upgrade under load): each
/// connection is either handed out by the acceptor, before or after the
/// hold, or still in the listen queue for the next process; none is
/// kept by the ring where nobody would serve it.
#[test]
fn a_held_acceptor_loses_no_connection() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let l = listener_with_backlog(4096);
    on_ring(|ring| async move {
        let addr = l.local_addr().unwrap();
        for round in 0..20 {
            let acceptor = Acceptor::new(ring.clone(), l.as_raw_fd());
            let stop = Arc::new(AtomicBool::new(false));
            let connector = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut peers = Vec::new();
                    while !stop.load(Ordering::Relaxed) && peers.len() < 2000 {
                        peers.push(TcpStream::connect(addr).unwrap());
                    }
                    peers
                })
            };
            let mut taken = Vec::new();
            while taken.len() < 20 {
                let fd = std::future::poll_fn(|cx| acceptor.poll_accept(cx))
                    .await
                    .unwrap();
                taken.push(fd);
            }
            // Completions taken in with the last one, or posted until
            // the cancel takes effect, come out here.
            acceptor.hold();
            while let Some(fd) = std::future::poll_fn(|cx| acceptor.poll_held(cx)).await {
                taken.push(fd.unwrap());
            }
            stop.store(true, Ordering::Relaxed);
            let peers = tokio::task::spawn_blocking(move || connector.join().unwrap())
                .await
                .unwrap();
            // The rest wait in the listen queue (a connect has
            // returned once the handshake is done; poll, bounded).
            let mut queued = 0;
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while taken.len() + queued < peers.len() && std::time::Instant::now() < deadline {
                match l.accept() {
                    Ok(_) => queued += 1,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
            assert_eq!(
                taken.len() + queued,
                peers.len(),
                "round {round}: {} handed out, {queued} left queued",
                taken.len()
            );
            assert!(acceptor.state.queue.borrow().is_empty());
            assert!(matches!(l.accept(), Err(e) if e.kind() == io::ErrorKind::WouldBlock));
        }
    });
}

#[test]
fn the_mode_is_the_config_unless_the_environment_says() {
    assert!(!wanted(None, None));
    assert!(wanted(Some(true), None));
    assert!(!wanted(Some(true), Some("0")));
    assert!(wanted(Some(false), Some("1")));
    assert!(wanted(None, Some("1")));
    assert!(!wanted(Some(false), Some("")));
    let eperm = io::Error::from_raw_os_error(rustix::io::Errno::PERM.raw_os_error());
    assert!(refused_reason(&eperm).contains("not permitted"));
}
