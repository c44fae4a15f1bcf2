"""The WebSocket upstream of bench/ws-idle, in a process of its own.

`python3 -B wsecho.py PORT` listens on 127.0.0.1:PORT, answers every
upgrade request with `101 Switching Protocols` and echoes whatever comes
after it, until killed. bench/ws-idle holds the client side of each tunnel
and this process the upstream side, so each holds one socket per tunnel
under the per-process fd limit (it raises its soft limit to the hard one).
Python 3.11, standard library only.
"""

import asyncio
import resource
import sys

ANSWER = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
          b"Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")


async def tunnel(reader, writer):
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(ANSWER)
        await writer.drain()
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass
    writer.close()


async def serve(port):
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
    server = await asyncio.start_server(tunnel, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main(argv):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(serve(int(argv[0])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
