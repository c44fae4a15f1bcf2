"""Processes started by the harness, and what /proc says about them and the machine.

Every process is started in its own session (so its whole group can be
signalled), registered, and killed by `Registry.cleanup()`, which runs from a
`finally` and from `atexit`. Temporary directories are registered the same way.
"""

import atexit
import gzip
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time

HZ = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1


class HarnessError(Exception):
    """A failure that stops the harness with a clear message (exit status 2)."""


def raise_nofile():
    """Raise our soft fd limit to the hard limit; children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _die_with_parent():
    """Runs in the child before exec: if the harness is killed outright
    (SIGKILL, where no cleanup can run), the kernel kills the child too."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort; cleanup() is the main path
        pass


class Proc:
    def __init__(self, name, popen, log_path):
        self.name = name
        self.popen = popen
        self.pid = popen.pid
        self.log_path = log_path

    def alive(self):
        return self.popen.poll() is None

    def log_tail(self, n=15):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def pids(self):
        """This process and all its descendants (nginx: master and worker)."""
        return process_tree(self.pid)


class Registry:
    def __init__(self):
        self.procs = []
        self.tmpdirs = []
        self._done = False
        atexit.register(self.cleanup)

    def tmpdir(self, prefix="sgbench-"):
        d = tempfile.mkdtemp(prefix=prefix)
        # nginx workers run as an unprivileged user when we are root.
        os.chmod(d, 0o755)
        self.tmpdirs.append(d)
        return d

    def spawn(self, name, argv, log_path, cpu=None, stdout=None):
        """Start argv (pinned to `cpu` with taskset), stderr (and stdout unless
        given) to log_path, in a new session."""
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + list(argv)
        log = open(log_path, "ab")
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout if stdout is not None else log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def kill(self, proc, grace=5.0):
        if proc.popen.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and proc.popen.poll() is None:
                time.sleep(0.05)
            if proc.popen.poll() is None:
                _signal_group(proc.pid, signal.SIGKILL)
                try:
                    proc.popen.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        # Leftover children in the group (e.g. nginx workers) go too.
        _signal_group(proc.pid, signal.SIGKILL)
        if proc in self.procs:
            self.procs.remove(proc)

    def cleanup(self):
        for proc in list(reversed(self.procs)):
            try:
                self.kill(proc)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        for d in self.tmpdirs:
            shutil.rmtree(d, ignore_errors=True)
        self.tmpdirs = []


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- /proc readers


def _stat_fields(pid):
    """Fields of /proc/PID/stat after the command name; index 0 is field 3."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read().decode("ascii", "replace")
    return data[data.rindex(")") + 2 :].split()


def process_tree(root):
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(_stat_fields(entry)[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if os.path.exists(f"/proc/{pid}"):
            out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_ticks(pids):
    """(utime, stime) in clock ticks summed over pids. /proc/PID/stat already
    sums all threads of a process, live and exited."""
    user = system = 0
    for pid in pids:
        try:
            f = _stat_fields(pid)
        except OSError:
            continue
        user += int(f[11])
        system += int(f[12])
    return user, system


def rss_kib(pids):
    """Sum of VmRSS over pids, in KiB."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total


def ksoftirqd_pids():
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().startswith("ksoftirqd"):
                        out.append(int(entry))
            except OSError:
                pass
    return out


def _irq_time_accounting():
    """With CONFIG_IRQ_TIME_ACCOUNTING, irq/softirq time is in no task's
    utime/stime; without it (tick accounting), it is in the interrupted task's
    stime while /proc/stat files it under irq/softirq."""
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                for line in f:
                    if line.startswith("CONFIG_IRQ_TIME_ACCOUNTING="):
                        return line.strip().endswith("=y")
            return False
        except OSError:
            continue
    return False


IRQ_TIME_ACCOUNTING = _irq_time_accounting()


def machine_ticks():
    """(busy, total) clock ticks over all CPUs from /proc/stat.

    busy counts time processes can be charged with: user, nice, system, and
    (unless irq time is accounted separately) irq and softirq. Steal is in the
    total only."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    v = [int(x) for x in parts[1:9]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system
    if not IRQ_TIME_ACCOUNTING:
        busy += irq + softirq
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return busy, total


def busy_percent(seconds=1.0):
    """Share of the whole machine busy over `seconds`, in percent."""
    b0, t0 = machine_ticks()
    time.sleep(seconds)
    b1, t1 = machine_ticks()
    return 100.0 * (b1 - b0) / max(1, t1 - t0)


def wait_until_idle(threshold_pct, max_wait_s):
    """Sample 1 s at a time until the machine is below threshold or max_wait_s
    has passed. Returns a record of what happened."""
    start = time.monotonic()
    samples = []
    while True:
        pct = busy_percent(1.0)
        samples.append(round(pct, 1))
        if pct < threshold_pct:
            return {"idle": True, "waited_s": round(time.monotonic() - start - 1.0, 1),
                    "busy_pct": samples[-1]}
        if time.monotonic() - start >= max_wait_s:
            return {"idle": False, "waited_s": round(time.monotonic() - start - 1.0, 1),
                    "busy_pct": samples[-1]}


def self_ticks():
    t = os.times()
    return round((t.user + t.system) * HZ)
