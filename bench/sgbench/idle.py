"""Memory per idle keep-alive connection.

Opens N client connections in batches; each sends one GET /test.html, reads
the whole response, then stays open. The proxy's RSS before and after gives
bytes per connection. Against a TLS target (idle15k-tls) each connection
first completes a full TLS handshake (no session offered), so what is held
is an established TLS connection.
"""

import selectors
import socket
import ssl
import time

from . import procs

REQUEST = b"GET /test.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
BATCH = 500


def _response_complete(buf):
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = buf[:head_end].decode("latin-1")
    length = 0
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    if len(buf) < head_end + 4 + length:
        return None
    return int(head.split(" ", 2)[1])


def _open_batch(port, count, timeout, ctx=None):
    """Returns (sockets that got a 200, failure descriptions). With ctx (an
    ssl.SSLContext), each socket makes a TLS handshake before its request;
    the handshakes of a batch run concurrently."""
    socks, failures = [], []
    handshaking = set()
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(("127.0.0.1", port))
            if ctx is not None:
                s = ctx.wrap_socket(s, server_hostname="127.0.0.1",
                                    do_handshake_on_connect=False)
                handshaking.add(s)
            else:
                s.sendall(REQUEST)
            s.setblocking(False)
            socks.append(s)
        except OSError as e:
            s.close()
            failures.append(f"connect: {e}")
            if len(failures) > 20:
                break
    sel = selectors.DefaultSelector()
    bufs = {}
    for s in socks:
        sel.register(s, selectors.EVENT_READ | (selectors.EVENT_WRITE if s in handshaking
                                                else 0))
        bufs[s] = b""
    ok = []
    deadline = time.monotonic() + timeout
    while bufs and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            if s in handshaking:
                try:
                    s.do_handshake()
                except ssl.SSLWantReadError:
                    sel.modify(s, selectors.EVENT_READ)
                    continue
                except ssl.SSLWantWriteError:
                    sel.modify(s, selectors.EVENT_WRITE)
                    continue
                except OSError as e:
                    sel.unregister(s)
                    del bufs[s]
                    handshaking.discard(s)
                    s.close()
                    failures.append(f"handshake: {e}")
                    continue
                handshaking.discard(s)
                try:
                    s.sendall(REQUEST)  # far below a socket buffer
                except OSError as e:
                    sel.unregister(s)
                    del bufs[s]
                    s.close()
                    failures.append(f"send: {e}")
                    continue
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(4096)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                continue
            except OSError as e:
                data, err = b"", e
            else:
                err = None
            if not data:
                sel.unregister(s)
                del bufs[s]
                s.close()
                failures.append(f"closed: {err}" if err else "closed by server")
                continue
            bufs[s] += data
            status = _response_complete(bufs[s])
            if status is not None:
                sel.unregister(s)
                del bufs[s]
                if status == 200:
                    ok.append(s)
                else:
                    s.close()
                    failures.append(f"status {status}")
    for s in list(bufs):
        sel.unregister(s)
        s.close()
        failures.append("no response in time")
    sel.close()
    return ok, failures


def _settled_rss(pids, seconds=1.5):
    best = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        best = max(best, procs.rss_kib(pids))
        time.sleep(0.25)
    return best


def measure(target, n, timeout=10.0):
    """Hold n idle connections against target (TLS ones if target.cafile);
    returns a record."""
    ctx = None
    if target.cafile:
        ctx = ssl.create_default_context(cafile=target.cafile)
        ctx.set_alpn_protocols(["http/1.1"])
    pids = target.proc.pids()
    time.sleep(0.5)
    before = _settled_rss(pids, 1.0)
    held, failures = [], []
    t0 = time.monotonic()
    try:
        while len(held) < n and len(failures) <= 20:
            got, bad = _open_batch(target.port, min(BATCH, n - len(held)), timeout, ctx)
            held += got
            failures += bad
        open_s = time.monotonic() - t0
        after = _settled_rss(pids)
        alive = target.proc.alive()
    finally:
        for s in held:
            s.close()
    rec = {
        "scenario": "idle-tls" if ctx else "idle",
        "target": target.name,
        "requested": n,
        "held": len(held),
        "failures": len(failures),
        "failure_samples": failures[:5],
        "open_s": round(open_s, 2),
        "rss_before_kib": before,
        "rss_after_kib": after,
        "bytes_per_conn": round((after - before) * 1024 / len(held), 1) if held else None,
        "proxy_alive": alive,
    }
    return rec
