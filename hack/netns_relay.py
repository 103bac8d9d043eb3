"""Forwards TCP connections made to HOST:PORT inside a network namespace to HOST:PORT in this
process's own network namespace: a real node inside a namespace of its own reaches the API
server on the host's loopback this way, and nothing else leaves the namespace.

    python -m hack.netns_relay /run/netns/NAME 127.0.0.1:PORT

The listening socket is made inside the namespace (setns, then back): sockets stay in the
namespace they were made in, so the connections it forwards to are made in the host's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000


def setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def listen_inside(netns: str, host: str, port: int) -> socket.socket:
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    inside = os.open(netns, os.O_RDONLY)
    try:
        setns(inside)
        try:
            return socket.create_server((host, port))
        finally:
            setns(home)
    finally:
        os.close(inside)
        os.close(home)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def serve(listener: socket.socket, host: str, port: int) -> None:
    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(forward, sock=listener)
    async with server:
        await server.serve_forever()


def main() -> None:
    netns, address = sys.argv[1], sys.argv[2]
    host, port = address.rsplit(":", 1)
    listener = listen_inside(netns, host, int(port))
    print(f"relaying {address} in {netns} to {address} here", flush=True)
    asyncio.run(serve(listener, host, int(port)))


if __name__ == "__main__":
    main()
