"""The frames the endpoint and its worker processes exchange over a Unix socket: a 4-byte
length, a 1-byte kind, the body. Tensors travel as `.npz` (read with `allow_pickle=False`)."""

from __future__ import annotations

import io
import socket
import struct

import numpy as np

READY, INFER, OUTPUT, ERROR = b"R", b"I", b"O", b"E"
_HEADER = struct.Struct(">IB")


def send(sock: socket.socket, kind: bytes, body: bytes) -> None:
    sock.sendall(_HEADER.pack(len(body), kind[0]) + body)


def receive(sock: socket.socket) -> tuple[bytes, bytes]:
    """One frame; `ConnectionError` if the other side closed the socket."""
    length, kind = _HEADER.unpack(_exactly(sock, _HEADER.size))
    return bytes([kind]), _exactly(sock, length)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def unpack(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}
