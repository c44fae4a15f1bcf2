"""Load generators (wrk, ab, h2load, tlsload): command lines, output parsing, and one measured run."""

import os
import re
import sys
import time
from pathlib import Path

from . import grpc, procs

# name -> how to load it. `log_variant`: the table also has a sluicegate row
# with the access log on. `busy_variant`: by default, also sluicegate-busy (the
# scenario whose target is met only with busy polling). `tls`: the scenario
# runs the TLS targets (targets.TLS_TARGETS) and only those. `headers`: extra
# request headers. Tool `tlsload` is sgbench/tlsload.py, a Python client
# making a new TLS connection per request and never resuming a session.
SCENARIOS = {
    "c64": {"tool": "wrk", "conns": 64, "log_variant": True},
    "c1000": {"tool": "wrk", "conns": 1000},
    "c1": {"tool": "wrk", "conns": 1, "busy_variant": True},
    "ab-k-c100": {"tool": "ab", "conns": 100, "keepalive": True, "n": 200000},
    "ab-c1500": {"tool": "ab", "conns": 1500, "keepalive": False, "n": 60000},
    "idle15k": {"tool": "idle"},
    # TLS: the same request as c64 over HTTPS, kept alive.
    "tls-c64": {"tool": "wrk", "conns": 64, "tls": True},
    # A new connection per request. wrk keeps each connection's session and
    # offers it on reconnecting, so against a target that resumes sessions
    # this is a resumed handshake per request (see bench/README.md).
    "tls-new": {"tool": "wrk", "conns": 64, "tls": True, "keepalive": False,
                "headers": ["Connection: close"]},
    # A full handshake per request: tlsload offers no session.
    "tls-full": {"tool": "tlsload", "conns": 64, "tls": True, "keepalive": False},
    "idle15k-tls": {"tool": "idle", "tls": True},
    # HTTP/2 over TLS (ALPN h2): 64 connections with 10 streams in flight
    # each (h2load from nghttp2-client), the same request as c64.
    "h2": {"tool": "h2load", "conns": 64, "streams": 10, "tls": True},
    # The same load, the proxies' upstream speaking HTTP/2 in the clear: an
    # nginx with `http2` on its plain port (targets.H2C_UPSTREAM); sluicegate's
    # service has `protocol: h2c`, HAProxy's server line `proto h2`. nginx
    # cannot proxy plain HTTP to an HTTP/2 upstream (only grpc_pass), so
    # nginx-tls does not run in it. `upstream`: the kind of upstream
    # (targets.UPSTREAMS, default http1).
    "h2c-up": {"tool": "h2load", "conns": 64, "streams": 10, "tls": True, "upstream": "h2c"},
    # Unary gRPC calls, the same load: h2load posts one fixed gRPC message
    # (sgbench/grpc.py) with the gRPC headers to a method's path; the proxies'
    # upstream is the h2c nginx with a location answering one fixed reply and
    # a `grpc-status: 0` trailer (nginx-tls proxies with grpc_pass). h2load
    # counts 2xx answers only, so one call through each proxy is checked with
    # nghttp (status 200 and grpc-status 0) before and after the runs.
    "grpc": {"tool": "h2load", "conns": 64, "streams": 10, "tls": True, "upstream": "grpc",
             "grpc": True},
    # Response compression: c64 asking for gzip, a 10 KiB JSON answer from
    # the upstream (targets.JSON_PATH, a location the harness adds to the
    # upstream's config) compressed by the proxy at the level
    # of nginx's default (gzip_comp_level 1): sluicegate's route has
    # `compress: { algorithms: [gzip], level: fast }`, nginx `gzip on` with
    # `gzip_comp_level 1` and `gzip_proxied any`, HAProxy `compression algo
    # gzip` (its tune.comp.maxlevel defaults to 1). Each target is checked
    # to answer gzip that decodes to the upstream's body (targets.check_gzip).
    # `compress`: the targets run their compressing config; `path`: what
    # the load asks for.
    "gzip": {"tool": "wrk", "conns": 64, "headers": ["Accept-Encoding: gzip"],
             "compress": True, "path": "/10k.json"},
    # The cache (issue 33), run by the caching targets only
    # (targets.CACHE_TARGETS). cache-hit: c64, every request a hit on one
    # 1 KiB object the upstream nginx gave with `max-age=3600`
    # (targets.CACHE_PATH). cache-miss-coalesced: c64 over 4 keys
    # (cache-keys.lua) whose objects live 1 s, from the slow upstream
    # (sgbench/slowup.py: 50 ms per answer), so each key expires every
    # second or so and its concurrent misses should make one upstream
    # request; the upstream's requests per run are counted
    # (`count_upstream`). Each target is checked first: a second request
    # is a hit with the upstream's body, and in front of the slow upstream
    # two requests of a fresh key make one upstream request
    # (targets.check_cache).
    "cache-hit": {"tool": "wrk", "conns": 64, "cache": True},
    "cache-miss-coalesced": {"tool": "wrk", "conns": 64, "cache": True, "upstream": "slow",
                             "script": "cache-keys.lua", "count_upstream": True},
}
# The targets that run in the compression scenarios (the upstream does
# not compress, so `direct` has no row). sluicegate-cache and nginx-cache
# compress with their cache on, the document stored (targets.CACHE_JSON_PATH).
COMPRESS_TARGETS = ("sluicegate", "nginx", "haproxy", "sluicegate-cache", "nginx-cache")
CACHE_SCENARIOS = tuple(s for s, spec in SCENARIOS.items() if spec.get("cache"))
TLS_SCENARIOS = tuple(s for s, spec in SCENARIOS.items() if spec.get("tls"))
TLSLOAD = Path(__file__).resolve().parent / "tlsload.py"


def command(scenario, url, duration, ab_duration, cafile=None, data=None, script=None):
    """The load generator's argv. `data`: the file h2load posts (the gRPC
    scenario's request message, targets.Launcher.grpc_request). `script`:
    the target's own wrk script (sluicegate-jwks's token pool), which only
    a wrk scenario without a script of its own can run."""
    spec = SCENARIOS[scenario]
    if script and (spec["tool"] != "wrk" or spec.get("script")):
        raise procs.HarnessError(f"{scenario}: this target's load is a wrk script, "
                                 "which this scenario cannot run")
    if spec["tool"] == "wrk":
        headers = []
        for h in spec.get("headers", ()):
            headers += ["-H", h]
        if spec.get("script"):
            headers += ["-s", str(Path(__file__).resolve().parent / spec["script"])]
        if script:
            headers += ["-s", script]
        return ["wrk", "-t1", f"-c{spec['conns']}", f"-d{duration}s", "--latency",
                *headers, url]
    if spec["tool"] == "h2load":
        extra = []
        if spec.get("grpc"):
            if data is None:
                raise ValueError(f"{scenario}: h2load needs the gRPC request file")
            extra = ["-d", data]
            for h in grpc.HEADERS:
                extra += ["-H", h]
        return ["h2load", "-t1", f"-c{spec['conns']}", f"-m{spec['streams']}",
                "-D", str(duration), *extra, url]
    if spec["tool"] == "tlsload":
        return [sys.executable, "-B", str(TLSLOAD), f"-c{spec['conns']}", f"-d{duration}",
                "--cafile", cafile, url]
    argv = ["ab", "-q"]
    if spec.get("keepalive"):
        argv.append("-k")
    argv.append(f"-c{spec['conns']}")
    if ab_duration:
        # -t alone caps ab at 50000 requests; a large -n after it lifts the cap.
        argv += ["-t", str(ab_duration), "-n", "100000000"]
    else:
        argv += ["-n", str(spec["n"])]
    return argv + [url]


_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6, "m": 60e6}


def parse_wrk(text):
    out = {"req_s": None, "p50_us": None, "p99_us": None, "requests": None,
           "non2xx": 0, "socket_errors": 0}
    for m in re.finditer(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M):
        out[f"p{m.group(1)}_us"] = float(m.group(2)) * _UNITS[m.group(3)]
    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(\w+)", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
    m = re.search(r"^Requests/sec:\s*([\d.]+)", text, re.M)
    if m:
        out["req_s"] = float(m.group(1))
    m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    if m:
        out["non2xx"] = int(m.group(1))
    m = re.search(r"^Resumed handshakes:\s*(\d+)", text, re.M)
    if m:  # tlsload only
        out["resumed"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["socket_errors"] = sum(int(x) for x in m.groups())
        out["socket_errors_detail"] = dict(zip(("connect", "read", "write", "timeout"),
                                               (int(x) for x in m.groups())))
    return out


def parse_h2load(text):
    out = {"req_s": None, "p50_us": None, "p99_us": None, "requests": None,
           "non2xx": 0, "socket_errors": 0}
    m = re.search(r"^finished in [\d.]+\w+, ([\d.]+) req/s", text, re.M)
    if m:
        out["req_s"] = float(m.group(1))
    m = re.search(r"^requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
        out["socket_errors"] = int(m.group(2)) + int(m.group(3)) + int(m.group(4))
    m = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text, re.M)
    if m:
        out["non2xx"] = int(m.group(3)) + int(m.group(4))
    m = re.search(r"^time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", text, re.M)
    if m:  # h2load reports the mean, not percentiles: shown as p50
        out["p50_us"] = float(m.group(1)) * _UNITS[m.group(2)]
    return out


def parse_ab(text):
    out = {"req_s": None, "p50_us": None, "p99_us": None, "requests": None,
           "non2xx": 0, "socket_errors": 0}
    m = re.search(r"^Requests per second:\s*([\d.]+)", text, re.M)
    if m:
        out["req_s"] = float(m.group(1))
    m = re.search(r"^Complete requests:\s*(\d+)", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
    m = re.search(r"^Failed requests:\s*(\d+)", text, re.M)
    if m:
        out["socket_errors"] = int(m.group(1))
    m = re.search(r"^Non-2xx responses:\s*(\d+)", text, re.M)
    if m:
        out["non2xx"] = int(m.group(1))
    for pct in ("50", "99"):
        m = re.search(rf"^\s*{pct}%\s+(\d+)", text, re.M)
        if m:
            out[f"p{pct}_us"] = float(m.group(1)) * 1e3
    return out


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def measured_run(reg, scenario, target, upstream_proc, argv, load_cpu, workdir, timeout_s):
    """Run the load generator once against `target`, sampling the proxy.

    Returns the raw record: load-generator results plus CPU and memory of the
    proxy, and the CPU used by every other process during the run."""
    return measured_runs(reg, scenario, [(target, argv)], upstream_proc, load_cpu,
                         workdir, timeout_s)[0]


def measured_runs(reg, scenario, loads, upstream_proc, load_cpu, workdir, timeout_s):
    """Run one load generator per (target, argv) in `loads`, all at once, and
    sample each target's proxy; one record per target, in order. Several
    targets at once share the proxy core, so the machine's noise hits them
    alike (bench/compare --pair)."""
    proxy_pids = [t.proc.pids() if t.proc else [] for t, _ in loads]
    upstream_pids = upstream_proc.pids()
    soft_pids = procs.ksoftirqd_pids()
    paths = []
    for target, _ in loads:
        tag = f"{scenario}-{target.name}-{time.monotonic_ns()}"
        paths.append((os.path.join(workdir, tag + ".out"), os.path.join(workdir, tag + ".err")))

    m0 = procs.machine_ticks()
    px0 = [procs.cpu_ticks(p) for p in proxy_pids]
    up0 = procs.cpu_ticks(upstream_pids)
    sq0 = procs.cpu_ticks(soft_pids)
    self0 = procs.self_ticks()
    t0 = time.monotonic()
    lgs = []
    for (_, argv), (out_path, err_path) in zip(loads, paths):
        with open(out_path, "wb") as out:
            lgs.append(reg.spawn("loadgen", argv, err_path, cpu=load_cpu, stdout=out))
    rss_max = [procs.rss_kib(p) for p in proxy_pids]
    rusage = [None] * len(lgs)
    done = [False] * len(lgs)
    timed_out = False
    while not all(done):
        for i, lg in enumerate(lgs):
            if done[i]:
                continue
            pid, st, ru = os.wait4(lg.pid, os.WNOHANG)
            if pid == lg.pid:
                rusage[i], done[i] = ru, True
                lg.popen.returncode = os.waitstatus_to_exitcode(st)
        if all(done):
            break
        if time.monotonic() - t0 > timeout_s:
            timed_out = True
            for i, lg in enumerate(lgs):
                if not done[i]:
                    reg.kill(lg)
            break
        rss_max = [max(m, procs.rss_kib(p)) for m, p in zip(rss_max, proxy_pids)]
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    m1 = procs.machine_ticks()
    px1 = [procs.cpu_ticks(p) for p in proxy_pids]
    up1 = procs.cpu_ticks(upstream_pids)
    sq1 = procs.cpu_ticks(soft_pids)
    self1 = procs.self_ticks()
    for lg in lgs:
        if lg in reg.procs:
            reg.procs.remove(lg)

    hz = procs.HZ
    up_ticks = sum(up1) - sum(up0)
    sq_ticks = sum(sq1) - sum(sq0)
    lg_ticks = [round((ru.ru_utime + ru.ru_stime) * hz) if ru else 0 for ru in rusage]
    px_ticks = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(px0, px1)]
    self_ticks = self1 - self0
    busy = m1[0] - m0[0]
    capacity = max(1, m1[1] - m0[1])
    ours = (sum(u + s for u, s in px_ticks) + up_ticks + sum(lg_ticks) + self_ticks
            + sq_ticks)
    other = max(0, busy - ours)
    recs = []
    for i, ((target, argv), (out_path, err_path)) in enumerate(zip(loads, paths)):
        text = _read(out_path)
        err = _read(err_path).strip()
        parsed = (parse_ab(text) if argv[0] == "ab" else
                  parse_h2load(text) if argv[0] == "h2load" else parse_wrk(text))
        rc = None if timed_out and not done[i] else lgs[i].popen.returncode
        rec = {
            "scenario": scenario,
            "target": target.name,
            "argv": ["taskset", "-c", str(load_cpu)] + argv,
            "rc": rc,
            "wall_s": round(elapsed, 3),
            **parsed,
        }
        rec["errors"] = (rec["non2xx"] or 0) + (rec["socket_errors"] or 0)
        if rc is None:
            rec["error"] = f"load generator timed out after {timeout_s:.0f}s"
        elif rc != 0 or rec["req_s"] is None:
            tail = "\n".join((err or text).splitlines()[-4:])
            rec["error"] = f"exit status {rc}: {tail}".strip()
        rec["other_cpu_pct"] = round(100.0 * other / capacity, 2)
        rec["cpu_ticks"] = {"hz": hz, "machine_busy": busy, "machine_total": capacity,
                            "proxy": sum(px_ticks[i]), "upstream": up_ticks,
                            "loadgen": lg_ticks[i], "harness": self_ticks,
                            "ksoftirqd": sq_ticks}
        rec["upstream_cpu_s"] = round(up_ticks / hz, 3)
        rec["loadgen_cpu_s"] = round(lg_ticks[i] / hz, 3)
        if target.proc is not None:
            user_s, sys_s = px_ticks[i][0] / hz, px_ticks[i][1] / hz
            cpu_s = user_s + sys_s
            n = rec["requests"] or 0
            rec["proxy"] = {
                "pids": proxy_pids[i],
                "user_s": round(user_s, 3),
                "sys_s": round(sys_s, 3),
                "cpu_s": round(cpu_s, 3),
                "req_per_cpu_s": round(n / cpu_s, 1) if cpu_s > 0 and n else None,
                "user_us_per_req": round(user_s * 1e6 / n, 3) if n else None,
                "sys_us_per_req": round(sys_s * 1e6 / n, 3) if n else None,
                "rss_max_kib": rss_max[i],
            }
        else:
            rec["proxy"] = None
        recs.append(rec)
    return recs
