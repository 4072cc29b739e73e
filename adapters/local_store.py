"""The object store as a local folder (the embedded default). Same keys as S3.

A write puts a whole new file in place (`os.replace`), so a reader never sees half of one. A
compare-and-put holds an `flock` on the object's file while it compares and replaces it, and
checks, once it holds the lock, that the file it locked is still the one in place: of two
writers from the same version, across threads and processes, one wins.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from core.ports import NotFound, content_version


class LocalFolderStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._root = os.path.realpath(self.root)

    def _path(self, key: str) -> Path:
        path = os.path.normpath(os.path.join(self._root, key))  # the store writes no links: normalising is enough
        if not path.startswith(self._root + os.sep):
            raise ValueError(f"key {key!r} leaves the store")
        return Path(path)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise NotFound(key) from exc

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if if_absent:
            try:
                os.link(tmp, path)  # atomic: fails if the key exists
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        os.replace(tmp, path)
        return True

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        data = self.get_bytes(key)
        return data, content_version(data)

    def compare_and_put(self, key: str, data: bytes, *, version: str | None) -> str | None:
        if version is None:
            return content_version(data) if self.put_bytes(key, data, if_absent=True) else None
        path = self._path(key)
        while True:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    replaced = os.stat(path).st_ino != os.fstat(fd).st_ino
                except FileNotFoundError:
                    return None
                if replaced:  # another writer put a new file in place while this one waited: read that
                    continue
                with os.fdopen(os.dup(fd), "rb") as current:
                    if content_version(current.read()) != version:
                        return None
                fd_tmp, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
                with os.fdopen(fd_tmp, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, path)
                return content_version(data)
            finally:
                os.close(fd)  # closing releases the lock

    def get_file(self, key: str, path: Path) -> None:
        source = self._path(key)
        if not source.is_file():
            raise NotFound(key)
        shutil.copyfile(source, path)

    def put_file(self, key: str, path: Path) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)

    def list_keys(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        folder = base if base.is_dir() else base.parent
        if not folder.exists():
            return []
        root = str(self.root)
        keys = []
        for directory, _, files in os.walk(folder):
            relative = os.path.relpath(directory, root)
            base = "" if relative == "." else relative.replace(os.sep, "/") + "/"
            keys += [base + name for name in files if not name.startswith(".tmp-")]
        return sorted(k for k in keys if k.startswith(prefix))
