"""Medians, markdown tables, and the raw-run JSON."""

import json
import statistics
from pathlib import Path


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _load_us_per_req(r):
    """CPU of the load core (upstream plus load generator) per request, in µs."""
    n = r.get("requests")
    up, lg = r.get("upstream_cpu_s"), r.get("loadgen_cpu_s")
    if not n or up is None or lg is None:
        return None
    return (up + lg) * 1e6 / n


def summarize(runs, targets):
    """Per target: medians over its kept runs of one scenario."""
    out = {}
    for t in targets:
        rs = [r for r in runs if r["target"] == t]
        if not rs:
            continue
        px = [r["proxy"] for r in rs if r.get("proxy")]
        out[t] = {
            "runs": len(rs),
            "req_s": _median(r["req_s"] for r in rs),
            "p50_us": _median(r["p50_us"] for r in rs),
            "p99_us": _median(r["p99_us"] for r in rs),
            "req_per_cpu_s": _median(p["req_per_cpu_s"] for p in px),
            "user_us_per_req": _median(p["user_us_per_req"] for p in px),
            "sys_us_per_req": _median(p["sys_us_per_req"] for p in px),
            "rss_kib": _median(p["rss_max_kib"] for p in px),
            "load_us_per_req": _median(_load_us_per_req(r) for r in rs),
            "errors": sum(r["errors"] or 0 for r in rs),
            "failed": sum(1 for r in rs if r.get("error")),
            "flagged": sum(1 for r in rs if r.get("disturbed")),
            "other_cpu_pct_max": max((r["other_cpu_pct"] for r in rs), default=None),
            "error_samples": sorted({r["error"] for r in rs if r.get("error")})[:2],
        }
    return out


def _num(v, fmt="{:,.0f}"):
    return "—" if v is None else fmt.format(v)


def _ms(us):
    return "—" if us is None else f"{us / 1000:.3f} ms"


def _ratio(a, b):
    return "—" if a is None or not b else f"{a / b:.2f}×"


def scenario_table(summary, peers=("haproxy", "nginx"), labels=None):
    """peers: the HAProxy and the nginx target the ratio columns compare
    with (the TLS scenarios: haproxy-tls and nginx-tls; the cache ones:
    varnish and nginx-cache, `labels` naming their columns)."""
    hap = summary.get(peers[0], {}).get("req_per_cpu_s")
    ngx = summary.get(peers[1], {}).get("req_per_cpu_s")
    direct = summary.get("direct", {})
    first, second = labels or ("HAProxy", "nginx")
    head = ("| target | req/s (median) | req per proxy CPU-s | user µs/req | sys µs/req "
            f"| p50 | p99 | p50 added vs direct | proxy RSS MiB | req/CPU-s vs {first} "
            f"| req/CPU-s vs {second} | req/s vs direct | load core µs/req | errors | runs "
            "| notes |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for t, s in summary.items():
        added = None
        if s["p50_us"] is not None and direct.get("p50_us") is not None and t != "direct":
            added = s["p50_us"] - direct["p50_us"]
        notes = []
        if s["flagged"]:
            notes.append(f"{s['flagged']} run(s) disturbed >5%")
        if s["failed"]:
            notes.append(f"{s['failed']} run(s) failed: " + "; ".join(s["error_samples"])
                         .replace("|", "/").replace("\n", " "))
        lines.append("| " + " | ".join([
            t,
            _num(s["req_s"]),
            _num(s["req_per_cpu_s"]),
            _num(s["user_us_per_req"], "{:.2f}"),
            _num(s["sys_us_per_req"], "{:.2f}"),
            _ms(s["p50_us"]),
            _ms(s["p99_us"]),
            "—" if added is None else f"{added / 1000:+.3f} ms",
            _num(None if s["rss_kib"] is None else s["rss_kib"] / 1024, "{:.1f}"),
            _ratio(s["req_per_cpu_s"], hap),
            _ratio(s["req_per_cpu_s"], ngx),
            _ratio(s["req_s"], direct.get("req_s")),
            _num(s["load_us_per_req"], "{:.2f}"),
            str(s["errors"]),
            str(s["runs"]),
            ", ".join(notes),
        ]) + " |")
    return "\n".join(lines)


def summarize_pairs(pairs):
    """Per pair of records (A, B) run at once: A/B of requests per proxy
    CPU-second and of req/s, and the medians of those ratios."""
    ratios = [(a["proxy"]["req_per_cpu_s"] / b["proxy"]["req_per_cpu_s"]
               if a.get("proxy") and b.get("proxy") and a["proxy"]["req_per_cpu_s"]
               and b["proxy"]["req_per_cpu_s"] else None) for a, b in pairs]
    rps = [a["req_s"] / b["req_s"] if a["req_s"] and b["req_s"] else None for a, b in pairs]
    return {"targets": [pairs[0][0]["target"], pairs[0][1]["target"]],
            "ratio_req_per_cpu_s": ratios, "ratio_req_s": rps,
            "median_ratio_req_per_cpu_s": _median(ratios),
            "median_ratio_req_s": _median(rps)}


def pair_table(pairs):
    """One row per round of a --pair run, then the medians."""
    a_name, b_name = pairs[0][0]["target"], pairs[0][1]["target"]
    head = (f"| round | {a_name} req/s | {a_name} req per CPU-s | {a_name} user / sys µs/req "
            f"| {b_name} req/s | {b_name} req per CPU-s | {b_name} user / sys µs/req "
            f"| A/B req per CPU-s | A/B req/s | errors |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]

    def cells(r):
        px = r.get("proxy") or {}
        us = (f"{px['user_us_per_req']:.2f} / {px['sys_us_per_req']:.2f}"
              if px.get("user_us_per_req") is not None else "—")
        return [_num(r["req_s"]), _num(px.get("req_per_cpu_s")), us]

    s = summarize_pairs(pairs)
    for i, (a, b) in enumerate(pairs):
        ra, rr = s["ratio_req_per_cpu_s"][i], s["ratio_req_s"][i]
        row = ([str(a["round"])] + cells(a) + cells(b)
               + [_num(ra, "{:.3f}"), _num(rr, "{:.3f}"),
                  str((a["errors"] or 0) + (b["errors"] or 0))])
        lines.append("| " + " | ".join(row) + " |")
    meds = []
    for runs in ([a for a, _ in pairs], [b for _, b in pairs]):
        px = [r.get("proxy") or {} for r in runs]
        user = _median(p.get("user_us_per_req") for p in px)
        sys_ = _median(p.get("sys_us_per_req") for p in px)
        meds += [_num(_median(r["req_s"] for r in runs)),
                 _num(_median(p.get("req_per_cpu_s") for p in px)),
                 "—" if user is None or sys_ is None else f"{user:.2f} / {sys_:.2f}"]
    lines.append("| **median** | " + " | ".join(meds) + " | **"
                 + _num(s["median_ratio_req_per_cpu_s"], "{:.3f}") + "** | "
                 + _num(s["median_ratio_req_s"], "{:.3f}") + " | |")
    return "\n".join(lines)


def idle_table(records):
    lines = ["| target | connections held | failures | RSS before MiB | RSS after MiB "
             "| bytes per connection |",
             "|---|---|---|---|---|---|"]
    for r in records:
        lines.append(
            f"| {r['target']} | {r['held']:,} of {r['requested']:,} | {r['failures']} "
            f"| {r['rss_before_kib'] / 1024:.1f} | {r['rss_after_kib'] / 1024:.1f} "
            f"| {_num(r['bytes_per_conn'])} |"
        )
    return "\n".join(lines)


def markdown(meta, sections, notes):
    """sections: list of (title, description, table)."""
    out = [f"## {meta['date']} {meta['time']} UTC, commit {meta['commit']}", ""]
    out.append(f"- Machine: {meta['nproc']} CPUs, {meta['cpu_model']}, "
               f"Linux {meta['kernel']}")
    out.append(f"- Peers: {meta['versions']}")
    out.append(f"- Command: `{meta['command']}`")
    how = "paired: two targets at once, median of the per-round ratios" if meta.get(
        "paired") else "interleaved, median reported"
    warm = ", after one warm-up run" + ("" if meta.get("paired") else " per target")
    out.append(f"- Rounds: {meta['rounds']} ({how}"
               f"{warm if meta['warmup'] else ', no warm-up'}); "
               f"proxy on CPU {meta['proxy_cpu']}, upstream and load generator on CPU "
               f"{meta['load_cpu']}")
    if meta.get("raw"):
        out.append(f"- Raw runs: `{meta['raw']}`")
    for n in notes:
        out.append(f"- Note: {n}")
    out.append("")
    for title, desc, table in sections:
        out += [f"### {title}", "", desc, "", table, ""]
    return "\n".join(out)


DOC_HEADER = """# Benchmarks

Side-by-side runs of Sluicegate, HAProxy and nginx in front of the same nginx
upstream, appended by `bench/compare` (see `bench/README.md` for the method
and how to read the tables). Newest at the bottom.

"""


def append_doc(path, text):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = path.read_text() if path.exists() else DOC_HEADER
    if not existing.endswith("\n\n"):
        existing = existing.rstrip("\n") + "\n\n"
    path.write_text(existing + text.rstrip("\n") + "\n")


def write_json(path, data):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")


# The targets bench/compare is run to check, each from the scenarios that
# measure it. The efficiency targets compare sluicegate with the better of the
# two peers, in requests per proxy CPU-second.
EFFICIENCY = 1.10
VS_DIRECT = 0.97
C1_ADDED_US = 50
IDLE_BYTES = 4096
USER_US = 1.4
PEERS = ("haproxy", "nginx")
TLS_PEERS = ("haproxy-tls", "nginx-tls")
# The cache scenarios' peers (issue 33): sluicegate-cache against the
# better of the two in cache-hit, and in gzip against nginx's
# compression without a cache (nginx-cache beside).
CACHE_PEERS = ("varnish", "nginx-cache")
CACHE_PEER_LABELS = ("Varnish", "nginx-cache")
CACHE_HIT_EFFICIENCY = 1.3
GZIP_CACHE_EFFICIENCY = 2.0
# sluicegate-tls against the better TLS peer, in requests per proxy CPU-second.
TLS_C64_EFFICIENCY = 1.25
TLS_NEW_EFFICIENCY = 2.0
# HTTP/2 (issue 31): h2 against the better TLS peer; h2c-up and grpc against
# haproxy-tls, grpc with nginx-tls reported beside.
H2_EFFICIENCY = 1.2
H2C_UP_EFFICIENCY = 1.0
GRPC_EFFICIENCY = 1.0


def _round_ratios(runs, scenario, ours, peers=PEERS):
    """Per measured round of `scenario`: `ours` over the better peer, in
    requests per proxy CPU-second."""
    rounds = {}
    for r in runs:
        if r.get("scenario") == scenario and r.get("proxy"):
            rounds.setdefault(r["round"], {})[r["target"]] = r["proxy"]["req_per_cpu_s"]
    out = []
    for _, got in sorted(rounds.items()):
        best = max((got[p] for p in peers if got.get(p)), default=None)
        if got.get(ours) and best:
            out.append(got[ours] / best)
    return out


def _verdict(ok):
    return "—" if ok is None else ("**yes**" if ok else "**no**")


def targets_table(summaries, runs, idle_recs, idle_tls_recs=()):
    """A markdown table of each target this run measured, or None. A TLS
    row whose peers ran without sluicegate-tls still shows what the goal
    asks (met: —)."""
    rows = []

    def efficiency(scenario, ours, label, goal=EFFICIENCY, peer_names=PEERS, unit="",
                   beside=()):
        """`beside`: peers whose ratio the row gives without judging it."""
        s = summaries.get(scenario, {})
        mine = s.get(ours, {}).get("req_per_cpu_s")
        peers = {p: s[p]["req_per_cpu_s"] for p in peer_names
                 if s.get(p, {}).get("req_per_cpu_s")}
        if not peers:
            return
        best = max(peers, key=peers.get)
        want = (f">= {goal:.2f}x the better peer" if len(peer_names) > 1
                else f">= {goal:.2f}x {peer_names[0]}")
        if not mine:
            if all(p in TLS_PEERS for p in peer_names):
                rows.append((label, want, f"{ours} not run; {best}: {peers[best]:,.0f}{unit}, "
                             f"so the goal is {peers[best] * goal:,.0f}", None))
            return
        ratio = mine / peers[best]
        per_round = _round_ratios(runs, scenario, ours, peer_names)
        spread = (f"; per round {min(per_round):.2f}-{max(per_round):.2f}x"
                  if len(per_round) > 1 else "")
        also = "".join(f"; {mine / s[b]['req_per_cpu_s']:.2f}x {b}" for b in beside
                       if s.get(b, {}).get("req_per_cpu_s"))
        rows.append((label, want, f"{ratio:.2f}x {best} (medians){spread}{also}",
                     ratio >= goal))

    efficiency("c64", "sluicegate", "c64 requests per proxy CPU-s")
    efficiency("c1000", "sluicegate", "c1000 requests per proxy CPU-s")
    efficiency("c64", "sluicegate-log", "c64 requests per proxy CPU-s, access log on")
    c64 = summaries.get("c64", {})
    sg, direct = c64.get("sluicegate", {}), c64.get("direct", {})
    if sg.get("req_s") and direct.get("req_s"):
        r = sg["req_s"] / direct["req_s"]
        rows.append(("c64 throughput", f">= {VS_DIRECT:.2f}x direct", f"{r:.2f}x",
                     r >= VS_DIRECT))
    if sg.get("user_us_per_req") is not None:
        u = sg["user_us_per_req"]
        rows.append(("c64 user time per request", f"< {USER_US} µs", f"{u:.2f} µs", u < USER_US))
    c1000 = summaries.get("c1000", {})
    mine, hap = c1000.get("sluicegate", {}).get("p99_us"), c1000.get("haproxy", {}).get("p99_us")
    if mine is not None and hap is not None:
        rows.append(("c1000 p99", "<= HAProxy's", f"{mine / 1000:.1f} ms against {hap / 1000:.1f}",
                     mine <= hap))
    c1 = summaries.get("c1", {})
    base = c1.get("direct", {}).get("p50_us")
    for t in ("sluicegate", "sluicegate-busy"):
        p50 = c1.get(t, {}).get("p50_us")
        if p50 is not None and base is not None:
            added = p50 - base
            rows.append((f"c1 added p50, {t}", f"< {C1_ADDED_US} µs", f"{added:+.0f} µs",
                         added < C1_ADDED_US))
    efficiency("tls-c64", "sluicegate-tls", "tls-c64 requests per proxy CPU-s",
               TLS_C64_EFFICIENCY, TLS_PEERS)
    efficiency("tls-new", "sluicegate-tls",
               "tls-new requests per proxy CPU-s (resumed handshakes, see tls-new)",
               TLS_NEW_EFFICIENCY, TLS_PEERS)
    efficiency("h2", "sluicegate-tls", "h2 requests per proxy CPU-s", H2_EFFICIENCY, TLS_PEERS)
    efficiency("h2c-up", "sluicegate-tls", "h2c-up requests per proxy CPU-s",
               H2C_UP_EFFICIENCY, ("haproxy-tls",))
    efficiency("grpc", "sluicegate-tls", "grpc calls per proxy CPU-s", GRPC_EFFICIENCY,
               ("haproxy-tls",), beside=("nginx-tls",))
    efficiency("cache-hit", "sluicegate-cache", "cache-hit requests per proxy CPU-s",
               CACHE_HIT_EFFICIENCY, CACHE_PEERS)
    efficiency("gzip", "sluicegate-cache", "gzip with the cache, requests per proxy CPU-s",
               GZIP_CACHE_EFFICIENCY, ("nginx",), beside=("nginx-cache",))
    idle = {r["target"]: r.get("bytes_per_conn") for r in idle_recs or []}
    if idle.get("sluicegate") is not None:
        b = idle["sluicegate"]
        beside = f" (HAProxy {idle['haproxy']:,.0f})" if idle.get("haproxy") is not None else ""
        rows.append(("RSS per idle connection", f"< {IDLE_BYTES:,} B", f"{b:,.0f} B{beside}",
                     b < IDLE_BYTES))
        if idle.get("haproxy") is not None:
            rows.append(("RSS per idle connection against HAProxy", "< HAProxy's",
                         f"{b:,.0f} B against {idle['haproxy']:,.0f} B", b < idle["haproxy"]))
    idle_tls = {r["target"]: r.get("bytes_per_conn") for r in idle_tls_recs or []}
    mine, hap = idle_tls.get("sluicegate-tls"), idle_tls.get("haproxy-tls")
    if mine is not None and hap is not None:
        rows.append(("RSS per idle TLS connection", "<= HAProxy's",
                     f"{mine:,.0f} B against {hap:,.0f} B", mine <= hap))
    elif hap is not None:
        rows.append(("RSS per idle TLS connection", "<= HAProxy's",
                     f"sluicegate-tls not run; haproxy-tls: {hap:,.0f} B", None))
    if not rows:
        return None
    lines = ["| target | goal | measured | met |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {_verdict(d)} |" for a, b, c, d in rows]
    return "\n".join(lines)
