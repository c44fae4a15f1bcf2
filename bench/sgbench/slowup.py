"""The upstream of the cache-miss-coalesced scenario: every GET waits
DELAY_MS, then answers a 1 KiB body with `Cache-Control: max-age=1`, so
that objects expire while clients keep asking; it counts the requests
and tells the count at GET /_count (not counted). asyncio, keep-alive,
standard library only. Usage: slowup.py PORT [DELAY_MS]."""

import asyncio
import sys

BODY = b"x" * 1023 + b"\n"
COUNT = 0


async def serve(reader, writer, delay):
    global COUNT
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].split()
            target = line[1] if len(line) > 1 else b"/"
            length = 0
            for h in head.split(b"\r\n")[1:]:
                name, _, value = h.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip() or 0)
            if length:
                await reader.readexactly(length)
            if target == b"/_count":
                body = f"{COUNT}\n".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Cache-Control: no-store\r\n"
                             + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                await writer.drain()
                continue
            COUNT += 1
            await asyncio.sleep(delay)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         b"Cache-Control: max-age=1\r\n"
                         + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
                         + (b"" if line[0] == b"HEAD" else BODY))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main(port, delay):
    server = await asyncio.start_server(lambda r, w: serve(r, w, delay), "127.0.0.1", port,
                                        backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), (int(sys.argv[2]) if len(sys.argv) > 2 else 50) / 1000))
