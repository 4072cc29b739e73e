"""`.npy` and `.npz` read without trusting them: every array's size comes from its header, and the
sizes are summed against a limit before any array is allocated or any data decompressed.

A `.npy` is a short header (dtype, shape, order) and the raw data; an `.npz` is a zip of `.npy`
members. A few hundred kilobytes of deflated zeros can declare gigabytes, and a header can declare
any shape, so `numpy.load` (which allocates what the header says, then reads) is never given an
unchecked file. Here: the zip's members are listed (count, names, compression: stored or deflate
only, since zipfile inflates bzip2/lzma chunks without bound), each member's `.npy` header is read
from its stream (a few hundred bytes inflated), the declared bytes are summed against `max_bytes`,
and only then is data read, in bounded chunks into arrays of exactly the declared size (a member
holding more than its header says is never read further; one holding less is refused). Object
dtypes (pickles) are never read.

Refusals: `ArraysTooLarge` (HTTP 413: over the byte or array-count limit) and `UnreadableArrays`
(400/422: not a .npy/.npz, a member that is not a .npy, object arrays, truncated data).
"""

from __future__ import annotations

import io
import math
import threading
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

NPY_MAGIC, NPZ_MAGIC = b"\x93NUMPY", b"PK\x03\x04"
MAX_HEADER_BYTES = 10_000  # numpy's own default: a header is a short Python literal
_CHUNK = 1 << 20
_READ_ERRORS = (
    ValueError,
    EOFError,
    OSError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    NotImplementedError,
    RuntimeError,  # encrypted members; RecursionError from a header's literal
    SyntaxError,
    UnicodeDecodeError,
)


class ArrayFileError(ValueError):
    """The file cannot be read as arrays; the message says why."""


class ArraysTooLarge(ArrayFileError):
    """The arrays the headers declare are over the limit (bytes or count)."""


class UnreadableArrays(ArrayFileError):
    """Not a .npy/.npz of plain arrays: the message names the member and the problem."""


@dataclass(frozen=True)
class ArrayHeader:
    """What a `.npy` header declares, before any of its data is read."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def read_headers(
    source: bytes | Path, *, max_bytes: int, max_arrays: int = 64, verify_data: bool = False, npz_only: bool = False
) -> dict[str, ArrayHeader]:
    """Each array's header by name (`""`: the one array of a `.npy`), the declared sizes summed
    against `max_bytes` (`ArraysTooLarge`) with nothing allocated but the headers. `verify_data`
    also streams each array's data through in bounded chunks (nothing kept): a truncated member or
    a bad CRC is `UnreadableArrays` now rather than when the arrays are loaded. `npz_only`
    refuses a `.npy`."""
    with _opened(source) as (stream, kind):
        if kind == "npy" and npz_only:
            raise UnreadableArrays("a .npy, not an .npz (save the arrays with numpy.savez)")
        if kind == "npy":
            header = _npy_header(stream, "the .npy")
            _check_total(header.nbytes, max_bytes, "the .npy's header declares")
            if verify_data:
                _skim(stream, header, "the .npy")
            return {"": header}
        with _zip(stream) as archive:
            members = _members(archive, max_bytes, max_arrays)
            headers = _member_headers(archive, members, max_bytes)
            if verify_data:
                for name, member in members.items():
                    with archive.open(member) as data:
                        _npy_header(data, f"array {name}")
                        _skim(data, headers[name], f"array {name}")
            return headers


def read_arrays(source: bytes | Path, *, max_bytes: int, max_arrays: int = 64) -> dict[str, np.ndarray]:
    """The arrays by name (`""`: the one array of a `.npy`), every header read and the declared
    sizes summed against `max_bytes` before the first array is allocated; each array is then read
    into exactly its declared size. `ArraysTooLarge` / `UnreadableArrays` as `read_headers`."""
    if isinstance(source, bytes) and source.startswith(NPY_MAGIC):
        return {"": _npy_from_bytes(source, max_bytes)}
    with _opened(source) as (stream, kind):
        if kind == "npy":
            header = _npy_header(stream, "the .npy")
            _check_total(header.nbytes, max_bytes, "the .npy's header declares")
            return {"": _read_data(stream, header, "the .npy")}
        with _zip(stream) as archive:
            members = _members(archive, max_bytes, max_arrays)
            headers = _member_headers(archive, members, max_bytes)
            arrays = {}
            for name, member in members.items():
                with archive.open(member) as data:
                    _npy_header(data, f"array {name}")
                    arrays[name] = _read_data(data, headers[name], f"array {name}")
            return arrays


@contextmanager
def _opened(source: bytes | Path) -> Iterator[tuple[BinaryIO, str]]:
    handle: BinaryIO = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")  # noqa: SIM115
    try:
        start = handle.read(len(NPY_MAGIC))
        handle.seek(0)
        if start.startswith(NPY_MAGIC):
            yield handle, "npy"
        elif start.startswith(NPZ_MAGIC):
            yield handle, "npz"
        else:
            raise UnreadableArrays("not a .npy or .npz (save it with numpy.save or numpy.savez)")
    finally:
        handle.close()


@contextmanager
def _zip(stream: BinaryIO) -> Iterator[zipfile.ZipFile]:
    try:
        archive = zipfile.ZipFile(stream)
    except _READ_ERRORS as exc:
        raise UnreadableArrays(f"not a readable .npz: {exc}") from None
    with archive:
        try:
            yield archive
        except ArrayFileError:
            raise
        except _READ_ERRORS as exc:
            raise UnreadableArrays(f"not a readable .npz: {type(exc).__name__}: {exc}") from None


def _members(archive: zipfile.ZipFile, max_bytes: int, max_arrays: int) -> dict[str, zipfile.ZipInfo]:
    """The members by array name, from the zip's directory alone (nothing inflated yet)."""
    infos = archive.infolist()
    if len(infos) > max_arrays:
        raise ArraysTooLarge(f"the .npz holds {len(infos)} arrays; at most {max_arrays}")
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        if not info.filename.endswith(".npy"):
            raise UnreadableArrays(
                f"{info.filename!r} is not a .npy array (save the file with numpy.savez or numpy.savez_compressed)"
            )
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise UnreadableArrays(f"{info.filename!r}: only stored or deflated members are read")
        if info.flag_bits & 0x1:
            raise UnreadableArrays(f"{info.filename!r} is encrypted")
        name = info.filename[: -len(".npy")]
        if name in members:
            raise UnreadableArrays(f"the .npz holds two arrays named {name!r}")
        members[name] = info
    # each member is a header and the data it declares: the zip's own sizes cap the data already
    declared = sum(info.file_size for info in infos)
    if declared > max_bytes + len(infos) * (MAX_HEADER_BYTES + 16):
        raise ArraysTooLarge(_over(declared, max_bytes, "the .npz's members declare"))
    return members


def _member_headers(
    archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], max_bytes: int
) -> dict[str, ArrayHeader]:
    headers, total = {}, 0
    for name, member in members.items():
        with archive.open(member) as data:
            headers[name] = _npy_header(data, f"array {name}")
        total += headers[name].nbytes
        _check_total(total, max_bytes, "the .npz's headers declare")
    return headers


# numpy parses a header with ast.literal_eval, which CPython 3.11 does not make safe across threads
# ("SystemError: AST constructor recursion depth mismatch" under concurrent requests): one at a time.
_HEADER_PARSE = threading.Lock()


def _npy_header(stream: BinaryIO, where: str) -> ArrayHeader:
    try:
        with _HEADER_PARSE:
            version = npy_format.read_magic(stream)
            if version == (1, 0):
                shape, fortran_order, dtype = npy_format.read_array_header_1_0(stream, max_header_size=MAX_HEADER_BYTES)
            elif version == (2, 0):
                shape, fortran_order, dtype = npy_format.read_array_header_2_0(stream, max_header_size=MAX_HEADER_BYTES)
            else:
                raise UnreadableArrays(f"{where}: .npy format version {version[0]}.{version[1]} is not read")
    except ArrayFileError:
        raise
    except (*_READ_ERRORS, MemoryError) as exc:
        raise UnreadableArrays(f"{where}: not a readable .npy header: {exc}") from None
    if dtype.hasobject:
        raise UnreadableArrays(f"{where} holds object arrays (pickled Python objects are never loaded)")
    if any(dim < 0 for dim in shape):
        raise UnreadableArrays(f"{where}: a negative dim in shape {list(shape)}")
    return ArrayHeader(tuple(shape), dtype, fortran_order)


def _check_total(total: int, max_bytes: int, what: str) -> None:
    if total > max_bytes:
        raise ArraysTooLarge(_over(total, max_bytes, what))


def _over(total: int, max_bytes: int, what: str) -> str:
    return f"{what} {_mb(total)} of arrays; at most {_mb(max_bytes)} are read"


def _mb(size: int) -> str:
    return f"{size / 2**20:,.1f} MB" if size < 1 << 50 else f"{size:.3g} bytes"


def _read_data(stream: BinaryIO, header: ArrayHeader, where: str) -> np.ndarray:
    """The array `header` declares, read from `stream` into an array of exactly its size."""
    flat = np.empty(header.count, dtype=header.dtype)
    if header.nbytes:
        view, filled = memoryview(flat.view(np.uint8)), 0
        while filled < header.nbytes:
            got = stream.readinto(view[filled : filled + _CHUNK])
            if not got:
                raise UnreadableArrays(f"{where}: the data ends after {filled} of {header.nbytes} declared bytes")
            filled += got
    return _shaped(flat, header)


def _skim(stream: BinaryIO, header: ArrayHeader, where: str) -> None:
    """Read the data through to its end in bounded chunks, keeping none of it."""
    seen = 0
    while chunk := stream.read(_CHUNK):
        seen += len(chunk)
    if seen < header.nbytes:
        raise UnreadableArrays(f"{where}: the data ends after {seen} of {header.nbytes} declared bytes")


def _npy_from_bytes(body: bytes, max_bytes: int) -> np.ndarray:
    """A `.npy` held in memory: checked, then viewed in place (no copy of the data)."""
    stream = io.BytesIO(body)
    header = _npy_header(stream, "the .npy")
    _check_total(header.nbytes, max_bytes, "the .npy's header declares")
    offset = stream.tell()
    if len(body) - offset < header.nbytes:
        raise UnreadableArrays(f"the .npy: the data ends after {len(body) - offset} of {header.nbytes} declared bytes")
    if not header.nbytes:
        return _shaped(np.empty(header.count, dtype=header.dtype), header)
    return _shaped(np.frombuffer(body, dtype=header.dtype, count=header.count, offset=offset), header)


def _shaped(flat: np.ndarray, header: ArrayHeader) -> np.ndarray:
    if header.fortran_order:
        return flat.reshape(header.shape[::-1]).transpose()
    return flat.reshape(header.shape)
