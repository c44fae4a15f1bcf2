"""The upstream and the proxies under test: config rendering, start, readiness."""

import gzip
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from . import grpc, jwks
from .procs import HarnessError

REPO = Path(__file__).resolve().parent.parent.parent

PEER_FILES = ("nginx-upstream.conf", "haproxy.cfg", "nginx-proxy.conf")
# Needed only when a TLS target runs.
TLS_PEER_FILES = ("haproxy-tls.cfg", "nginx-proxy-tls.conf")

# Debian package that provides each tool.
PACKAGES = {
    "nginx": "nginx-light (or nginx)",
    "haproxy": "haproxy",
    "wrk": "wrk",
    "ab": "apache2-utils",
    "taskset": "util-linux",
    "openssl": "openssl",
    "h2load": "nghttp2-client",
    "nghttp": "nghttp2-client",
    "varnishd": "varnish",
}

# Every target a scenario can measure. `direct` has no proxy. sluicegate-busy
# (`busy_poll` on) trades a core for latency: by default it runs in c1 only,
# and in every scenario when named. The
# sluicegate targets send upstream what the peers' reference configs do, no
# X-Forwarded-* headers; sluicegate-fwd (run only when named) has them on, as
# a service has by default, to measure what they cost. nginx-log (run only when
# named) is the reference nginx with a buffered JSON access log, the like-for-like
# peer of sluicegate-log.
ALL_TARGETS = ("direct", "sluicegate", "sluicegate-log", "sluicegate-auth", "sluicegate-jwks",
               "sluicegate-global",
               "sluicegate-busy", "sluicegate-fwd", "haproxy", "nginx", "nginx-log",
               "sluicegate-tls", "haproxy-tls", "nginx-tls",
               "sluicegate-trace0", "sluicegate-trace1", "sluicegate-trace100",
               "sluicegate-mirror", "sluicegate-split", "sluicegate-template",
               "sluicegate-cache", "nginx-cache", "varnish", "sluicegate-fauth",
               "sluicegate-uring", "sluicegate-tls-uring")
# The caching targets (issue 33), which run in the cache scenarios (and
# sluicegate-cache and nginx-cache in gzip) and only there: sluicegate-cache
# is the sluicegate target with a store (`cache: { memory: 256MiB }`) and
# the route's `cache: {}`; nginx-cache is nginx-cache.conf (proxy_cache, the
# upstream's fields alone giving lifetimes, proxy_cache_lock on); varnish is
# varnishd with varnish.vcl (the built-in VCL) and VARNISH_PARAMS. Their
# peer files are looked up in the peers dir, else in bench/peers.
CACHE_TARGETS = ("sluicegate-cache", "nginx-cache", "varnish")
CACHE_PEER_FILES = ("nginx-cache.conf", "varnish.vcl")
# varnishd's run-time parameters: one thread pool (one core), nothing
# stored without a lifetime, no stale answers while a fetch refreshes.
VARNISH_PARAMS = ("thread_pools=1", "default_ttl=0", "default_grace=0")
# What the cache targets' load asks for: a 1 KiB answer the upstream nginx
# gives with `Cache-Control: max-age=3600` (cache-hit), one of the slow
# upstream's keys (cache-miss-coalesced, sgbench/slowup.py), the gzip
# scenario's JSON document with `Cache-Control: max-age=3600`.
CACHE_PATH = "/cache/1k"
CACHE_JSON_PATH = "/cache/10k.json"
SLOW_PATH = "/cache/slow/0"
CACHE_BODY = b"x" * 1023 + b"\n"
# sluicegate-uring (run only when named) is the sluicegate target with
# `io_uring: true`: `--pair sluicegate,sluicegate-uring` gives what the
# io_uring transport changes, and `--syscalls` its system calls per request;
# sluicegate-tls-uring (run only when named) is sluicegate-tls on io_uring.
# sluicegate-fauth (run only when named) is the sluicegate target with the
# route's `forward_auth` asking the upstream itself (GET /test.html, a 200)
# with `cache: 60s`: every request after the first is allowed from the
# decision cache, so `--pair sluicegate,sluicegate-fauth` gives what forward
# auth with the cache on costs against no forward auth.
# sluicegate-mirror (run only when named) is the sluicegate target with the
# route's `mirror` copying every request (100%) to a second service on the
# same upstream: `--pair sluicegate,sluicegate-mirror` gives what mirroring
# costs (target: no more than a second client request, i.e. proxy CPU per
# request at most twice the plain route's).
# sluicegate-split (run only when named) is the sluicegate target with the
# route's `service` replaced by a `split` 50/50 between two services whose
# one endpoint is the same upstream: `--pair sluicegate,sluicegate-split`
# gives what choosing the service costs.
# sluicegate-template (run only when named) is the sluicegate target with its
# route's `path_prefix: /` replaced by TEMPLATE, a 20-parameter path template
# of mixed types. When it runs, every target's load requests TEMPLATE_PATH,
# a 20-segment path it matches (the upstream answers it with the /test.html
# body), instead of /test.html: `--pair sluicegate,sluicegate-template` is
# then the same request through a prefix route and through the template.
TEMPLATE = ("/{p1}/{p2:int}/{p3:alpha}/{p4:uuid}/{p5:hex}/{p6:uint}/{p7:alnum}/{p8}"
            "/{p9:int}/{p10:alpha}/{p11:regex(v[0-9]+)}/{p12}/{p13:hex}/{p14:uint}"
            "/{p15:alnum}/{p16}/{p17:int}/{p18:alpha}/{p19:uuid}/{p20}")
TEMPLATE_PATH = ("/bench/42/alpha/123e4567-e89b-12d3-a456-426614174000/beef/7/abc123/x"
                 "/-5/beta/v2/y/cafe/99/z9/w/100/gamma/00000000-0000-0000-0000-000000000000"
                 "/test.html")
# sluicegate-jwks (run only when named) is sluicegate-auth with the route's
# `auth: jwt` instead of `app_key`: an OpenID Connect issuer whose key set
# (one ES256 key) the upstream nginx serves at jwks.JWKS_PATH, and a load
# of jwks.TOKENS tokens of jwks.TOKEN_APPS of the same 1,000 apps, sent in
# turn by a wrk script (sgbench/jwks.py); `--pair
# sluicegate-auth,sluicegate-jwks` gives what the issuer's tokens cost
# against app keys.
# sluicegate-global (run only when named) is sluicegate-auth with the plan
# `scope: global`, its leases taken from a redis-server the harness starts on
# the load generator's CPU.
# sluicegate-trace0, -trace1 and -trace100 (run only when named) are the
# sluicegate target with `tracing` at sampling ratio 0, 0.01 and 1, exporting
# to an OTLP/gRPC sink that discards (the test collector,
# crates/sluicegate/tests/fixtures/otlp/collector.py, in the test venv that
# scripts/test-venv makes) on the load generator's CPU.
TRACE_TARGETS = {"sluicegate-trace0": 0.0, "sluicegate-trace1": 0.01,
                 "sluicegate-trace100": 1.0}
DEFAULT_TARGETS = tuple(t for t in ALL_TARGETS
                        if t not in ("sluicegate-fwd", "nginx-log", "sluicegate-global",
                                     "sluicegate-jwks",
                                     "sluicegate-mirror", "sluicegate-split",
                                     "sluicegate-template", "sluicegate-fauth",
                                     "sluicegate-uring", "sluicegate-tls-uring")
                        and t not in TRACE_TARGETS)
# The targets terminating TLS: the TLS scenarios run these and only these,
# the plain scenarios never do. The peers' TLS configs are the shared
# templates haproxy-tls.cfg and nginx-proxy-tls.conf; sluicegate-tls is the
# sluicegate target's config with a TLS listener.
TLS_TARGETS = ("sluicegate-tls", "haproxy-tls", "nginx-tls", "sluicegate-tls-uring")
# Targets with an access log: c64 only, like the other variants.
LOG_TARGETS = ("sluicegate-log", "nginx-log")
# The upstreams a scenario can put behind the proxies: `http1` is
# nginx-upstream.conf as it is; `h2c` is the same config with `http2` on its
# listen line, so that port speaks HTTP/2 with prior knowledge only (nginx
# 1.22 syntax, `listen ADDR http2;`). Against it, sluicegate's service has
# `protocol: h2c` and HAProxy's server line `proto h2`. `grpc` is the h2c
# one with a location answering every call under /sgbench.Bench/ with one
# fixed gRPC reply and a `grpc-status: 0` trailer (sgbench/grpc.py); nginx
# proxies to it with `grpc_pass`.
# `slow` (the cache-miss-coalesced scenario) is sgbench/slowup.py: every
# answer after 50 ms, 1 KiB with `Cache-Control: max-age=1`, its requests
# counted.
UPSTREAMS = ("http1", "h2c", "grpc", "slow")
# The targets that can run in front of each upstream other than http1. nginx
# cannot proxy plain HTTP to an HTTP/2 upstream (grpc_pass only speaks gRPC).
UPSTREAM_TARGETS = {"h2c": ("sluicegate-tls", "haproxy-tls", "sluicegate-tls-uring"),
                    "grpc": ("sluicegate-tls", "haproxy-tls", "nginx-tls", "sluicegate-tls-uring"),
                    "slow": CACHE_TARGETS}
NO_H2C_NOTE = ("nginx cannot proxy plain HTTP to an HTTP/2 upstream (only `grpc_pass` "
               "speaks HTTP/2 upstream), so it has no row here")
H2C_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# nginx-log's log: the fields of sluicegate's JSON lines that nginx has, buffered
# as sluicegate buffers (64 KB, flushed at least once a second).
NGINX_LOG = (
    "log_format sgjson escape=json '{\"ts\":\"$time_iso8601\",\"client\":\"$remote_addr\","
    "\"method\":\"$request_method\",\"path\":\"$request_uri\",\"status\":$status,"
    "\"endpoint\":\"$upstream_addr\",\"bytes_in\":$request_length,\"bytes_out\":$bytes_sent,"
    "\"duration_ms\":$request_time,\"upstream_ms\":\"$upstream_header_time\"}';\n"
    "    access_log @LOG@ sgjson buffer=64k flush=1s;"
)
SLUICEGATE_TARGETS = tuple(t for t in ALL_TARGETS if t.startswith("sluicegate"))

# The compression scenario's answer: a JSON document of exactly JSON_SIZE
# bytes that the upstream serves at JSON_PATH (written into its directory).
JSON_PATH = "/10k.json"
JSON_SIZE = 10 * 1024


def json_body():
    """A deterministic JSON array of records, padded to JSON_SIZE bytes."""
    items, i = [], 0
    while True:
        item = {"id": i, "name": f"item {i}", "sku": f"SKU-{(i * 7919) % 100000:05d}",
                "price": round(((i * 37) % 1000) / 7, 2), "in_stock": i % 3 != 0,
                "tags": ["bench", f"group-{i % 7}"]}
        if len(json.dumps(items + [item, {"pad": ""}], separators=(",", ":"))) > JSON_SIZE:
            break
        items.append(item)
        i += 1
    short = JSON_SIZE - len(json.dumps(items + [{"pad": ""}], separators=(",", ":")))
    text = json.dumps(items + [{"pad": "x" * short}], separators=(",", ":"))
    assert len(text) == JSON_SIZE
    return text.encode()


def check_gzip(target):
    """The target answers the compression scenario's request gzip-coded,
    decoding to the upstream's document; a HarnessError otherwise."""
    conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=5)
    try:
        conn.request("GET", target.path, headers={"Accept-Encoding": "gzip"})
        resp = conn.getresponse()
        body = resp.read()
        coding = resp.getheader("Content-Encoding")
    finally:
        conn.close()
    if resp.status != 200 or coding != "gzip":
        raise HarnessError(f"{target.name}: GET {target.path} with Accept-Encoding: gzip "
                           f"answered {resp.status} with Content-Encoding {coding!r}, not gzip")
    if gzip.decompress(body) != json_body():
        raise HarnessError(f"{target.name}: its gzip answer does not decode to the upstream's")
    return len(body)


def _get(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.headers
    finally:
        conn.close()


def cache_hit(name, headers):
    """Whether a caching target's answer says it came from its store."""
    if name == "sluicegate-cache":
        return "hit" in (headers.get("Cache-Status") or "")
    if name == "nginx-cache":
        return headers.get("X-Cache-Status") == "HIT"
    if name == "varnish":
        # A hit names the request and the one that fetched the object.
        return len((headers.get("X-Varnish") or "").split()) == 2
    raise HarnessError(f"{name} is not a caching target")


def slow_count(port):
    """The slow upstream's request count (sgbench/slowup.py)."""
    status, body, _ = _get(port, "/_count")
    if status != 200:
        raise HarnessError(f"the slow upstream's /_count answered {status}")
    return int(body)


def check_cache(target, slow_port=None, gzip_body=False):
    """A caching target's second request for its path is a hit with the
    upstream's body (gzip decoding to the document, with `gzip_body`); in
    front of the slow upstream, two requests for a fresh key make one
    upstream request. A HarnessError otherwise."""
    path = target.path
    headers = {"Accept-Encoding": "gzip"} if gzip_body else {}
    want = json_body() if gzip_body else CACHE_BODY
    for i in range(2):
        status, body, got = _get(target.port, path, headers)
        if gzip_body and got.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if status != 200 or body != want:
            raise HarnessError(f"{target.name}: GET {path} answered {status} with "
                               f"{len(body)} bytes, not the upstream's {len(want)}")
    if not cache_hit(target.name, got):
        raise HarnessError(f"{target.name}: a second GET {path} was not a hit: "
                           + ", ".join(f"{k}: {v}" for k, v in got.items()))
    if slow_port is not None:
        before = slow_count(slow_port)
        fresh = f"/cache/slow/check-{time.monotonic_ns()}"
        for _ in range(2):
            _get(target.port, fresh)
        made = slow_count(slow_port) - before
        if made != 1:
            raise HarnessError(f"{target.name}: two GETs of a fresh key made {made} "
                               "upstream requests, not 1")


# busy_poll of the sluicegate-busy target.
BUSY_POLL = "200us"

# The app key the sluicegate-auth target's load carries, as a `~KEY` path
# segment (the form of the seed Hyperapi report); its config has AUTH_APPS apps.
AUTH_KEY = "bench-app-0000000-key"
AUTH_APPS = 1000


def check_tools(tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        lines = [f"  {t}: apt-get install {PACKAGES[t]}" for t in missing]
        raise HarnessError(
            "missing tools (this harness installs nothing itself):\n" + "\n".join(lines)
        )


def check_tls_peers(peers):
    missing = [f for f in TLS_PEER_FILES if not (Path(peers) / f).is_file()]
    if missing:
        raise HarnessError(f"TLS peer templates missing in {peers}: {', '.join(missing)}")


def make_cert(d):
    """An ECDSA P-256 self-signed pair for localhost and 127.0.0.1 in d, as
    ../shared/peers/README.md says; plus cert+key in one file for HAProxy.
    Returns {"cert", "key", "pem"} paths."""
    cert, key, pem = (os.path.join(d, n) for n in ("cert.pem", "key.pem", "cert+key.pem"))
    argv = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"openssl req failed: {e}")
    if p.returncode != 0:
        raise HarnessError(f"openssl req failed (status {p.returncode}): {p.stderr.strip()}")
    Path(pem).write_text(Path(cert).read_text() + Path(key).read_text())
    return {"cert": cert, "key": key, "pem": pem}


def client_context(cafile):
    """A client context that trusts only the run's certificate and checks
    that it names 127.0.0.1: what answers is the TLS listener we configured."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def tls_resumes(port, cafile, timeout=3.0):
    """Whether the server at port resumes a TLS session: one connection
    reads a response (and with it TLS 1.3's session tickets), a second
    offers that session. Returns (bool, protocol)."""
    ctx = client_context(cafile)
    req = b"GET /test.html HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    session, reused, proto = None, False, None
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as s:
                s.sendall(req)
                while s.recv(65536):
                    pass
                reused, proto, session = s.session_reused, s.version(), s.session
    return reused, proto


def find_peers(repo, explicit):
    """--peers DIR if given, else <repo>/../shared/peers, else bench/peers."""
    candidates = [Path(explicit)] if explicit else [
        repo.parent / "shared" / "peers",
        repo / "bench" / "peers",
    ]
    for d in candidates:
        if all((d / f).is_file() for f in PEER_FILES):
            return d.resolve()
    raise HarnessError(
        "peer templates (" + ", ".join(PEER_FILES) + ") not found in: "
        + ", ".join(str(c) for c in candidates)
    )


def render(template, out_path, values):
    text = Path(template).read_text()
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise HarnessError(f"{template}: placeholders left unrendered: {sorted(set(left))}")
    Path(out_path).write_text(text)
    return out_path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def haproxy_maxconn(cfg_path):
    m = re.search(r"^\s*maxconn\s+(\d+)", Path(cfg_path).read_text(), re.M)
    return int(m.group(1)) if m else None


def sluicegate_yaml(port, upstream_port, access, auth=False, busy_poll=None, forwarded=False,
                    tls=None, protocol=None, admin_port=None, redis_port=None, trace=None,
                    mirror=False, split=False, template=False, compress=False, cache=False,
                    limit=None, fauth=False, jwt=False, io_uring=False):
    """The generated config. With `auth`, the route needs an app key and
    charges a plan whose limits are never reached, so the run measures what
    authentication and plan accounting cost. `busy_poll` sets that key.
    Without `forwarded`, the service sends no X-Forwarded-* headers, like the
    peers' reference configs, so every proxy sends the upstream the same.
    With `tls` ({"cert", "key"} paths), the listener terminates TLS with
    that pair; everything else is the same. `protocol` is the service's
    (`h2c` for the h2c upstream; unset, HTTP/1.1). With `admin_port`, an
    admin listener (the admin API, no token) on that loopback port. With
    `redis_port` (and `auth`), the plan is `scope: global`, counted in that
    Redis. With `trace` ((ratio, OTLP port)), `tracing` samples that share
    of requests and exports their spans to that port. With `mirror`, the
    route copies every request to a second service on the same upstream.
    With `split`, a second service over the same upstream, and the route
    splits 50/50 between the two (`split_by: random`). With `template`, the
    route matches TEMPLATE instead of every path. With `compress`, the
    route compresses answers in gzip at level `fast` (gzip 1). With `cache`,
    a store of 256 MiB and the route's `cache: {}` (the default key). With
    `limit` (a `per` value), the route has a limit of that `per` never
    reached. With `fauth`, the route's `forward_auth` asks the upstream (GET
    /test.html) and caches its decision for 60 s. With
    `jwt` (and `auth`), the route's `auth: jwt` with the sgbench issuer,
    its keys served by the upstream (sgbench/jwks.py). With `io_uring`,
    the workers run plain TCP on io_uring (`io_uring: true`)."""
    listen = f'["127.0.0.1:{port}"]'
    if tls:
        listen = (f'[{{ addr: "127.0.0.1:{port}", tls: {{ certificates: '
                  f'[{{ cert: {tls["cert"]}, key: {tls["key"]} }}] }} }}]')
    text = (
        "# Generated by bench/compare.\n"
        f"listen: {listen}\n"
        f"busy_poll: {busy_poll or 'off'}\n"
        + ("io_uring: true\n" if io_uring else "")
        +         "limits: { max_connections: 19000 }\n"
        "reload: { watch: false }\n"
        f"log: {{ level: warn, access: {access} }}\n"
        + ("cache: { memory: 256MiB }\n" if cache else "")
        + (f'admin: {{ listen: "127.0.0.1:{admin_port}" }}\n' if admin_port else "")
        + (f"tracing: {{ sampling: {{ ratio: {trace[0]} }}, "
           f'otlp: {{ endpoint: "http://127.0.0.1:{trace[1]}" }} }}\n' if trace else "")
        + "services:\n"
        "  - name: upstream\n"
        f'    endpoints: ["127.0.0.1:{upstream_port}"]\n'
        "    max_connections_per_endpoint: 1024\n"
        f"    forwarded_headers: {'true' if forwarded else 'false'}\n"
        + (f"    protocol: {protocol}\n" if protocol else "")
    )
    if mirror or split:
        text += (
            f"  - name: {'shadow' if mirror else 'upstream-b'}\n"
            f'    endpoints: ["127.0.0.1:{upstream_port}"]\n'
            "    max_connections_per_endpoint: 1024\n"
            f"    forwarded_headers: {'true' if forwarded else 'false'}\n"
            + (f"    protocol: {protocol}\n" if protocol else "")
        )
    text += (
        "routes:\n"
        "  - name: all\n"
        + (f'    match: {{ path: "{TEMPLATE}" }}\n' if template
           else "    match: { path_prefix: / }\n")
        + ("    split: [{ service: upstream, weight: 50 }, { service: upstream-b, weight: 50 }]\n"
           if split else "    service: upstream\n")
        + ("    mirror: { service: shadow, percent: 100 }\n" if mirror else "")
        + ("    compress: { algorithms: [gzip], level: fast }\n" if compress else "")
        + ("    cache: {}\n" if cache else "")
        + (f"    limit: {{ rate: 1000000000/s, per: {limit} }}\n" if limit else "")
        + (f'    forward_auth: {{ url: "http://127.0.0.1:{upstream_port}/test.html", '
           "request_headers: [authorization], cache: 60s }\n" if fauth else "")
    )
    if not auth:
        return text
    apps = "".join(
        f'  - id: app{i}\n    keys: ["bench-app-{i:07d}-key"]\n    plan: bench\n'
        for i in range(AUTH_APPS))
    scope, cluster = "", ""
    if redis_port:
        scope = ", scope: global"
        cluster = f'cluster: {{ redis: {{ url: "redis://127.0.0.1:{redis_port}" }} }}\n'
    return (text + f"    auth: {'jwt' if jwt else 'app_key'}\n"
            + (jwks.gateway_yaml(upstream_port) if jwt else "")
            + "plans:\n  bench: { rate: 1000000000/s, quota: 1000000000000/day, concurrency: 100000"
            + scope + " }\n"
            + cluster + "apps:\n" + apps)


def http_get(port, path="/test.html", timeout=2.0, cafile=None, headers=None):
    if cafile:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout,
                                           context=client_context(cafile))
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def h2c_settings(port, timeout=2.0):
    """Whether the port answers the HTTP/2 client preface with a SETTINGS
    frame: an h2c upstream is up and speaks HTTP/2 with prior knowledge."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(H2C_PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        head = b""
        while len(head) < 9:
            got = s.recv(9 - len(head))
            if not got:
                break
            head += got
    return len(head) == 9 and head[3] == 0x4


def wait_h2c(port, procs_to_watch, timeout=20.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for p in procs_to_watch:
            if not p.alive():
                raise HarnessError(f"h2c upstream: {p.name} exited with status "
                                   f"{p.popen.returncode}; log tail:\n{p.log_tail()}")
        try:
            if h2c_settings(port):
                return
            last = "no SETTINGS frame in answer to the HTTP/2 preface"
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise HarnessError(f"h2c upstream on port {port}: not ready within {timeout:.0f}s ({last})")


class Target:
    """A running server: `proc` is the proxy (None for direct), `port` where
    clients connect."""

    def __init__(self, name, port, proc, extra=None, path="/test.html", cafile=None):
        self.name = name
        self.port = port
        self.proc = proc
        self.extra = extra or {}
        # What clients request (the auth target adds its key segment).
        self.path = path
        # TLS targets: the run's certificate, which clients trust.
        self.cafile = cafile

    def url(self, path=None):
        """The URL clients load: the target's path, or `path` (the gRPC
        scenario's method)."""
        scheme = "https" if self.cafile else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path or self.path}"


def wait_ready(target, procs_to_watch, timeout=20.0):
    """Poll until GET /test.html answers; fail if it answers non-200 or a
    process exits first. A target whose requests carry a token (its
    extra["headers"]) may answer 401 until it has its issuer's keys."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for p in procs_to_watch:
            if p is not None and not p.alive():
                raise HarnessError(
                    f"{target.name}: {p.name} exited with status {p.popen.returncode} "
                    f"before answering; log tail:\n{p.log_tail()}"
                )
        try:
            status, body = http_get(target.port, target.path, cafile=target.cafile,
                                    headers=target.extra.get("headers"))
        except OSError as e:
            last = e
            time.sleep(0.1)
            continue
        if status == 401 and target.extra.get("headers"):
            last = "401: the issuer's keys not fetched yet?"
            time.sleep(0.1)
            continue
        if status != 200:
            raise HarnessError(f"{target.name}: GET {target.url()} answered {status}, not 200")
        target.extra["body_bytes"] = len(body)
        return
    hint = ""
    if target.cafile and isinstance(last, ssl.SSLError):
        try:
            status, _ = http_get(target.port, target.path, timeout=1.0)
            hint = (f"; the port answers plain HTTP ({status}), so the listener's tls "
                    "settings were ignored")
        except OSError:
            pass
    raise HarnessError(f"{target.name}: no answer on {target.url()} within {timeout:.0f}s "
                       f"({last}){hint}")


class Launcher:
    """Starts the upstream and the proxies with the fairness pinning."""

    def __init__(self, reg, peers, sluicegate_bin, proxy_cpu, load_cpu):
        self.reg = reg
        self.peers = Path(peers)
        self.bin = sluicegate_bin
        self.proxy_cpu = proxy_cpu
        self.load_cpu = load_cpu
        # Give the sluicegate targets an admin listener (--admin-writes).
        self.admin = False
        self.upstream = None
        self.upstream_proc = None
        # Upstreams by kind (UPSTREAMS), each a Target; `upstream` above is
        # the http1 one, which every run starts.
        self.upstreams = {}
        self._tls = None
        self._grpc_request = None
        # Every target's load requests TEMPLATE_PATH (sluicegate-template runs).
        self.template_path = False
        # sluicegate-jwks: the dir whose jwks.json the upstream serves, and
        # the key and tokens, made on first use (jwks.Material).
        self.jwks_dir = None
        self._jwks = None

    def jwks(self):
        """The sgbench issuer's key (its JWKS written where the upstream
        serves it) and token pool, made on first use."""
        if self._jwks is None:
            if self.jwks_dir is None:
                raise HarnessError("sluicegate-jwks: the upstream was started without "
                                   "its JWKS location")
            self._jwks = jwks.Material(self.jwks_dir, os.path.join(self.jwks_dir, "jwks.json"))
        return self._jwks

    def tls_files(self):
        """The run's certificate and key, made on first use in a temp dir
        removed with the run."""
        if self._tls is None:
            check_tools(["openssl"])
            check_tls_peers(self.peers)
            self._tls = make_cert(self.reg.tmpdir("sgbench-tls-"))
        return self._tls

    def check_sluicegate_tls(self):
        """`sluicegate validate` on the sluicegate-tls config: raises a
        HarnessError that says so if this gateway refuses a TLS listener."""
        ok, out = self.sluicegate_accepts_tls()
        if not ok:
            raise HarnessError(
                "sluicegate-tls: this gateway refuses the TLS listener config "
                f"({self.bin} validate failed). The target needs `listen: [{{ addr: ..., "
                "tls: { certificates: [{ cert: PATH, key: PATH }] } }]` to be accepted; "
                "build a gateway with TLS support or leave sluicegate-tls out of --targets. "
                "Its answer:\n  " + "\n  ".join(out.strip().splitlines()[-6:]))

    def sluicegate_accepts_tls(self):
        """(accepted, output) of `sluicegate validate` on a TLS config."""
        if self.bin is None:
            return False, "no sluicegate binary"
        d = self.reg.tmpdir("sgbench-tlscheck-")
        cfg = os.path.join(d, "sluicegate.yaml")
        Path(cfg).write_text(sluicegate_yaml(free_port(), self.upstream.port if self.upstream
                                             else free_port(), "off", tls=self.tls_files()))
        try:
            p = subprocess.run([str(self.bin), "validate", cfg], capture_output=True,
                               text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, str(e)
        return p.returncode == 0, p.stdout + p.stderr

    def grpc_request(self):
        """The gRPC request message h2load and nghttp post (sgbench/grpc.py),
        written on first use in a temp dir removed with the run."""
        if self._grpc_request is None:
            self._grpc_request = grpc.write_request(self.reg.tmpdir("sgbench-grpc-"))
        return self._grpc_request

    def _nginx(self, name, template, values, cpu, access_log=None, http2=False,
               grpc_reply=False, grpc_pass=False, template_path=False, gzip_on=False):
        d = self.reg.tmpdir(f"sgbench-{name}-")
        values = dict(values, DIR=d)
        conf = render(self.peer_file(template), os.path.join(d, "nginx.conf"), values)
        text = Path(conf).read_text()
        if template_path and f"location = {TEMPLATE_PATH} " not in text:
            # A peers dir without the sluicegate-template path: the upstream
            # answers it as it answers /test.html, with the same body.
            lines = re.findall(r"^\s*location = /test\.html [^\n]*\n", text, re.M)
            if len(lines) != 1:
                raise HarnessError(f"{template}: expected one /test.html location to copy")
            copy = lines[0].replace("/test.html", TEMPLATE_PATH, 1)
            Path(conf).write_text(text.replace(lines[0], lines[0] + copy))
        if template == "nginx-upstream.conf":
            # The compression scenario's document, written into the run's
            # dir and served by a location put after the listen line.
            Path(d, JSON_PATH.lstrip("/")).write_bytes(json_body())
            text = Path(conf).read_text()
            lines = re.findall(r"^\s*listen [^\n]*\n", text, re.M)
            if len(lines) != 1:
                raise HarnessError(f"{template}: expected one listen line to add a location to")
            # The cache scenarios' answers: 1 KiB, and the same document,
            # each with a lifetime of an hour. sluicegate-jwks's key set
            # (written by jwks.Material when that target starts).
            if self.jwks_dir is None:
                self.jwks_dir = self.reg.tmpdir("sgbench-jwks-")
            Path(conf).write_text(text.replace(
                lines[0], lines[0] + f"        location = {JSON_PATH} "
                "{ default_type application/json; root " + d + "; }\n"
                f"        location = {CACHE_PATH} {{ default_type text/plain; "
                'add_header Cache-Control "max-age=3600"; '
                f'return 200 "{CACHE_BODY[:-1].decode()}\\n"; }}\n'
                f"        location = {CACHE_JSON_PATH} {{ default_type application/json; "
                f'alias {d}{JSON_PATH}; '
                'add_header Cache-Control "max-age=3600"; }\n'
                f"        location = {jwks.JWKS_PATH} {{ default_type application/json; "
                f'alias {self.jwks_dir}/jwks.json; '
                'add_header Cache-Control "max-age=3600"; }\n'))
        if gzip_on:
            # The proxy compresses JSON answers with gzip at level 1 (its
            # default), proxied ones too, with Vary as sluicegate sends it.
            text = Path(conf).read_text()
            if text.count("    tcp_nodelay on;\n") != 1:
                raise HarnessError(f"{template}: expected one 'tcp_nodelay on;' to add gzip after")
            Path(conf).write_text(text.replace(
                "    tcp_nodelay on;\n",
                "    tcp_nodelay on;\n    gzip on;\n    gzip_types application/json;\n"
                "    gzip_comp_level 1;\n    gzip_proxied any;\n    gzip_vary on;\n"))
        if http2:
            # The template's one listen line, with `http2` after its address:
            # on a plain port that is HTTP/2 with prior knowledge only.
            text = Path(conf).read_text()
            lines = re.findall(r"^\s*listen \S+", text, re.M)
            if len(lines) != 1:
                raise HarnessError(f"{template}: expected one listen line to add http2 to")
            Path(conf).write_text(text.replace(lines[0], lines[0] + " http2"))
        if grpc_reply:
            # After the listen line, the location answering the gRPC calls
            # (sgbench/grpc.py): the rest of the upstream stays as it is.
            text = Path(conf).read_text()
            lines = re.findall(r"^\s*listen [^\n]*\n", text, re.M)
            if len(lines) != 1:
                raise HarnessError(f"{template}: expected one listen line to add a location to")
            Path(conf).write_text(text.replace(
                lines[0], lines[0] + grpc.nginx_location().decode("latin-1")))
        if grpc_pass:
            # The proxy's one proxy_pass made a grpc_pass to the same upstream
            # block (HTTP/2 in the clear, kept alive); the HTTP/1.1-only
            # lines beside it go.
            text = Path(conf).read_text()
            if text.count("proxy_pass http://origin;") != 1:
                raise HarnessError(f"{template}: expected one 'proxy_pass http://origin;' "
                                   "to make a grpc_pass")
            text = text.replace("proxy_pass http://origin;", "grpc_pass grpc://origin;")
            text = re.sub(r"^\s*proxy_(http_version|set_header) [^\n]*\n", "", text,
                          flags=re.M)
            Path(conf).write_text(text)
        if access_log:
            # The reference config with its one `access_log off;` turned into
            # a buffered log: otherwise the same peer.
            text = Path(conf).read_text()
            if text.count("access_log off;") != 1:
                raise HarnessError(f"{template}: expected one 'access_log off;' to replace")
            Path(conf).write_text(text.replace(
                "access_log off;", NGINX_LOG.replace("@LOG@", access_log)))
        argv = ["nginx", "-p", d + "/", "-e", os.path.join(d, "startup.log"),
                "-c", conf, "-g", "daemon off;"]
        return self.reg.spawn(name, argv, os.path.join(d, "stderr.log"), cpu=cpu)

    def peer_file(self, name):
        """A peer template: in the peers dir, else (the cache peers, which
        older peers dirs lack) in bench/peers."""
        path = self.peers / name
        if not path.is_file() and name in CACHE_PEER_FILES:
            path = REPO / "bench" / "peers" / name
        if not path.is_file():
            raise HarnessError(f"peer template {name} not found in {self.peers}")
        return path

    def start_slow_upstream(self):
        """sgbench/slowup.py on the load core (the `slow` upstream)."""
        port = free_port()
        d = self.reg.tmpdir("sgbench-slowup-")
        proc = self.reg.spawn("upstream-slow", [sys.executable, "-B",
                                                str(Path(__file__).with_name("slowup.py")),
                                                str(port), "50"],
                              os.path.join(d, "slowup.log"), cpu=self.load_cpu)
        deadline = time.monotonic() + 20
        while True:
            if not proc.alive():
                raise HarnessError(f"the slow upstream exited; log tail:\n{proc.log_tail()}")
            try:
                slow_count(port)
                break
            except (OSError, HarnessError, ValueError):
                if time.monotonic() > deadline:
                    raise HarnessError("the slow upstream did not answer within 20s")
                time.sleep(0.1)
        t = Target("direct-slow", port, None, {"upstream_proc": proc}, SLOW_PATH)
        self.upstreams["slow"] = t
        return t

    def start_upstream(self, kind="http1"):
        """The upstream of that kind (UPSTREAMS), started on first use,
        pinned to the load core."""
        if kind in self.upstreams:
            return self.upstreams[kind]
        if kind == "slow":
            return self.start_slow_upstream()
        port = free_port()
        h2c = kind in ("h2c", "grpc")
        proc = self._nginx("upstream" if not h2c else f"upstream-{kind}",
                           "nginx-upstream.conf", {"LISTEN": f"127.0.0.1:{port}"},
                           self.load_cpu, http2=h2c, grpc_reply=kind == "grpc",
                           template_path=self.template_path)
        t = Target("direct" if not h2c else f"direct-{kind}", port, None,
                   {"upstream_proc": proc})
        if h2c:
            wait_h2c(port, [proc])
            if kind == "grpc":
                # The upstream itself answers the call as the proxies must
                # relay it: status 200, the reply, trailer grpc-status 0.
                grpc.check_call("the gRPC upstream", t.url(grpc.PATH), self.grpc_request())
        else:
            wait_ready(t, [proc])
            self.upstream = t
            self.upstream_proc = proc
        self.upstreams[kind] = t
        return t

    def upstream_proc_of(self, kind="http1"):
        return self.upstreams[kind].extra["upstream_proc"]

    def otlp_sink(self, port, d):
        """The OTLP/gRPC sink of the trace targets on 127.0.0.1:`port`, on
        the load generator's CPU: the test collector in `discard` mode, run
        by the test venv's Python (scripts/test-venv makes it once)."""
        venv = subprocess.run([str(REPO / "scripts" / "test-venv")], capture_output=True,
                              text=True, check=False)
        if venv.returncode != 0:
            raise HarnessError("scripts/test-venv failed: " + venv.stderr.strip()[-400:])
        python = os.path.join(venv.stdout.strip(), "bin", "python")
        script = REPO / "crates" / "sluicegate" / "tests" / "fixtures" / "otlp" / "collector.py"
        proc = self.reg.spawn("otlp-sink", [python, str(script), str(port), "discard"],
                              os.path.join(d, "otlp-sink.log"), cpu=self.load_cpu)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return proc
            except OSError:
                time.sleep(0.1)
        raise HarnessError(f"the OTLP sink did not listen on {port}")

    def start(self, name, upstream="http1", compress=False):
        """Start target `name` in front of the upstream of kind `upstream`;
        with `compress`, its config compresses JSON answers in gzip at level
        1 (the gzip scenario), and it is checked to."""
        if name == "direct":
            return self.upstream
        up_proc = self.start_upstream(upstream).extra["upstream_proc"]
        up = self.upstreams[upstream].port
        protocol = "h2c" if upstream in ("h2c", "grpc") else None
        if upstream != "http1" and name not in UPSTREAM_TARGETS[upstream]:
            raise HarnessError(f"{name} cannot run in front of the {upstream} upstream "
                               f"(only {', '.join(UPSTREAM_TARGETS[upstream])} can)")
        port = free_port()
        path = JSON_PATH if compress else TEMPLATE_PATH if self.template_path else "/test.html"
        if name in CACHE_TARGETS:
            path = (SLOW_PATH if upstream == "slow" else CACHE_JSON_PATH if compress
                    else CACHE_PATH)
        tls = self.tls_files() if name in TLS_TARGETS else None
        if name in ("sluicegate-tls", "sluicegate-tls-uring"):
            self.check_sluicegate_tls()
        if name in SLUICEGATE_TARGETS:
            d = self.reg.tmpdir(f"sgbench-{name}-")
            access = "off"
            extra = {}
            if name == "sluicegate-log":
                access = os.path.join(d, "access.log")
                extra["access_log"] = access
            cfg = os.path.join(d, "sluicegate.yaml")
            auth = name in ("sluicegate-auth", "sluicegate-global", "sluicegate-jwks")
            if auth and name != "sluicegate-jwks":
                path = f"/~{AUTH_KEY}/test.html"
            if name == "sluicegate-jwks":
                tokens = self.jwks()
                # Readiness checks send the first token; the load, the pool.
                extra["headers"] = {"Authorization": tokens.header().split(": ", 1)[1]}
                extra["wrk_script"] = tokens.lua
            redis_port = None
            redis_proc = None
            if name == "sluicegate-global":
                redis_port = free_port()
                redis_proc = self.reg.spawn("redis-server", ["redis-server", "--port", str(redis_port),
                                                "--bind", "127.0.0.1", "--save", "",
                                                "--appendonly", "no", "--dir", d],
                               os.path.join(d, "redis.log"), cpu=self.load_cpu)
            trace = None
            if name in TRACE_TARGETS:
                sink_port = free_port()
                extra["sink_proc"] = self.otlp_sink(sink_port, d)
                trace = (TRACE_TARGETS[name], sink_port)
            busy = BUSY_POLL if name == "sluicegate-busy" else None
            fwd = name == "sluicegate-fwd"
            if self.admin:
                extra["admin_port"] = free_port()
            Path(cfg).write_text(sluicegate_yaml(port, up, access, auth, busy, fwd, tls,
                                                 protocol, extra.get("admin_port"), redis_port,
                                                 trace, mirror=name == "sluicegate-mirror",
                                                 split=name == "sluicegate-split",
                                                 template=name == "sluicegate-template",
                                                 compress=compress,
                                                 cache=name == "sluicegate-cache",
                                                 fauth=name == "sluicegate-fauth",
                                                 jwt=name == "sluicegate-jwks",
                                                 io_uring=name in ("sluicegate-uring",
                                                                   "sluicegate-tls-uring")))
            # The handover socket in the run's temp dir, removed with it.
            argv = [str(self.bin), "run", "--config", cfg, "--workers", "1",
                    "--handover-socket", os.path.join(d, "handover.sock")]
            proc = self.reg.spawn(name, argv, os.path.join(d, "stderr.log"), cpu=self.proxy_cpu)
            extra["config"] = cfg
            if redis_proc is not None:
                extra["redis_proc"] = redis_proc
        elif name in ("haproxy", "haproxy-tls"):
            d = self.reg.tmpdir(f"sgbench-{name}-")
            values = {"LISTEN": f"127.0.0.1:{port}", "UPSTREAM": f"127.0.0.1:{up}",
                      "THREADS": 1}
            if tls:
                values["PEM"] = tls["pem"]
            cfg = render(self.peers / ("haproxy-tls.cfg" if tls else "haproxy.cfg"),
                         os.path.join(d, "haproxy.cfg"), values)
            if protocol:
                # The template's one server line, speaking HTTP/2 (in the
                # clear: no `ssl` on the line) to the h2c upstream.
                text = Path(cfg).read_text()
                lines = re.findall(r"^\s*server .*$", text, re.M)
                if len(lines) != 1:
                    raise HarnessError("haproxy template: expected one server line "
                                       "to add `proto h2` to")
                Path(cfg).write_text(text.replace(lines[0], lines[0] + " proto h2"))
            if compress:
                # gzip for JSON answers, in the backend (tune.comp.maxlevel
                # defaults to 1).
                text = Path(cfg).read_text()
                if len(re.findall(r"^backend be\n", text, re.M)) != 1:
                    raise HarnessError("haproxy template: expected one 'backend be' "
                                       "to add compression to")
                Path(cfg).write_text(re.sub(
                    r"^backend be\n", "backend be\n    compression algo gzip\n"
                    "    compression type application/json\n", text, flags=re.M))
            proc = self.reg.spawn(name, ["haproxy", "-db", "-f", cfg],
                                  os.path.join(d, "stderr.log"), cpu=self.proxy_cpu)
            extra = {"config": cfg, "maxconn": haproxy_maxconn(cfg)}
        elif name == "nginx-cache":
            extra = {}
            values = {"LISTEN": f"127.0.0.1:{port}", "UPSTREAM": f"127.0.0.1:{up}"}
            proc = self._nginx(name, "nginx-cache.conf", values, self.proxy_cpu,
                               gzip_on=compress)
        elif name == "varnish":
            if compress:
                raise HarnessError("varnish does not compress: it has no row in gzip")
            d = self.reg.tmpdir("sgbench-varnish-")
            vcl = render(self.peer_file("varnish.vcl"), os.path.join(d, "bench.vcl"),
                         {"LISTEN": f"127.0.0.1:{port}", "UPSTREAM_HOST": "127.0.0.1",
                          "UPSTREAM_PORT": up})
            argv = ["varnishd", "-F", "-j", "none", "-T", "none", "-n", os.path.join(d, "work"),
                    "-a", f"127.0.0.1:{port}", "-f", vcl, "-s", "malloc,256m"]
            for p in VARNISH_PARAMS:
                argv += ["-p", p]
            proc = self.reg.spawn(name, argv, os.path.join(d, "stderr.log"), cpu=self.proxy_cpu)
            extra = {"config": vcl}
        elif name in ("nginx", "nginx-log", "nginx-tls"):
            extra = {}
            log_path = None
            if name == "nginx-log":
                log_path = os.path.join(self.reg.tmpdir("sgbench-nginx-log-"), "access.log")
                extra["access_log"] = log_path
            values = {"LISTEN": f"127.0.0.1:{port}", "UPSTREAM": f"127.0.0.1:{up}"}
            if tls:
                values.update(CERT=tls["cert"], KEY=tls["key"])
            proc = self._nginx(name, "nginx-proxy-tls.conf" if tls else "nginx-proxy.conf",
                               values, self.proxy_cpu, access_log=log_path,
                               grpc_pass=upstream == "grpc", gzip_on=compress)
        else:
            raise HarnessError(f"unknown target {name!r}")
        extra["upstream"] = upstream
        t = Target(name, port, proc, extra, path, cafile=tls["cert"] if tls else None)
        wait_ready(t, [proc, up_proc])
        if compress:
            t.extra["gzip_bytes"] = check_gzip(t)
        if name in CACHE_TARGETS:
            check_cache(t, self.upstreams[upstream].port if upstream == "slow" else None,
                        gzip_body=compress)
        return t

    def stop(self, target):
        if target.proc is not None:
            self.reg.kill(target.proc)
        if target.extra.get("redis_proc") is not None:
            self.reg.kill(target.extra["redis_proc"])
        if target.extra.get("sink_proc") is not None:
            self.reg.kill(target.extra["sink_proc"])
