"""One fixed unary gRPC call, for bench/compare's `grpc` scenario and
bench/instructions: the request message h2load posts, the reply the nginx
upstream answers with, the upstream's location that answers it, and a
check of one call through a proxy with nghttp.

h2load counts every 2xx answer as a success and cannot see trailers, so a
proxy that answered `200` with `grpc-status: 14` would pass its count.
`check_call` is what makes a broken setup fail loudly: one call read with
`nghttp -v`, which must show `:status: 200`, a gRPC content type, the
reply's bytes and a trailer `grpc-status: 0`.
"""

import re
import struct
import subprocess
from pathlib import Path

from .procs import HarnessError

# The method's path: any path under /sgbench.Bench/ is answered alike.
PATH = "/sgbench.Bench/Unary"
HEADERS = ("content-type: application/grpc", "te: trailers")


def _string_field(number, text):
    """A protobuf message of one string field (wire type 2)."""
    data = text.encode()
    assert len(data) < 128  # one-byte length varint
    return bytes([number << 3 | 2, len(data)]) + data


def frame(message):
    """gRPC's length-prefixed message: not compressed, 4-byte length."""
    return b"\x00" + struct.pack(">I", len(message)) + message


REQUEST = frame(_string_field(1, "sluicegate bench request, unary"))
REPLY = frame(_string_field(1, "sluicegate bench reply"))


def nginx_location():
    """The location the gRPC upstream adds to nginx-upstream.conf: a fixed
    reply to any call under /sgbench.Bench/, its `grpc-status: 0` sent as a
    trailer (HTTP/2 trailers; `always`, whatever the status). The reply's
    bytes are written raw inside the quoted string: nginx keeps them, NUL
    bytes included, as long as none is a quote, a backslash or a `$`.

    `return` gives the reply a content-length, which gRPC servers (grpcio,
    grpc-go) do not send; the SSI filter, on for this type only, takes it
    off (it finds no SSI command in the reply and passes its bytes as
    they are). Sluicegate at 5cfefb8 ended a stream whose upstream answer
    had a content-length after that many bytes and dropped its trailers."""
    assert not any(c in REPLY for c in b'"\\$') and b"<!--" not in REPLY
    return (b"        location /sgbench.Bench/ { default_type application/grpc; "
            b"ssi on; ssi_types application/grpc; "
            b"add_trailer grpc-status 0 always; return 200 \"" + REPLY + b"\"; }\n")


def write_request(d):
    """The request message in a file under d, for h2load's and nghttp's -d."""
    path = Path(d) / "grpc-request.bin"
    path.write_bytes(REQUEST)
    return str(path)


def check_call(name, url, request_file, timeout=10.0):
    """One call to url (a TLS or cleartext HTTP/2 URL ending in PATH) with
    nghttp; raises a HarnessError naming `name` unless it answered status
    200, a gRPC content type, the reply's bytes and then a trailer
    `grpc-status: 0`, with no other gRPC status (in its headers or its
    trailers)."""
    argv = ["nghttp", "-v", "-t", f"{timeout:g}", "-d", request_file]
    for h in HEADERS:
        argv += ["-H", h]
    try:
        p = subprocess.run(argv + [url], capture_output=True, timeout=timeout + 5)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{name}: gRPC check: nghttp got no answer from {url} "
                           f"within {timeout:g}s") from None
    out = p.stdout
    text = out.decode("utf-8", "replace")
    fields = re.findall(r"recv \(stream_id=\d+\) ([^:\s][^:]*|:status): (.*)$", text, re.M)
    status = [v.strip() for k, v in fields if k == ":status"]
    ctype = [v.strip() for k, v in fields if k == "content-type"]
    grpc_status = [v.strip() for k, v in fields if k == "grpc-status"]
    problems = []
    if p.returncode != 0:
        problems.append(f"nghttp exit status {p.returncode}")
    if status != ["200"]:
        problems.append(f":status {status or 'missing'}")
    if not ctype or not ctype[0].startswith("application/grpc"):
        problems.append(f"content-type {ctype or 'missing'}")
    if grpc_status != ["0"]:
        problems.append(f"grpc-status {grpc_status or 'missing'}")
    if REPLY not in out:
        problems.append("the reply's bytes missing from the body")
    # The trailer: a grpc-status received after the body's DATA.
    data_at = text.find("recv DATA frame")
    gs_at = text.rfind("grpc-status: 0")
    if grpc_status == ["0"] and not 0 <= data_at < gs_at:
        problems.append("grpc-status not sent as a trailer, after the body")
    if problems:
        tail = "\n".join(text.splitlines()[-25:])
        raise HarnessError(f"{name}: gRPC check of one call to {url} failed ("
                           + "; ".join(problems) + f"); nghttp -v said:\n{tail}\n"
                           + p.stderr.decode("utf-8", "replace")[-400:])
