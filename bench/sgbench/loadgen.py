"""Load generators (wrk, ab): command lines, output parsing, and one measured run."""

import os
import re
import time

from . import procs

# name -> how to load it. `log_variant`: the table also has a sluicegate row
# with the access log on.
SCENARIOS = {
    "c64": {"tool": "wrk", "conns": 64, "log_variant": True},
    "c1000": {"tool": "wrk", "conns": 1000},
    "c1": {"tool": "wrk", "conns": 1},
    "ab-k-c100": {"tool": "ab", "conns": 100, "keepalive": True, "n": 200000},
    "ab-c1500": {"tool": "ab", "conns": 1500, "keepalive": False, "n": 60000},
    "idle15k": {"tool": "idle"},
}


def command(scenario, url, duration, ab_duration):
    spec = SCENARIOS[scenario]
    if spec["tool"] == "wrk":
        return ["wrk", "-t1", f"-c{spec['conns']}", f"-d{duration}s", "--latency", url]
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
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["socket_errors"] = sum(int(x) for x in m.groups())
        out["socket_errors_detail"] = dict(zip(("connect", "read", "write", "timeout"),
                                               (int(x) for x in m.groups())))
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
    proxy_pids = target.proc.pids() if target.proc else []
    upstream_pids = upstream_proc.pids()
    soft_pids = procs.ksoftirqd_pids()
    tag = f"{scenario}-{target.name}-{time.monotonic_ns()}"
    out_path = os.path.join(workdir, tag + ".out")
    err_path = os.path.join(workdir, tag + ".err")

    m0 = procs.machine_ticks()
    px0 = procs.cpu_ticks(proxy_pids)
    up0 = procs.cpu_ticks(upstream_pids)
    sq0 = procs.cpu_ticks(soft_pids)
    self0 = procs.self_ticks()
    t0 = time.monotonic()
    with open(out_path, "wb") as out:
        lg = reg.spawn("loadgen", argv, err_path, cpu=load_cpu, stdout=out)
    rss_max = procs.rss_kib(proxy_pids)
    rusage = None
    status = None
    timed_out = False
    while True:
        pid, st, ru = os.wait4(lg.pid, os.WNOHANG)
        if pid == lg.pid:
            status, rusage = st, ru
            lg.popen.returncode = os.waitstatus_to_exitcode(st)
            break
        if time.monotonic() - t0 > timeout_s:
            timed_out = True
            reg.kill(lg)
            break
        rss_max = max(rss_max, procs.rss_kib(proxy_pids))
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    m1 = procs.machine_ticks()
    px1 = procs.cpu_ticks(proxy_pids)
    up1 = procs.cpu_ticks(upstream_pids)
    sq1 = procs.cpu_ticks(soft_pids)
    self1 = procs.self_ticks()
    if lg in reg.procs:
        reg.procs.remove(lg)

    text = _read(out_path)
    err = _read(err_path).strip()
    parsed = parse_wrk(text) if argv[0] == "wrk" else parse_ab(text)
    rc = lg.popen.returncode if not timed_out else None
    rec = {
        "scenario": scenario,
        "target": target.name,
        "argv": ["taskset", "-c", str(load_cpu)] + argv,
        "rc": rc,
        "wall_s": round(elapsed, 3),
        **parsed,
    }
    rec["errors"] = (rec["non2xx"] or 0) + (rec["socket_errors"] or 0)
    if timed_out:
        rec["error"] = f"load generator timed out after {timeout_s:.0f}s"
    elif rc != 0 or rec["req_s"] is None:
        tail = "\n".join((err or text).splitlines()[-4:])
        rec["error"] = f"exit status {rc}: {tail}".strip()

    hz = procs.HZ
    px_user, px_sys = px1[0] - px0[0], px1[1] - px0[1]
    up_ticks = sum(up1) - sum(up0)
    sq_ticks = sum(sq1) - sum(sq0)
    lg_ticks = round((rusage.ru_utime + rusage.ru_stime) * hz) if rusage else 0
    self_ticks = self1 - self0
    busy = m1[0] - m0[0]
    capacity = max(1, m1[1] - m0[1])
    ours = px_user + px_sys + up_ticks + lg_ticks + self_ticks + sq_ticks
    other = max(0, busy - ours)
    rec["other_cpu_pct"] = round(100.0 * other / capacity, 2)
    rec["cpu_ticks"] = {"hz": hz, "machine_busy": busy, "machine_total": capacity,
                        "proxy": px_user + px_sys, "upstream": up_ticks,
                        "loadgen": lg_ticks, "harness": self_ticks, "ksoftirqd": sq_ticks}
    rec["upstream_cpu_s"] = round(up_ticks / hz, 3)
    rec["loadgen_cpu_s"] = round(lg_ticks / hz, 3)
    if target.proc is not None:
        user_s, sys_s = px_user / hz, px_sys / hz
        cpu_s = user_s + sys_s
        n = rec["requests"] or 0
        rec["proxy"] = {
            "pids": proxy_pids,
            "user_s": round(user_s, 3),
            "sys_s": round(sys_s, 3),
            "cpu_s": round(cpu_s, 3),
            "req_per_cpu_s": round(n / cpu_s, 1) if cpu_s > 0 and n else None,
            "user_us_per_req": round(user_s * 1e6 / n, 3) if n else None,
            "sys_us_per_req": round(sys_s * 1e6 / n, 3) if n else None,
            "rss_max_kib": rss_max,
        }
    else:
        rec["proxy"] = None
    return rec
