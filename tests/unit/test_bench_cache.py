"""The benchmarks' cache (`bench/cache.py`): an entry's key changes with the model's bytes, an
engine library's version and AYCI's engine source, so a benchmark never measures a stale artifact."""

from pathlib import Path

from bench import cache
from schemas import versions


def test_the_key_follows_the_model_the_libraries_and_the_engine_source(tmp_path, monkeypatch):
    model = tmp_path / "model.pt2"
    model.write_bytes(b"weights")
    key = cache.cache_key(model, "onnx", 1)
    assert cache.cache_key(model, "onnx", 1) == key and len(key) == 16
    assert cache.cache_key(model, "tvm", 1) != key  # another entry of the same model

    other = tmp_path / "other.pt2"
    other.write_bytes(b"weight!")
    assert cache.cache_key(other, "onnx", 1) != key  # other bytes
    same = tmp_path / "same.pt2"
    same.write_bytes(b"weights")
    assert cache.cache_key(same, "onnx", 1) == key  # the bytes count, not the name

    real = versions.library_version
    monkeypatch.setattr(versions, "library_version", lambda name: "99.0" if name == "onnxruntime" else real(name))
    assert cache.cache_key(model, "onnx", 1) != key
    monkeypatch.setattr(versions, "library_version", real)

    engines = tmp_path / "engines"
    engines.mkdir()
    (engines / "onnx_engine.py").write_text("OPTIMIZE = True\n")
    before = cache.source_hash(tmp_path)
    (engines / "onnx_engine.py").write_text("OPTIMIZE = False\n")
    cache.source_hash.cache_clear()
    assert cache.source_hash(tmp_path) != before
    monkeypatch.setattr(cache, "source_hash", lambda: "an engine changed")
    assert cache.cache_key(model, "onnx", 1) != key


def test_the_source_is_the_engines_and_workloads():
    root = Path(cache.__file__).resolve().parents[1]
    assert (root / "engines").is_dir() and (root / "workloads").is_dir()
    assert all((root / entry).exists() for entry in cache.SOURCES)
