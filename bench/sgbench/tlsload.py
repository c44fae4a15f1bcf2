#!/usr/bin/env python3
"""A new TLS connection per request, without session resumption.

    tlsload.py -c64 -d10 --cafile cert.pem https://127.0.0.1:PORT/test.html

Keeps -c connections in flight for -d seconds; each connects, makes a full
TLS handshake (it never offers a saved session), sends one GET with
`Connection: close`, reads the whole response and closes. wrk cannot do
this: it keeps each connection's session and resumes it on reconnecting.
Prints a summary in wrk's shape (requests, Requests/sec, 50% and 99%
latency, non-2xx, socket errors) plus `Resumed handshakes: N`, which must
be 0. Standard library only; `bench/compare` runs it pinned to the load core
for its tls-full scenario. --resume offers each slot's last session instead
(a resumed handshake per request), for comparison.
"""

import argparse
import errno
import selectors
import socket
import ssl
import sys
import time
import urllib.parse


def _status_if_complete(buf):
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


class Slot:
    """One connection in flight: connect -> handshake -> request -> response."""

    def __init__(self):
        self.sock = None
        self.state = None
        self.buf = b""
        self.t0 = 0.0
        self.session = None


def main(argv):
    ap = argparse.ArgumentParser(prog="tlsload.py")
    ap.add_argument("-c", type=int, default=64, dest="conns")
    ap.add_argument("-d", type=float, default=10.0, dest="duration")
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("url")
    a = ap.parse_args(argv)
    u = urllib.parse.urlsplit(a.url)
    addr = (u.hostname, u.port or 443)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    request = (f"GET {path} HTTP/1.1\r\nHost: {u.hostname}\r\nConnection: close\r\n\r\n"
               .encode())
    ctx = ssl.create_default_context(cafile=a.cafile)
    ctx.set_alpn_protocols(["http/1.1"])

    sel = selectors.DefaultSelector()
    lat, statuses = [], {}
    errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    resumed = 0
    start = time.monotonic()
    deadline = start + a.duration
    last_done = start

    def begin(slot):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rc = s.connect_ex(addr)
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            errors["connect"] += 1
            return False
        slot.sock, slot.state, slot.buf, slot.t0 = s, "connect", b"", time.monotonic()
        sel.register(s, selectors.EVENT_WRITE, slot)
        return True

    def end(slot, kind=None):
        nonlocal resumed, last_done
        sel.unregister(slot.sock)
        if kind:
            errors[kind] += 1
        else:
            now = time.monotonic()
            lat.append(now - slot.t0)
            last_done = now
            if slot.sock.session_reused:
                resumed += 1
            if a.resume:
                slot.session = slot.sock.session
        try:
            slot.sock.close()
        except OSError:
            pass
        slot.sock = None

    def wait_for(slot, events):
        sel.modify(slot.sock, events, slot)

    def step(slot):
        """Advance slot as far as it goes without blocking."""
        if slot.state == "connect":
            err = slot.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                return end(slot, "connect")
            sel.unregister(slot.sock)
            slot.sock = ctx.wrap_socket(slot.sock, server_hostname=u.hostname,
                                        do_handshake_on_connect=False,
                                        session=slot.session if a.resume else None)
            sel.register(slot.sock, selectors.EVENT_READ, slot)
            slot.state = "handshake"
        if slot.state == "handshake":
            try:
                slot.sock.do_handshake()
            except ssl.SSLWantReadError:
                return wait_for(slot, selectors.EVENT_READ)
            except ssl.SSLWantWriteError:
                return wait_for(slot, selectors.EVENT_WRITE)
            except OSError:
                return end(slot, "connect")
            try:
                slot.sock.sendall(request)  # far below a socket buffer
            except OSError:
                return end(slot, "write")
            slot.state = "read"
            wait_for(slot, selectors.EVENT_READ)
        if slot.state == "read":
            while True:
                try:
                    data = slot.sock.recv(65536)
                except ssl.SSLWantReadError:
                    return None
                except ssl.SSLWantWriteError:
                    return wait_for(slot, selectors.EVENT_WRITE)
                except OSError:
                    return end(slot, "read")
                if not data:
                    return end(slot, "read")
                slot.buf += data
                status = _status_if_complete(slot.buf)
                if status is not None:
                    statuses[status] = statuses.get(status, 0) + 1
                    return end(slot)
        return None

    slots = [Slot() for _ in range(a.conns)]
    for slot in slots:
        begin(slot)
    grace = deadline + 5.0
    while True:
        now = time.monotonic()
        busy = [s for s in slots if s.sock is not None]
        if now >= deadline and not busy:
            break
        if now >= grace:
            for s in busy:
                end(s, "timeout")
            break
        for key, _ in sel.select(timeout=0.2):
            step(key.data)
        if time.monotonic() < deadline:
            for s in slots:
                if s.sock is None:
                    begin(s)
    elapsed = max(last_done, deadline) - start
    n = len(lat)
    lat.sort()

    def pct(p):
        return lat[min(n - 1, int(p / 100 * n))] * 1e6 if n else 0.0

    non2xx = sum(c for st, c in statuses.items() if not 200 <= st < 400)
    print(f"tlsload {a.url}: {a.conns} connections, a new TLS connection per request, "
          f"session resumption {'offered' if a.resume else 'never offered'}")
    print("  Latency Distribution")
    print(f"     50%  {pct(50):.2f}us")
    print(f"     99%  {pct(99):.2f}us")
    print(f"  {n} requests in {elapsed:.2f}s")
    if any(errors.values()):
        print("  Socket errors: connect {connect}, read {read}, write {write}, "
              "timeout {timeout}".format(**errors))
    if non2xx:
        print(f"  Non-2xx or 3xx responses: {non2xx}")
    print(f"Requests/sec: {n / elapsed if elapsed > 0 else 0:.2f}")
    print(f"Resumed handshakes: {resumed}")
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
