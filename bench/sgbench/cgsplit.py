"""Where a callgrind profile's instructions went: `callgrind_annotate`'s
exclusive (self) cost per source file and function, each entry put in one
of a few groups.

callgrind_annotate lists the self cost of each function split by the
source file its instructions came from: code inlined from another file
(an `h2` function inlined into ours, a `Vec` method inlined into `h2`'s)
is its own entry, `FILE:FUNCTION`. Each entry goes to one group, by the
first of these rules that applies:

1. the function is a memory copy (`memcpy`, `memmove` and their variants):
   `copies`;
2. the function is the allocator's (`malloc`, `free`, mimalloc's `mi_*`,
   Rust's `__rust_alloc` shims, any `GlobalAlloc` impl, such as the
   binary's huge-page wrapper around mimalloc) or its file is mimalloc's:
   `alloc`;
3. the file belongs to a crate of a group (its path under cargo's registry,
   or under this repository's `crates/`): that group;
4. otherwise (the standard library's files, a C library without source
   lines, a crate of no group such as `http` or `bytes`) the function's own
   path decides: `h2::...` is `h2`, `tokio::...` is `tokio`, and so on; a
   function of the standard library instantiated for a type of a group
   (`core::ptr::drop_in_place<h2::...>`) goes to the first group its
   type parameters name;
5. the rest: `rest`, labelled by crate (or library) for the breakdown.

So `h2` holds the h2 crate (HPACK is its `hpack` module), with the standard
library code inlined into its functions or instantiated for its types;
`ours` the same for the sluicegate crates. The rules read names only, so
one binary and one load always give the same split.
"""

import re
import subprocess
from collections import Counter

from .procs import HarnessError

GROUPS = ("h2", "ours", "copies", "alloc", "tls", "tokio", "rest")
GROUP_TITLES = {
    "h2": "h2 crate (HPACK included)",
    "ours": "our code (sluicegate crates)",
    "copies": "copies (memcpy, memmove)",
    "alloc": "allocator (mimalloc, malloc, free)",
    "tls": "TLS (rustls, aws-lc)",
    "tokio": "tokio runtime",
    "rest": "the rest",
}
# Crate name (as in cargo's registry directory, or a symbol's first path
# segment with `_` for `-`) -> group.
CRATE_GROUPS = {
    "h2": "h2",
    "tokio": "tokio",
    "rustls": "tls", "tokio-rustls": "tls", "rustls-webpki": "tls", "webpki": "tls",
    "rustls-pki-types": "tls", "aws-lc-rs": "tls", "aws-lc-sys": "tls",
    "mimalloc": "alloc", "libmimalloc-sys": "alloc",
}
_COPY = re.compile(r"^(__)?(memcpy|memmove|mempcpy|__memcpy_chk|__memmove_chk)(_\w+)?$")
_ALLOC = re.compile(r"^(malloc|free|realloc|calloc|cfree|posix_memalign|aligned_alloc|memalign"
                    r"|_int_malloc|_int_free|_int_realloc|_int_memalign|malloc_consolidate"
                    r"|tcache_\w+|__libc_(malloc|free|realloc|calloc)"
                    r"|_?mi_\w+|__rust_(alloc|dealloc|realloc|alloc_zeroed)"
                    r"|__rdl_\w+|__rg_\w+)$")
_REGISTRY = re.compile(r"/(?:registry/src|git/checkouts)/[^/]+/([A-Za-z0-9_-]+?)-\d+\.\d+\.\d+[^/]*/")
_OURS_FILE = re.compile(r"(?:^|/)crates/(sluicegate[A-Za-z0-9_-]*)/")
_STD = ("core", "alloc", "std", "hashbrown", "compiler_builtins")
_PATH_START = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?=::)")
_LINE = re.compile(r"^\s*([\d,]+)\s+(\S.*?)(?: \[(/[^\]]*)\])?$")


def crate_of_file(path):
    """The crate a source file belongs to, or None (the standard library,
    C sources of the system, `???`)."""
    m = _OURS_FILE.search(path)
    if m:
        return m.group(1).replace("-", "_")
    m = _REGISTRY.search(path)
    if m:
        return m.group(1)
    return None


def _bare(fn):
    """The function's name without callgrind's recursion mark (`'2`) and a
    symbol version (`@@GLIBC_2.14`)."""
    return re.sub(r"'\d+$", "", fn).split("@", 1)[0]


def _symbol_group(name):
    """The group a function's own path names (rule 4), or None."""
    if name.startswith("aws_lc_") or name.startswith("aws-lc"):
        return "tls"
    starts = _PATH_START.findall(name)
    for i, crate in enumerate(starts):
        crate = crate.replace("_", "-")
        if crate.startswith("sluicegate"):
            return "ours"
        if crate in CRATE_GROUPS:
            return CRATE_GROUPS[crate]
        if i == 0 and crate.replace("-", "_") not in _STD and not name.startswith("<"):
            return None  # a crate of no group: its type parameters do not count
    return None


def classify(file, fn, obj=None):
    """(group, label): the label names the crate or library of `rest`."""
    name = _bare(fn)
    if _COPY.match(name):
        return "copies", name
    if _ALLOC.match(name) or " as core::alloc::global::GlobalAlloc>::" in name:
        return "alloc", name
    crate = crate_of_file(file) if file != "???" else None
    if crate:
        if crate.startswith("sluicegate"):
            return "ours", crate
        if crate in CRATE_GROUPS:
            return CRATE_GROUPS[crate], crate
    group = _symbol_group(name)
    if group:
        return group, crate or "std"
    if crate:
        return "rest", crate
    m = _PATH_START.match(name.lstrip("<"))
    if m and "::" in name:
        return "rest", "std" if m.group(0) in _STD else m.group(0)
    if file.startswith("/rustc/") or "/library/" in file:
        return "rest", "std"
    if obj:
        return "rest", re.sub(r"\.so[.\d]*$", "", obj.rsplit("/", 1)[-1])
    return "rest", "?"


def annotate(path):
    """(total, [(Ir, file, function, object)]) from callgrind_annotate:
    exclusive cost, every entry (threshold 100%)."""
    try:
        p = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no",
                            "--show-percs=no", "--inclusive=no", path],
                           capture_output=True, text=True, timeout=600, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"callgrind_annotate {path}: {e}") from None
    if p.returncode != 0:
        raise HarnessError(f"callgrind_annotate {path} failed: {p.stderr[-400:]}")
    total = None
    entries = []
    unread = []
    in_list = False
    for line in p.stdout.splitlines():
        if total is None:
            m = re.match(r"^\s*([\d,]+)\s+PROGRAM TOTALS", line)
            if m:
                total = int(m.group(1).replace(",", ""))
            continue
        if re.match(r"^Ir\s+file:function", line):
            in_list = True
            continue
        if not in_list or not line.strip() or line.startswith("-"):
            continue
        m = _LINE.match(line)
        if not m:
            unread.append(line)
            continue
        where = m.group(2)
        file, _, fn = where.partition(":")
        entries.append((int(m.group(1).replace(",", "")), file, fn, m.group(3)))
    if total is None:
        raise HarnessError(f"callgrind_annotate {path}: no PROGRAM TOTALS line")
    listed = sum(e[0] for e in entries)
    # The entries of a gateway's profile add up to a little more than its
    # total (167 instructions in every run seen, whatever the load): a
    # constant, which the difference of two runs cancels.
    if abs(listed - total) > 10_000:
        raise HarnessError(f"callgrind_annotate {path}: the entries add up to {listed:,}, "
                           f"not the total {total:,}; lines not read: {unread[:5]}")
    return total, entries


def split(path):
    """(total, Counter by group, Counter of `rest` by label) of one profile."""
    total, entries = annotate(path)
    groups, rest = Counter(), Counter()
    for ir, file, fn, obj in entries:
        group, label = classify(file, fn, obj)
        groups[group] += ir
        if group == "rest":
            rest[label] += ir
    return total, groups, rest
