"""An object store in memory, for unit tests and benchmarks: the `ObjectStore` port with the
semantics of S3 that handlers rely on (conditional writes, sorted listings in pages of 1,000),
and a count of the calls made to it, as S3 would bill them (one per listing page)."""

from __future__ import annotations

import math
import threading
from collections import Counter
from pathlib import Path

from core.ports import NotFound, content_version

S3_LIST_PAGE = 1000


class MemoryStore:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.calls: Counter[str] = Counter()
        self._writing = threading.Lock()  # conditional writes are atomic, as on S3

    @property
    def call_count(self) -> int:
        return sum(self.calls.values())

    def exists(self, key: str) -> bool:
        self.calls["head"] += 1
        return key in self.objects

    def get_bytes(self, key: str) -> bytes:
        self.calls["get"] += 1
        try:
            return self.objects[key]
        except KeyError:
            raise NotFound(key) from None

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        self.calls["put"] += 1
        with self._writing:
            if if_absent and key in self.objects:
                return False
            self.objects[key] = bytes(data)
        return True

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        data = self.get_bytes(key)
        return data, content_version(data)

    def compare_and_put(self, key: str, data: bytes, *, version: str | None) -> str | None:
        self.calls["put"] += 1
        with self._writing:
            current = self.objects.get(key)
            if (None if current is None else content_version(current)) != version:
                return None
            self.objects[key] = bytes(data)
        return content_version(data)

    def get_file(self, key: str, path: Path) -> None:
        Path(path).write_bytes(self.get_bytes(key))

    def put_file(self, key: str, path: Path) -> None:
        self.put_bytes(key, Path(path).read_bytes())

    def list_keys(self, prefix: str) -> list[str]:
        found = sorted(k for k in self.objects if k.startswith(prefix))
        self.calls["list"] += max(1, math.ceil(len(found) / S3_LIST_PAGE))
        return found
