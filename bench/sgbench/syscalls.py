"""System calls per proxied request, by kind: one extra run per target with `perf trace -s` attached to the proxy."""

import os
import re
import signal
import subprocess
import time

from . import loadgen

# A thread's table in `perf trace -s` output: a header line naming the
# thread, then one row per system call: name, calls, errors, total ms, ...
_ROW = re.compile(r"^\s+([a-z_0-9]+)\s+(\d+)\s+(\d+)\s+[\d.]+\s")


def parse_summary(text):
    """{syscall: calls} summed over every thread of the summary."""
    calls = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m.group(1) not in ("syscall",):
            calls[m.group(1)] = calls.get(m.group(1), 0) + int(m.group(2))
    return calls


def counted_run(reg, scenario, target, upstream_proc, argv, load_cpu, workdir, timeout_s):
    """One load run against `target` with `perf trace -s` on its processes.

    The tracing slows every system call, so this run's throughput and CPU
    are not comparable and are never part of a ratio: only the counts per
    request are kept. Returns {"requests", "calls": {name: n}, "per_req":
    {name: n/req}, "total_per_req"} or {"error": ...}."""
    pids = target.proc.pids() if target.proc else []
    if not pids:
        return {"error": "no proxy process"}
    out = os.path.join(workdir, f"perf-trace-{scenario}-{target.name}-{time.monotonic_ns()}.txt")
    perf = subprocess.Popen(
        ["taskset", "-c", str(load_cpu), "perf", "trace", "-s", "-o", out,
         "-p", ",".join(str(p) for p in pids)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        # perf attaches before its first output; give it a moment to start.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and perf.poll() is None and not os.path.exists(out):
            time.sleep(0.05)
        time.sleep(0.3)
        if perf.poll() is not None:
            return {"error": "perf trace exited: " + perf.stderr.read().decode(errors="replace")[-300:]}
        rec = loadgen.measured_run(reg, scenario, target, upstream_proc, argv, load_cpu,
                                   workdir, timeout_s)
    finally:
        if perf.poll() is None:
            os.killpg(perf.pid, signal.SIGINT)
        try:
            perf.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(perf.pid, signal.SIGKILL)
            perf.wait()
    if rec.get("error"):
        return {"error": rec["error"]}
    try:
        with open(out, encoding="utf-8", errors="replace") as f:
            calls = parse_summary(f.read())
    except OSError as e:
        return {"error": f"no perf trace summary: {e}"}
    n = rec.get("requests") or 0
    if not n or not calls:
        return {"error": f"{n} requests, {len(calls)} kinds of system call counted"}
    per_req = {k: round(v / n, 3) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])}
    return {"requests": n, "calls": calls, "per_req": per_req,
            "total_per_req": round(sum(calls.values()) / n, 3)}


def table(results):
    """Markdown rows: target, requests, system calls per request, and the
    kinds that make up at least 0.01 per request."""
    rows = ["| target | requests | syscalls/req | by kind (per request) |",
            "| --- | ---: | ---: | --- |"]
    for name, res in results:
        if res.get("error"):
            rows.append(f"| {name} | | | error: {res['error']} |")
            continue
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in res["per_req"].items() if v >= 0.01)
        rows.append(f"| {name} | {res['requests']:,} | {res['total_per_req']:.2f} | {kinds} |")
    return "\n".join(rows)
