"""Whole runs on the embedded default, with real engines (torch, ONNX Runtime) on a tiny model."""

import json

import pytest

from ayci.bootstrap import embedded
from ayci.cli import main as cli_main
from ayci.settings import Settings
from core.results import stored_profile
from schemas import keys
from schemas.combos import Combo, Matrix
from schemas.documents import SummaryResult
from schemas.events import RequestSubmitted
from services.request.submission import new_run, store_model
from tests.conftest import SMALL_IMAGE_SIZE, TINY_IMAGE_SIZE, disturbed_away, skip_unless_required


def run(app, request):
    envelope = new_run(request)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    return json.loads(app.store.get_bytes(keys.summary(envelope.run_id))), envelope.run_id


@pytest.fixture
def app(tmp_path):
    return embedded(Settings(data_dir=tmp_path / "data", measure_time_cap_s=1.0, measure_min_iterations=5))


def request_for(app, model_path, optimizers, memory=(1769,), batches=(1,), input_size=TINY_IMAGE_SIZE, **extra):
    model = store_model(app.store, model_path, "image_classification", input_size)
    matrix = Matrix(optimizers={"intel": list(optimizers)}, batch_sizes=list(batches), memory_sizes_mb=list(memory))
    return RequestSubmitted(model=model, matrix=matrix, **extra)


def test_complete_run_then_reuse(app, tiny_image_model):
    summary, run_id = run(app, request_for(app, tiny_image_model, ["base", "onnx"], batches=(1, 2)))
    assert summary["status"] == "complete"
    assert len(summary["results"]) == 4 and not summary["failures"]
    for result in summary["results"]:
        assert result["agreement"]["score"] == 1.0
        assert result["agreement"]["max_abs_diff"] < 1e-3
        lat = result["latency_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
        cold = result["cold_start_ms"]
        assert cold["total"] >= cold["imports"] + cold["model_load"] + cold["first_inference"]
        assert result["peak_rss_mb"] > 20
        assert result["threads"] == 1 and result["vcpus"] == 1.0
        assert isinstance(result["confined"], bool) and (result["confined"] or result["confinement_reason"])
        assert result["load"]["host_cores"] >= 1 and "disturbed" in result["load"]
        cost = result["cost"]
        assert cost["price_region"] == "us-east-1" and cost["billed_ms_per_request"] >= 1
        assert cost["per_million_inferences_usd"] > 0.2 / result["combo"]["batch_size"]  # at least the request price
        assert cost["cold_start_usd"] > cost["per_request_usd"]
    rec = summary["recommendation"]
    labels = [Combo.model_validate(r["combo"]).label for r in summary["results"]]
    if all(disturbed_away(rec, label) for label in labels):  # a busy host disturbed every row: none is picked
        assert rec["fastest"] is None and not rec["candidates"]
    else:
        assert rec["fastest"] is not None and rec["cheapest"] is not None and rec["balanced"] is not None
        assert rec["pareto"] and set(rec["pareto"]) <= set(rec["candidates"])
    # every event of the run is in its log, in order, starting with the request
    log = app.store.list_keys(f"runs/{run_id}/events/")
    assert "RequestSubmitted" in log[0] and any("RunArchived" in k for k in log)

    again, _ = run(app, request_for(app, tiny_image_model, ["base", "onnx"], batches=(1, 2)))
    assert again["status"] == "complete"
    # nothing measured twice but what a busy host disturbed (never reused: core.results.untrusted_reason)
    disturbed = {label for label in labels if disturbed_away(rec, label)}
    assert all(r["reused"] or Combo.model_validate(r["combo"]).label in disturbed for r in again["results"])

    forced, _ = run(app, request_for(app, tiny_image_model, ["onnx"], force=True))
    assert not forced["results"][0]["reused"]


def test_partial_run_failed_combination_drops_only_itself(app, tiny_image_model):
    # Python with ONNX Runtime alone needs more than 128 MB: confined, the kernel kills that
    # measurement at its cap (unconfined, its peak says so); the other one is measured
    summary, _ = run(app, request_for(app, tiny_image_model, ["onnx"], memory=(128, 1769)))
    assert summary["status"] == "partial"
    assert [r["combo"]["memory_mb"] for r in summary["results"]] == [1769]
    (failure,) = summary["failures"]
    assert failure["combo"]["memory_mb"] == 128 and "out of memory at 128 MB" in failure["reason"]
    assert failure["stage"] == "inference"


def test_all_failed_run_is_still_archived(app, tiny_image_model):
    summary, run_id = run(app, request_for(app, tiny_image_model, ["onnx"], memory=(128,)))
    assert summary["status"] == "failed"
    assert summary["results"] == [] and len(summary["failures"]) == 1
    assert app.store.exists(f"runs/{run_id}/summary.json")


def test_crashing_handler_is_retried_then_dead_lettered(app, tiny_image_model):
    calls = []

    def crash(optimizer, job):
        calls.append(optimizer)
        raise RuntimeError("worker crashed")

    app.runners["converter"].service.deps.convert = crash
    summary, _ = run(app, request_for(app, tiny_image_model, ["onnx"]))
    assert len(calls) == 3  # delivered three times, then dead-lettered
    assert summary["status"] == "failed"
    assert summary["failures"][0]["stage"] == "dead_letter"
    assert "worker crashed" in summary["failures"][0]["reason"]


def test_duplicate_delivery_changes_nothing(app, tiny_image_model):
    request = request_for(app, tiny_image_model, ["onnx"])
    envelope = new_run(request)
    app.publisher.publish([envelope, envelope])
    app.bus.run_until_idle()
    summary = json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))
    assert summary["status"] == "complete" and len(summary["results"]) == 1


def test_cli_rejects_bad_input_before_any_work(tmp_path, capsys):
    not_a_model = tmp_path / "model.pt2"
    not_a_model.write_bytes(b"definitely not a model" * 10)
    data = tmp_path / "data"
    assert cli_main(["run", "--model", str(not_a_model), "--data-dir", str(data)]) == 2
    assert "not an accepted model" in capsys.readouterr().err
    assert not (data / "models").exists()
    assert cli_main(["run", "--matrix", "quantum=base", "--data-dir", str(data)]) == 2
    assert "optimizers" in capsys.readouterr().err
    assert cli_main(["run", "--memory", "64", "--data-dir", str(data)]) == 2
    assert "memory_sizes_mb" in capsys.readouterr().err
    assert cli_main(["run", "--matrix", "intel=", "--data-dir", str(data)]) == 2
    assert cli_main(["run", "--memory", "10241", "--data-dir", str(data)]) == 2
    assert "memory_sizes_mb" in capsys.readouterr().err
    assert cli_main(["run", "--memory", "1769.5", "--data-dir", str(data)]) == 2
    assert "--memory" in capsys.readouterr().err
    assert cli_main(["run", "--slo", "-5", "--data-dir", str(data)]) == 2
    assert "slo_p99_ms" in capsys.readouterr().err
    assert cli_main(["run", "--slo", "nan", "--data-dir", str(data)]) == 2
    assert "slo_p99_ms" in capsys.readouterr().err
    assert cli_main(["run", "--price-region", "mars-north-1", "--data-dir", str(data)]) == 2
    assert "price_region" in (message := capsys.readouterr().err) and "us-east-1" in message
    assert cli_main(["run", "--balance-weight", "1.5", "--data-dir", str(data)]) == 2
    assert "balance_weight" in capsys.readouterr().err
    assert not (data / "models").exists()


def test_replay_from_model_converted_is_a_new_linked_run(app, tiny_image_model):
    from services.request.replay import ReplayError, replay

    original, run_id = run(app, request_for(app, tiny_image_model, ["onnx"], batches=(1, 2)))
    assert original["status"] == "complete"
    # a busy host's disturbed measurement is never reused (core.results.untrusted_reason): measured again
    disturbed = {r["combo_key"] for r in original["results"] if (r.get("load") or {}).get("disturbed")}
    for force in (True, False):
        envelopes = replay(app.store, run_id, "ModelConverted", force=force)
        app.publisher.publish(envelopes)
        app.bus.run_until_idle()
        replayed = json.loads(app.store.get_bytes(keys.summary(envelopes[0].run_id)))
        assert envelopes[0].run_id != run_id
        assert replayed["status"] == "complete" and replayed["request"]["replay_of"] == run_id
        assert len(replayed["results"]) == 2
        if force:
            assert not any(r["reused"] for r in replayed["results"])
        else:  # the latest stored result of each, unless a busy host disturbed it
            assert all(r["reused"] or r["combo_key"] in disturbed for r in replayed["results"])
        disturbed |= {r["combo_key"] for r in replayed["results"] if (r.get("load") or {}).get("disturbed")}
    with pytest.raises(ReplayError, match="must be one of"):
        replay(app.store, run_id, "RunArchived")


def test_arm_combinations_run_as_aarch64_code_under_emulation(app, tiny_image_model):
    """On this x86 machine an arm combination is measured in the aarch64 Python under qemu:
    its agreement is checked for real; its timings are marked emulated, never costed."""
    from engines.arm_emulation import arm_available

    available, reason = arm_available()
    if not available:
        skip_unless_required("AYCI_REQUIRE_ARM", f"arm emulation unavailable: {reason}")
    model = store_model(app.store, tiny_image_model, "image_classification", TINY_IMAGE_SIZE)
    matrix = Matrix(optimizers={"arm": ["onnx"], "intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    summary, _ = run(app, RequestSubmitted(model=model, matrix=matrix))
    assert summary["status"] == "complete", summary["failures"]
    by_hw = {r["combo"]["hardware"]: r for r in summary["results"]}
    assert by_hw["arm"]["emulated"] is True and by_hw["intel"]["emulated"] is False
    assert by_hw["arm"]["agreement"]["score"] == 1.0 and by_hw["arm"]["agreement"]["max_abs_diff"] < 1e-4
    assert by_hw["arm"]["cost"] is None
    if not disturbed_away(summary["recommendation"], "intel/onnx/b1/1769MB"):
        assert summary["recommendation"]["fastest"] == "intel/onnx/b1/1769MB"
    assert "emulation" in summary["recommendation"]["excluded"]["arm/onnx/b1/1769MB"]


@pytest.mark.parametrize(
    "workload, input_size, expected",
    [
        ("image_classification", [7, 9], "pixels has a fixed size 32 on axis 2"),
        ("nlp", [16], "pixels has 4 dims"),
    ],
)
def test_inputs_the_model_does_not_accept_fail_that_combination_at_plan(
    app, tiny_image_model, workload, input_size, expected
):
    """An input size the model does not accept, or a workload that does not match its inputs:
    the plan refuses the combination from the model's signature, before any worker runs it."""
    model = store_model(app.store, tiny_image_model, workload, input_size)
    matrix = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    summary, run_id = run(app, RequestSubmitted(model=model, matrix=matrix))
    assert summary["status"] == "failed"
    (failure,) = summary["failures"]
    assert failure["stage"] == "plan" and expected in failure["reason"]
    assert app.store.list_keys("artifacts/") == []
    assert app.bus.dead_letters == []


def test_base_at_a_batch_size_it_has_not_run_yet_measures(app, tiny_image_model):
    """The stored base artifact serves every batch, but the base outputs of a new batch must
    still be computed: a second run at batch 2 measures instead of dead-lettering."""
    first, _ = run(app, request_for(app, tiny_image_model, ["base"], batches=(1,)))  # stores the artifact
    assert first["status"] == "complete"
    second, _ = run(app, request_for(app, tiny_image_model, ["base"], batches=(2,)))
    assert second["status"] == "complete", second["failures"]
    assert [r["combo"]["batch_size"] for r in second["results"]] == [2] and second["results"][0]["agreement"][
        "score"
    ] == 1.0


def test_cold_starts_import_only_the_engine_s_runtime_and_results_say_where_they_ran(finished_base_onnx_tvm, tmp_path):
    """At the model-load mark the measuring process has imported only what the artifact needs:
    no pydantic anywhere, no torch for an ONNX or TVM artifact (base on an ONNX model is ONNX
    Runtime alone)."""
    from tests.fakes import tiny_onnx_model

    app, _, summary, _ = finished_base_onnx_tvm  # base, onnx and tvm (untuned) at b1, 1769 MB
    assert summary["status"] == "complete", summary["failures"]
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_onnx_model())
    model = store_model(app.store, onnx_file, "image_classification", [8, 8])
    onnx_summary, _ = run(
        app,
        RequestSubmitted(
            model=model, matrix=Matrix(optimizers={"intel": ["base"]}, batch_sizes=[1], memory_sizes_mb=[1769])
        ),
    )
    loaded = {
        r["combo"]["optimizer"] + ("-on-onnx" if r["model"]["format"] == "onnx" else ""): set(
            r["cold_start_ms"]["loaded_at_model_load"]
        )
        for r in summary["results"] + onnx_summary["results"]
    }
    assert loaded["base"] >= {"torch"} and "pydantic" not in loaded["base"]
    assert "onnxruntime" in loaded["onnx"] and not loaded["onnx"] & {"torch", "pydantic", "tvm"}
    assert "tvm" in loaded["tvm"] and not loaded["tvm"] & {"torch", "pydantic", "onnxruntime"}
    assert "onnxruntime" in loaded["base-on-onnx"] and not loaded["base-on-onnx"] & {"torch", "pydantic"}
    for result in summary["results"] + onnx_summary["results"]:
        assert result["cold_start_ms"]["artifact_bytes"] > 0
        env = result["environment"]
        assert env["cpu_model"] and env["host_cores"] >= 1 and env["kernel"] and env["cgroup"] in ("v1", "v2", "none")
        assert env["python"].startswith("3.") and env["libraries"]["onnxruntime"] and env["ayci_version"]
        assert result["host_limited"] is False and result["vcpus_available"] >= 1
        assert result["latency_ms"]["p99_samples"] == result["latency_ms"]["iterations"]


def test_predict_measures_three_sizes_and_predicts_the_others(app, small_image_model):
    """--predict with real engines: the anchors are measured, the other sizes predicted with an
    interval and shown as predicted in the table, the CSV and the recommendation's checks."""
    from report import results_csv, summary_rows

    request = request_for(
        app,
        small_image_model,
        ["onnx"],
        memory=(512, 1024, 1769, 2048, 3538),
        predict=True,
        input_size=SMALL_IMAGE_SIZE,
    )
    summary, run_id = run(app, request)
    assert summary["status"] == "complete", summary["failures"]
    checks = summary["recommendation"]["checks"]
    checked = {c["combination"] for c in checks}
    measured = {r["combo"]["memory_mb"] for r in summary["results"] if not r.get("predicted")}
    predicted = {r["combo"]["memory_mb"]: r for r in summary["results"] if r.get("predicted")}
    assert measured - {int(label.split("/")[-1][:-2]) for label in checked} == {512, 1769, 3538}
    assert set(predicted) | measured == {512, 1024, 1769, 2048, 3538}
    one_vcpu = next(r for r in summary["results"] if r["combo"]["memory_mb"] == 1769)
    if 2048 in predicted:  # one thread, never throttled: as at 1 vCPU
        assert predicted[2048]["latency_ms"]["p50"] == one_vcpu["latency_ms"]["p50"]
    for row in predicted.values():
        assert row["interval"]["p50"][0] < row["latency_ms"]["p50"] < row["interval"]["p50"][1]
        assert row["agreement"]["score"] == 1.0 and row["cost"]["per_million_inferences_usd"] > 0
    rows = {r.combination: r for r in summary_rows(summary)}
    assert all(
        rows[f"intel/onnx/b1/{m}MB"].status == "predicted" and rows[f"intel/onnx/b1/{m}MB"].interval.startswith("p50 ")
        for m in predicted
    )
    assert "predicted" in results_csv(summary)
    for check in checks:
        assert check["measured"] and check["verdict"]


def test_onnx_runtime_sessions_are_tuned_per_combination(tmp_path, tiny_image_model):
    """The onnx measurement first tries ONNX Runtime's session settings under the combination's
    confinement (graph optimizations off among them: never slower than doing nothing) and
    keeps the default unless another that agrees is faster by the margin twice; the result names
    the settings and what was tried."""
    from measuring.confinement import unavailable_reason

    if unavailable_reason() is not None:
        skip_unless_required(
            "AYCI_REQUIRE_CGROUPS", f"tuning runs only where measurements are confined: {unavailable_reason()}"
        )
    app = embedded(Settings(data_dir=tmp_path / "data", measure_time_cap_s=4.0, measure_min_iterations=5))
    summary, _ = run(app, request_for(app, tiny_image_model, ["onnx"], memory=(3538,)))
    (result,) = summary["results"]
    tried = result["engine_tuning"]["tried"]
    timed = [t for t in tried if "p50_ms" in t]
    assert tried[0]["settings"]["graph_optimization"] == "all"  # the default first
    assert {t["settings"]["graph_optimization"] for t in timed} >= {"all", "disabled"}
    assert all(t["settings"]["intra_op_threads"] <= result["threads"] for t in tried)
    fastest = min(range(len(timed)), key=lambda i: timed[i]["p50_ms"])
    confirmation = result["engine_tuning"].get("confirmation")
    assert (confirmation is not None) == (fastest > 0 and timed[fastest]["p50_ms"] < timed[0]["p50_ms"] * 0.95)
    # the default, unless the fastest beat it by the margin again when both were timed once more
    assert result["engine_settings"] == timed[fastest if confirmation and confirmation["confirmed"] else 0]["settings"]
    assert all(t["agreement"] == 1.0 for t in timed)


def test_cli_predict_and_memory_ranges_are_checked_before_any_work(tmp_path, capsys):
    data = tmp_path / "data"
    assert cli_main(["run", "--memory", "3538-512", "--data-dir", str(data)]) == 2
    assert "--memory: the range 3538-512 runs backwards" in capsys.readouterr().err
    assert cli_main(["run", "--memory", "1024,1769", "--predict", "--data-dir", str(data)]) == 2
    assert "predict measures up to 3 memory sizes" in capsys.readouterr().err
    assert not (data / "models").exists()


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory, tiny_image_model) -> tuple:
    """A finished run that asked for profiles: base and onnx at 128 MB (out of memory) and
    1769 MB (measured, then profiled). Read by the profile test and, for its two measured
    combinations, by the cold-start levers' (which once ran base and onnx at 1769 MB of its own).
    (app, data folder, summary, run id)."""
    data = tmp_path_factory.mktemp("profiled") / "data"
    app = embedded(Settings(data_dir=data, measure_time_cap_s=1.0, measure_min_iterations=5))
    summary, run_id = run(app, request_for(app, tiny_image_model, ["base", "onnx"], memory=(128, 1769), profile=True))
    return app, data, summary, run_id


def test_cold_start_levers_of_a_finished_run(profiled_run, capsys):
    """`ayci coldstart`: each lever a confined cold start of its own, beside the default, with
    the same answers (agreement 1.0): ONNX pre-optimized, the ORT format, the arena off, and
    base compiled with AOTInductor (offline, the system compiler)."""
    _, data, _, run_id = profiled_run
    assert cli_main(["coldstart", run_id, "--repeat", "1", "--json", "--data-dir", str(data)]) == 0
    report = json.loads(capsys.readouterr().out)
    onnx, base = report["intel/onnx/b1/1769MB"], report["intel/base/b1/1769MB"]
    assert [r["variant"] for r in onnx] == [
        "default: optimized at load",
        "pre-optimized for this CPU",
        "ORT format, pre-optimized",
        "memory arena off",
    ]
    assert [r["variant"] for r in base] == ["default: torch.export.load", "AOTInductor package"]
    for row in onnx + base:
        assert "failed" not in row, row
        assert row["agreement"] == 1.0 and row["cold_start_ms"]["total"] > row["cold_start_ms"]["model_load"] > 0
        assert "cold_start_saved_ms" in row and row["peak_mb"] > 0
    assert onnx[0]["cold_start_saved_ms"] == 0 and base[1]["prepare_s"] > 0
    assert cli_main(["coldstart", "00000000-0000-0000-0000-000000000000", "--data-dir", str(data)]) == 2


def test_profile_of_a_finished_run_side_by_side(profiled_run, tmp_path, capsys):
    """`ayci profile`: base (torch.profiler) and onnx (ONNX Runtime's profiler), each a confined
    pass of its own: a Chrome trace stored next to the result, named by the profile, an operator
    table, the optimizers side by side; a failed or unknown combination is an error saying why."""
    app, data, summary, run_id = profiled_run
    # the request asked: each measured combination was profiled after its measurement
    profiles = {
        r["combo"]["optimizer"]: stored_profile(app.store, SummaryResult.of(r)).to_dict() for r in summary["results"]
    }
    assert set(profiles) == {"base", "onnx"}
    assert all(
        r["profile_key"] == keys.profile(r["combo_key"], run_id) for r in summary["results"]
    )  # each result names its profile
    for optimizer, profile in profiles.items():
        trace = json.loads(app.store.get_bytes(profile["trace_key"]))
        assert profile["trace_key"] == keys.profile_trace(profile["combo_key"], run_id)
        assert trace["traceEvents"] and profile["trace_note"] is None
        heaviest = profile["operators"][0]
        assert heaviest["group"] == "conv", (optimizer, heaviest)  # ResNet's time is in its convolutions
        assert sum(op["share"] for op in profile["operators"]) == pytest.approx(1.0)
        assert profile["unprofiled_p50_ms"] > 0 and profile["profiled_p50_ms"] > 0
    assert profiles["onnx"]["operators"][0]["op_type"] == "Conv" and any(
        op["calls"] == 1 for op in profiles["onnx"]["operators"]
    )
    assert (
        cli_main(
            [
                "profile",
                run_id,
                "--combination",
                profiles["onnx"]["combo_key"],
                "--runs",
                "3",
                "--json",
                "--data-dir",
                str(data),
            ]
        )
        == 0
    )
    again = json.loads(capsys.readouterr().out)
    assert again["profiles"][0]["runs"] == 3 and again["profiles"][0]["operators"][0]["op_type"] == "Conv"
    table = side_by_side_of(app.store, summary)
    assert table["title"] == "intel/b1/1769MB" and table["rows"][0]["group"] == "conv"
    assert set(table["rows"][0]["optimizers"]) == {"base", "onnx"}
    # a trace past its bound is cut, and the profile says so
    from services.inference.profiling import profile_result

    cut = profile_result(
        app.store, next(r for r in summary["results"] if r["combo"]["optimizer"] == "base"), runs=2, trace_max_events=50
    )
    assert len(json.loads(app.store.get_bytes(cut.trace_key))["traceEvents"]) == 50 and cut.trace_note.startswith(
        "truncated: the first 50 of"
    )
    # where outputs would first diverge, on the real exported graph (every node output exposed): nowhere
    import engines.onnx_engine
    from measuring.measure import read_reference, where_outputs_diverge
    from services.inference.profiling import fetch_measured

    onnx_result = next(r for r in summary["results"] if r["combo"]["optimizer"] == "onnx")
    artifact, reference = fetch_measured(app.store, onnx_result, tmp_path)
    divergence = where_outputs_diverge(
        engines.onnx_engine, artifact, read_reference(str(reference))[0], 1, onnx_result.get("engine_settings")
    )
    assert divergence["node"] is None and "export itself" in divergence["detail"], divergence
    failed = summary["failures"][0]["combo_key"]  # out of memory at 128 MB
    assert cli_main(["profile", run_id, "--combination", failed, "--data-dir", str(data)]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "out of memory" in said and "nothing to profile" in said
    assert cli_main(["profile", run_id, "--combination", "nope", "--data-dir", str(data)]) == 2


def side_by_side_of(store, summary) -> dict:
    from report.profiles import profile_tables

    (table,) = profile_tables([stored_profile(store, SummaryResult.of(r)).to_dict() for r in summary["results"]])
    return table


def test_onnx_int8_is_quantized_measured_with_its_agreement_and_never_recommended_below_the_minimum(
    app, tiny_image_model, tmp_path
):
    """`onnx_int8`: the model statically quantized at conversion (a smaller artifact whose
    outputs differ from base's), measured like `onnx`; below the run's minimum agreement it
    is listed with the reason and never recommended, where float ONNX Runtime still is."""
    summary, _ = run(app, request_for(app, tiny_image_model, ["onnx", "onnx_int8"]))
    assert summary["status"] == "complete", summary["failures"]
    by = {r["combo"]["optimizer"]: r for r in summary["results"]}
    int8, float32 = by["onnx_int8"], by["onnx"]
    # int8 weights: all of them with static QDQ, the MatMul/Gemm ones with a dynamic recipe (random weights at
    # 32x32 leave ResNet's top-1 fragile: the recipe that agrees most may be a dynamic one); every recipe is said
    conversion = int8["conversion"]
    assert int8["cold_start_ms"]["artifact_bytes"] < float32["cold_start_ms"]["artifact_bytes"] / (
        2 if conversion["recipe"] == "static_qdq" else 1
    )
    assert {r["recipe"] for r in conversion["recipes"]} >= {"static_qdq", "dynamic_per_channel"}
    assert int8["agreement"]["samples"] == 32 and int8["agreement"]["inputs"] == "synthetic"
    assert int8["agreement"]["max_abs_diff"] > 100 * max(
        float32["agreement"]["max_abs_diff"], 1e-7
    )  # quantization changed the outputs
    assert int8["latency_ms"]["p50"] > 0 and "engine_settings" in int8
    # the text encoder's outputs: float agrees to ~1e-12 in cosine, int8 to ~1e-3 to 1e-5 (by recipe): at a
    # minimum no recipe reaches, the one that agrees most is kept and the row is never recommended
    from workloads.examples import export_example

    encoder = export_example("nlp", [16], tmp_path / "encoder.pt2")
    model = store_model(app.store, encoder, "nlp", [16])
    matrix = Matrix(optimizers={"intel": ["onnx", "onnx_int8"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    summary, _ = run(app, RequestSubmitted(model=model, matrix=matrix, min_agreement=0.9999999))
    assert summary["status"] == "complete", summary["failures"]
    by = {r["combo"]["optimizer"]: r for r in summary["results"]}
    assert by["onnx"]["agreement"]["score"] >= 0.9999999 > by["onnx_int8"]["agreement"]["score"] > 0.9
    conversion = by["onnx_int8"]["conversion"]  # the run's minimum reached the recipe choice
    assert conversion["min_agreement"] == 0.9999999 and conversion["meets_minimum"] is False
    rec = summary["recommendation"]
    picked = None if disturbed_away(rec, "intel/onnx/b1/1769MB") else "intel/onnx/b1/1769MB"  # a busy host: none
    assert {rec[kind] for kind in ("fastest", "cheapest", "balanced")} == {picked}
    if not disturbed_away(rec, "intel/onnx_int8/b1/1769MB"):  # the first reason given is the one shown
        assert "below the threshold 0.9999999" in rec["excluded"]["intel/onnx_int8/b1/1769MB"]
