#!/usr/bin/env python3
"""A PostgreSQL wire-protocol proxy that counts round trips.

Usage: count_round_trips.py LISTEN_PORT PG_HOST PG_PORT COUNT_FILE

Forwards every connection to PG_HOST:PG_PORT and counts, across all connections, the
times a client waits for the server: a client turn that holds a `Sync` (end of an
extended-protocol exchange) or a `Query` (a simple query) after the server has last spoken.
Messages a client sends together without waiting in between (a queued `ROLLBACK` that goes
out with the pool's ping, say) are one round trip; a pool's `ping` counts too. The running total is written to COUNT_FILE after every change. Connect with
`sslmode=disable` so the stream can be read.
"""
import asyncio
import struct
import sys

listen_port, pg_host, pg_port, count_file = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
total = 0


def bump():
    global total
    total += 1
    with open(count_file, "w") as f:
        f.write(str(total))


class Turn:
    """Who spoke last on one connection."""

    def __init__(self):
        self.server_spoke = True


async def pipe(reader, writer, parse, turn):
    buffer = b""
    started = not parse  # the startup packet has no type byte
    try:
        while data := await reader.read(65536):
            if not parse:
                turn.server_spoke = True
            writer.write(data)
            await writer.drain()
            if not parse:
                continue
            buffer += data
            while True:
                if not started:
                    if len(buffer) < 8:
                        break
                    (length,) = struct.unpack("!I", buffer[:4])
                    if len(buffer) < length:
                        break
                    code = struct.unpack("!I", buffer[4:8])[0]
                    buffer = buffer[length:]
                    # SSLRequest / GSSENCRequest are followed by another startup packet.
                    started = code not in (80877103, 80877104)
                    continue
                if len(buffer) < 5:
                    break
                kind = buffer[:1]
                (length,) = struct.unpack("!I", buffer[1:5])
                if len(buffer) < 1 + length:
                    break
                buffer = buffer[1 + length:]
                if kind in (b"S", b"Q") and turn.server_spoke:
                    turn.server_spoke = False
                    bump()
    finally:
        writer.close()


async def handle(client_reader, client_writer):
    server_reader, server_writer = await asyncio.open_connection(pg_host, pg_port)
    turn = Turn()
    await asyncio.gather(
        pipe(client_reader, server_writer, True, turn),
        pipe(server_reader, client_writer, False, turn),
        return_exceptions=True,
    )


async def main():
    with open(count_file, "w") as f:
        f.write("0")
    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


asyncio.run(main())
