"""API writes under load: a side thread that PUTs one route to a sluicegate
target's admin API at a fixed rate while a paired run measures it
(`bench/compare --pair sluicegate,sluicegate --admin-writes 1`)."""

import http.client
import json
import threading
import time


class Writer:
    """PUT /routes/bench-write on 127.0.0.1:port every 1/rate seconds,
    each with another body (a real change: validated, saved to the file,
    compiled and swapped), until stopped. Counts the writes answered 2xx
    and the others."""

    def __init__(self, port, rate):
        self.port = port
        self.interval = 1.0 / rate
        self.ok = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=35)

    def _run(self):
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            n += 1
            body = json.dumps({"match": {"path_prefix": "/bench-write"},
                               "respond": {"status": 200, "body": f"write {n}"}})
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                conn.request("PUT", "/routes/bench-write", body,
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if 200 <= resp.status < 300:
                    self.ok += 1
                else:
                    self.failed += 1
            except OSError:
                self.failed += 1
            finally:
                conn.close()
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))
