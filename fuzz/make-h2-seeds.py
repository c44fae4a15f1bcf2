"""Writes the `h2_session` fuzz seeds made by hand (the others in
seeds/h2_session/ are inputs the fuzzer found): a control byte (bit 0:
the client ends the connection once the gateway is idle; the rest: bytes
per read, 0 for all at once), then a client's HTTP/2 frames (the target
adds the preface unless they start with `P`). Needs hyperframe and hpack
(PyPI `h2`, in the environment scripts/test-venv makes):

    target/test-venv/bin/python fuzz/make-h2-seeds.py fuzz/seeds/h2_session
"""
import sys, os
from hyperframe.frame import (SettingsFrame, HeadersFrame, DataFrame, PingFrame,
    WindowUpdateFrame, RstStreamFrame, ContinuationFrame, PriorityFrame, GoAwayFrame)
from hpack import Encoder

out = sys.argv[1]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

def hdrs(sid, fields, end=True, enc=None):
    e = enc or Encoder()
    f = HeadersFrame(sid)
    f.data = e.encode(fields)
    f.flags.add("END_HEADERS")
    if end:
        f.flags.add("END_STREAM")
    return f.serialize()

def data(sid, b, end=False):
    f = DataFrame(sid)
    f.data = b
    if end:
        f.flags.add("END_STREAM")
    return f.serialize()

def settings(**kw):
    f = SettingsFrame(0)
    for k, v in kw.items():
        f.settings[getattr(SettingsFrame, k)] = v
    return f.serialize()

def ack():
    f = SettingsFrame(0); f.flags.add("ACK"); return f.serialize()

def req(method, path, extra=(), auth="api.example"):
    return [(":method", method), (":scheme", "https"), (":path", path), (":authority", auth)] + list(extra)

def w(name, ctl, body):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([ctl]) + body)

enc = Encoder()
w("get", 1, settings() + hdrs(1, req("GET", "/v1/items?x=1", [("accept", "*/*")]), enc=enc))
w("get_with_preface", 0, PREFACE + settings(MAX_CONCURRENT_STREAMS=100) + ack() + hdrs(1, req("GET", "/")))
w("post_length", 0, settings() + hdrs(1, req("POST", "/up", [("content-length", "5")]), end=False) + data(1, b"hello", True))
w("post_chunked_7_byte_reads", (7 << 1) | 1, settings() + hdrs(1, req("POST", "/up"), end=False)
  + data(1, b"first ") + data(1, b"second", True))
e = Encoder()
many = settings(INITIAL_WINDOW_SIZE=100000) + ack()
for sid in (1, 3, 5, 7, 9, 11):
    many += hdrs(sid, req("GET", f"/s{sid}", [("cookie", "a=1"), ("cookie", "b=2")]), enc=e)
    p = PingFrame(0); p.opaque_data = bytes(8); many += p.serialize()
wu = WindowUpdateFrame(0); wu.window_increment = 1000
many += wu.serialize()
w("six_streams_every_answer", 1, many)
e = Encoder()
zero = settings(INITIAL_WINDOW_SIZE=0) + hdrs(1, req("GET", "/big"), enc=e)
wu = WindowUpdateFrame(1); wu.window_increment = 3
zero += wu.serialize()
wu = WindowUpdateFrame(1); wu.window_increment = 100
zero += wu.serialize()
w("zero_window_then_updates", 0, zero)
flood = settings()
for i in range(250):
    p = PingFrame(0); p.opaque_data = i.to_bytes(8, "big"); flood += p.serialize()
w("ping_flood", 0, flood)
e = Encoder()
rr = settings()
for sid in range(1, 41, 2):
    rr += hdrs(sid, req("GET", "/"), enc=e)
    r = RstStreamFrame(sid); r.error_code = 8; rr += r.serialize()
w("rapid_reset", 1, rr)
w("connection_field", 1, settings() + hdrs(1, req("GET", "/", [("connection", "upgrade"), ("upgrade", "websocket")])))
w("head_and_host", 1, settings() + hdrs(1, req("HEAD", "/h", [("host", "other.example")])) + hdrs(3, req("HEAD", "/h", [("host", "API.example")])))
e = Encoder()
block = e.encode(req("GET", "/cont", [("x-long", "v" * 300)]))
h = HeadersFrame(1); h.data = block[:50]; h.flags.add("END_STREAM")
c1 = ContinuationFrame(1); c1.data = block[50:200]
c2 = ContinuationFrame(1); c2.data = block[200:]; c2.flags.add("END_HEADERS")
pr = PriorityFrame(3); pr.depends_on = 1; pr.stream_weight = 10
w("continuation_priority", 1, settings() + h.serialize() + c1.serialize() + c2.serialize() + pr.serialize())
e = Encoder()
w("connect", 1, settings() + hdrs(1, [(":method", "CONNECT"), (":authority", "up.example:443")], enc=e, end=False) + data(1, b"tunnel"))
g = GoAwayFrame(0); g.last_stream_id = 0; g.error_code = 0
w("goaway_after_request", 0, settings() + hdrs(1, req("GET", "/")) + g.serialize())
