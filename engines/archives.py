"""Reading the zip and tar archives strangers upload, with every count and size checked before
the work it bounds: a zip's entry count and central directory size from its end record (before
`zipfile` parses the directory), a tar's members one at a time (`TarFile.next`, stopping at the
first past the cap, never listing them all), the declared sizes summed before anything is
unpacked and the bytes actually written counted while unpacking (a zip may lie about its sizes).
Only regular files inside the archive's own folder are unpacked: links, devices, absolute paths
and `..` are refused.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import structlog

log = structlog.get_logger()

BUNDLE_MAX_ENTRIES = 256  # files and folders of an upload bundle (an .onnx and its data files)
_CENTRAL_RECORD_MAX_BYTES = 1024  # a central directory record with a long name and extras


class NotAModelError(ValueError):
    """The file is not an accepted model; the message says why (it is shown to the user)."""


def zip_entry_count(path: Path) -> int | None:
    """The entries a zip's end record declares (None if `path` is no zip), read from the end of
    the file only; `NotAModelError` when its central directory is larger than that many entries
    can need (Python's zipfile parses the whole directory, whatever the count says)."""
    with open(path, "rb") as handle:
        try:
            end = zipfile._EndRecData(handle)  # the record zipfile itself reads first
        except OSError:
            return None
    if end is None:
        return None
    entries, directory_bytes = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]
    if directory_bytes > max(entries, 1) * _CENTRAL_RECORD_MAX_BYTES:
        raise NotAModelError(
            f"the zip's central directory ({directory_bytes} bytes) is larger than {entries} entries need"
        )
    return entries


def _check_name(name: str) -> None:
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or "\\" in name or "\x00" in name or ".." in parts or ":" in parts[0]:
        raise NotAModelError(f"the bundle holds a path outside itself ({name!r})")


def _zip_count(path: Path, max_entries: int) -> None:
    entries = zip_entry_count(path)
    if entries is None:
        raise NotAModelError("not a zip archive")
    if entries > max_entries:
        raise NotAModelError(f"the bundle holds {entries} entries; at most {max_entries}")


def _zip_files(archive: zipfile.ZipFile, max_entries: int) -> Iterator[zipfile.ZipInfo]:
    infos = archive.infolist()
    if len(infos) > max_entries:
        raise NotAModelError(f"the bundle holds {len(infos)} entries; at most {max_entries}")
    for info in infos:
        _check_name(info.filename)
        if info.is_dir():
            continue
        if (info.external_attr >> 16) & 0o170000 not in (0, 0o100000):
            raise NotAModelError(f"the bundle holds a link ({info.filename}): only regular files are accepted")
        yield info


def _tar_files(archive: tarfile.TarFile, max_entries: int) -> Iterator[tarfile.TarInfo]:
    entries = 0
    while (member := archive.next()) is not None:
        entries += 1
        if entries > max_entries:
            raise NotAModelError(f"the bundle holds more than {max_entries} entries; at most {max_entries}")
        _check_name(member.name)
        if member.isdir():
            continue
        if not member.isfile() or member.issparse():
            raise NotAModelError(
                f"the bundle holds a link, device or sparse file ({member.name}): only regular files are accepted"
            )
        yield member


_ARCHIVE_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError)


def bundle_files(path: Path, max_entries: int = BUNDLE_MAX_ENTRIES) -> Iterator[tuple[str, int]]:
    """(name, declared size) of each regular file of the zip or tar at `path`, lazily, refusing
    (`NotAModelError`) past `max_entries` entries or at the first unsafe one."""
    try:
        if zipfile.is_zipfile(path):
            _zip_count(path, max_entries)
            with zipfile.ZipFile(path) as archive:
                for info in _zip_files(archive, max_entries):
                    yield info.filename, info.file_size
        else:
            with tarfile.open(path) as archive:
                for member in _tar_files(archive, max_entries):
                    yield member.name, member.size
    except _ARCHIVE_ERRORS as exc:
        raise NotAModelError(f"the bundle cannot be read ({type(exc).__name__}: {exc})") from exc


class _Unpacked:
    """What one pass of unpacking has declared and written so far, against `max_bytes`."""

    def __init__(self, dest: Path, max_bytes: int) -> None:
        self.dest, self.max_bytes = dest, max_bytes
        self.names: list[str] = []
        self.declared = self.written = 0

    def too_large(self) -> NotAModelError:
        return NotAModelError(f"the bundle unpacks to more than {self.max_bytes} bytes, the most a model may have")

    def copy(self, name: str, size: int, source) -> None:
        key = str(PurePosixPath(name))
        if key in self.names:
            raise NotAModelError(f"the bundle holds {name} twice")
        self.declared += size
        if self.declared > self.max_bytes:
            raise self.too_large()
        target = self.dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        with source, open(target, "xb") as out:
            while block := source.read(1 << 20):
                self.written += len(block)
                if self.written > self.max_bytes:
                    raise self.too_large()
                out.write(block)
        self.names.append(key)


def unpack_bundle(path: Path, dest: Path, max_bytes: int, max_entries: int = BUNDLE_MAX_ENTRIES) -> list[str]:
    """Unpack the regular files of the zip or tar at `path` into `dest` in one pass; returns
    their names. `NotAModelError` past `max_entries` entries, for an unsafe entry, a name given
    twice, or when the declared sizes or the bytes actually written exceed `max_bytes`."""
    unpacked = _Unpacked(dest, max_bytes)
    try:
        if zipfile.is_zipfile(path):
            _zip_count(path, max_entries)
            with zipfile.ZipFile(path) as archive:
                infos = list(_zip_files(archive, max_entries))
                if sum(i.file_size for i in infos) > max_bytes:  # all declared before anything is unpacked
                    raise unpacked.too_large()
                for info in infos:
                    unpacked.copy(info.filename, info.file_size, archive.open(info))
        else:
            with tarfile.open(path) as archive:
                for member in _tar_files(archive, max_entries):
                    unpacked.copy(member.name, member.size, archive.extractfile(member))
    except _ARCHIVE_ERRORS as exc:
        raise NotAModelError(f"the bundle cannot be unpacked ({type(exc).__name__}: {exc})") from exc
    log.info("bundle_unpacked", files=len(unpacked.names), bytes=unpacked.written)
    return unpacked.names
