import pytest

from adapters.local_store import LocalFolderStore
from core.ports import NotFound


def test_conditional_write_happens_once(tmp_path):
    store = LocalFolderStore(tmp_path)
    assert store.put_bytes("runs/r/summary.json", b"first", if_absent=True)
    assert not store.put_bytes("runs/r/summary.json", b"second", if_absent=True)
    assert store.get_bytes("runs/r/summary.json") == b"first"


def test_missing_key_and_escaping_key(tmp_path):
    store = LocalFolderStore(tmp_path)
    with pytest.raises(NotFound):
        store.get_bytes("results/nope.json")
    with pytest.raises(ValueError):
        store.put_bytes("../outside", b"x")


def test_list_keys_is_sorted_under_prefix(tmp_path):
    store = LocalFolderStore(tmp_path)
    for name in ("b", "a", "c"):
        store.put_bytes(f"runs/r/events/{name}.json", b"{}")
    store.put_bytes("runs/other/events/z.json", b"{}")
    assert store.list_keys("runs/r/events/") == [f"runs/r/events/{n}.json" for n in "abc"]
