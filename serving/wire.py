"""The frames the endpoint and its worker processes exchange over a Unix socket: a 4-byte
length, a 1-byte kind, the body. Tensors travel as uncompressed `.npz`: read back with their
declared sizes bounded by the frame's (`workloads/array_files.py`), so a worker running a hostile
model cannot answer with a compressed bomb, and a frame is at most `MAX_FRAME_BYTES`."""

from __future__ import annotations

import io
import socket
import struct

import numpy as np

from workloads.array_files import read_arrays

MAX_FRAME_BYTES = 1 << 30
READY, INFER, OUTPUT, ERROR = b"R", b"I", b"O", b"E"
_HEADER = struct.Struct(">IB")


def send(sock: socket.socket, kind: bytes, body: bytes) -> None:
    sock.sendall(_HEADER.pack(len(body), kind[0]) + body)


def receive(sock: socket.socket) -> tuple[bytes, bytes]:
    """One frame; `ConnectionError` if the other side closed the socket or announced a frame
    over `MAX_FRAME_BYTES`."""
    length, kind = _HEADER.unpack(_exactly(sock, _HEADER.size))
    if length > MAX_FRAME_BYTES:
        raise ConnectionError(f"a frame of {length} bytes, over the limit of {MAX_FRAME_BYTES}")
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
    """The arrays `pack` made; uncompressed, they hold no more than the frame (`ArrayFileError` if
    they declare more, or are not plain arrays)."""
    return read_arrays(data, max_bytes=len(data), max_arrays=1024)
