"""A small subset of the zoo (bench/bench_zoo.py runs all of it): real architectures from
transformers with random weights, exported as people export them, through AYCI end to end."""

import json

import pytest

from ayci.bootstrap import embedded
from ayci.settings import Settings
from bench.zoo_models import export, zoo
from schemas import keys
from schemas.combos import Matrix
from schemas.events import RequestSubmitted
from services.request.submission import new_run, store_model


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return embedded(
        Settings(data_dir=tmp_path_factory.mktemp("zoo") / "data", measure_time_cap_s=1.0, measure_min_iterations=5)
    )


def run(app, path, model, batches):
    ref = store_model(app.store, path, model.workload, model.input_size)
    envelope = new_run(
        RequestSubmitted(
            model=ref,
            matrix=Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=batches, memory_sizes_mb=[3538]),
        )
    )
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    return json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))


@pytest.mark.parametrize(
    ("name", "recipe"), [("bert", "pt2-positional-dynamic"), ("mobilenet-v2", "onnx-external-static")]
)
def test_a_real_architecture_as_exported(app, tmp_path, name, recipe):
    model = next(m for m in zoo() if m.name == name)
    summary = run(app, export(model, recipe, tmp_path), model, [1, 2])
    measured = {(r["combo"]["optimizer"], r["combo"]["batch_size"]) for r in summary["results"]}
    if "dynamic" in recipe:
        assert measured == {("base", 1), ("base", 2), ("onnx", 1), ("onnx", 2)}, summary["failures"]
    else:  # a static export of one sample: batch 2 is impossible, said by the plan
        assert measured == {("base", 1), ("onnx", 1)}, summary["failures"]
        assert {f["stage"] for f in summary["failures"]} == {"plan"}
        assert all("fixed batch of 1: batch 2 cannot run" in f["reason"] for f in summary["failures"])
    assert all(r["agreement"]["score"] > 0.99 for r in summary["results"])
