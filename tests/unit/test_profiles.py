"""Where the time goes: operator tables, groups, bounded traces, the side-by-side table, which
combinations can be profiled and why not, tuning's break-even, and the first node of an ONNX
graph whose output diverges (real ONNX Runtime on two tiny graphs)."""

from __future__ import annotations

import numpy as np
import pytest

from core.profiles import bounded_trace, break_even, operator_group, operator_rows, side_by_side
from report.profiles import NotProfilable, chosen_results, profile_tables
from report.recommendation import exclusion, with_break_even
from tests.conftest import archived_summary, measured_result


@pytest.mark.parametrize(
    ("op_type", "group"),
    [
        ("aten::_slow_conv2d_forward", "conv"),
        ("Conv", "conv"),
        ("conv2d_add_relu", "conv"),
        ("aten::addmm", "matmul"),
        ("MatMul", "matmul"),
        ("Gemm", "matmul"),
        ("aten::_scaled_dot_product_flash_attention", "attention"),
        ("Softmax", "attention"),
        ("Transpose", "layout"),
        ("aten::view", "layout"),
        ("ReorderOutput", "layout"),
        ("vm.builtin.alloc_tensor", "copy"),
        ("aten::copy_", "copy"),
        ("Relu", "elementwise"),
        ("aten::clamp_min_", "elementwise"),
        ("vm.builtin.null_value", "other"),
    ],
)
def test_operators_are_grouped_by_type_across_engines(op_type, group):
    assert operator_group(op_type) == group


def test_operator_rows_sum_calls_per_inference_heaviest_first():
    calls = [("c1", "Conv", 3.0), ("c1", "Conv", 5.0), ("m", "MatMul", 1.0), ("m", "MatMul", 1.0)]
    rows = operator_rows(calls, runs=2)
    assert [(r["op_type"], r["name"]) for r in rows] == [("Conv", "c1"), ("MatMul", "m")]
    conv = rows[0]
    assert (
        conv["calls"] == 1
        and conv["total_ms"] == 4.0
        and conv["mean_ms"] == 4.0
        and conv["share"] == pytest.approx(0.8)
    )
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)


def test_side_by_side_lines_up_groups_of_each_optimizer():
    table = side_by_side(
        {
            "base": operator_rows([("aten::conv2d", "aten::conv2d", 6.0), ("aten::addmm", "aten::addmm", 2.0)], 1),
            "onnx": operator_rows([("c", "Conv", 1.0)], 1),
        }
    )
    assert [row["group"] for row in table] == ["conv", "matmul"]  # groups nobody spends time in are left out
    conv = table[0]["optimizers"]
    assert conv["base"]["total_ms"] == 6.0 and conv["base"]["share"] == 0.75 and conv["onnx"]["top"] == "Conv"
    assert table[1]["optimizers"]["onnx"]["total_ms"] == 0.0


def test_a_trace_is_cut_to_its_bound_with_a_note():
    trace = {"traceEvents": [{"name": str(i)} for i in range(10)]}
    kept, note = bounded_trace(trace, max_events=4)
    assert len(kept["traceEvents"]) == 4 and "4 of 10" in note and kept["otherData"]["ayci_note"] == note
    assert bounded_trace(trace, max_events=10) == (trace, None)
    by_size, note = bounded_trace({"traceEvents": [{"name": "x" * 100}] * 10}, max_bytes=350)  # ~115 bytes an event
    assert len(by_size["traceEvents"]) == 3 and "3 of 10" in note


def test_only_measured_combinations_are_profiled_and_the_refusal_says_why():
    onnx = measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=0.4)
    emulated = {**measured_result("arm/onnx/b1/1769MB", p99=9.0, cost=0.4), "emulated": True}
    summary = archived_summary(
        "r1",
        "partial",
        [onnx, emulated],
        [{"label": "intel/tvm/b1/1769MB", "stage": "converter", "reason": "TVM could not build"}],
    )
    for chosen in (chosen_results(summary, None), chosen_results(summary, onnx["combo_key"])):
        assert [r.model_dump(mode="json", exclude_unset=True) for r in chosen] == [onnx]
        assert chosen[0].label == "intel/onnx/b1/1769MB" and chosen[0].combo_key == onnx["combo_key"]
    for key, words in (
        (emulated["combo_key"], "emulation"),
        ("k0", "TVM could not build"),
        ("nope", "no combination nope"),
    ):
        with pytest.raises(NotProfilable, match=words):
            chosen_results(summary, key)


def test_profile_tables_group_by_hardware_batch_and_memory():
    def profile(label, optimizer, ms):
        return {
            "label": label,
            "optimizer": optimizer,
            "combo_key": f"k-{label}",
            "run_id": "r",
            "unprofiled_p50_ms": ms,
            "profiled_p50_ms": ms * 1.1,
            "operators": operator_rows([("x", "Conv", ms)], 1),
        }

    tables = profile_tables(
        [
            profile("intel/onnx/b1/1769MB", "onnx", 1.0),
            profile("intel/base/b1/1769MB", "base", 4.0),
            profile("intel/onnx/b1/3538MB", "onnx", 0.6),
        ],
        trace_url=lambda p: f"t/{p['combo_key']}",
    )
    assert [t["title"] for t in tables] == ["intel/b1/1769MB", "intel/b1/3538MB"]
    assert [o["optimizer"] for o in tables[0]["optimizers"]] == ["base", "onnx"]
    assert tables[0]["optimizers"][1]["trace"] == "t/k-intel/onnx/b1/1769MB"


def test_break_even_and_never():
    paid = break_even(
        tuning_s=60, tuning_usd=0.003, tuned_ms=2.0, untuned_ms=3.0, saved_usd_per_inference=1e-8, untuned="onnx"
    )
    assert paid["inferences"] == 300_000
    assert (
        break_even(
            tuning_s=60, tuning_usd=0.003, tuned_ms=3.0, untuned_ms=2.0, saved_usd_per_inference=-1e-8, untuned="onnx"
        )["inferences"]
        is None
    )


def test_tvm_results_carry_break_even_against_the_fastest_untuned_engine():
    tvm = {**measured_result("intel/tvm/b1/1769MB", p99=4.0, cost=0.3), "tuning_s": 120.0}
    onnx, base = (
        measured_result("intel/onnx/b1/1769MB", p99=6.0, cost=0.4),
        measured_result("intel/base/b1/1769MB", p99=20.0, cost=1.5),
    )
    slow_tvm = {**measured_result("intel/tvm/b1/3538MB", p99=8.0, cost=0.9), "tuning_s": 120.0}
    onnx_big = measured_result("intel/onnx/b1/3538MB", p99=3.0, cost=0.9)
    by_label = {r.combo_key: r for r in with_break_even([tvm, onnx, base, slow_tvm, onnx_big], "us-east-1")}
    payoff = by_label[tvm["combo_key"]].break_even
    assert payoff.against == "intel/onnx/b1/1769MB" and payoff.saved_ms_per_inference == pytest.approx(1.0)
    # 120 s of a 3,008 MB x86 build against 1 ms of a 1,769 MB function per inference
    assert payoff.inferences == pytest.approx(120 * 3008 / 1769 * 1000, rel=1e-3)
    assert by_label[slow_tvm["combo_key"]].break_even.inferences is None
    assert by_label[onnx["combo_key"]].break_even is None
    assert "break_even" not in by_label[onnx["combo_key"]].model_dump(exclude_unset=True)


def _chain(scale: float):
    """x -> Add(1) -> Mul(scale) -> Relu -> y: node names add, mul, relu."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "one"], ["a"], name="add"),
            helper.make_node("Mul", ["a", "scale"], ["m"], name="mul"),
            helper.make_node("Relu", ["m"], ["y"], name="relu"),
        ],
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[
            helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]),
            helper.make_tensor("scale", TensorProto.FLOAT, [1], [scale]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_first_onnx_node_whose_output_diverges_is_named(tmp_path):
    import onnx

    from engines.onnx_engine import first_divergent_node

    onnx.save(_chain(2.0), str(tmp_path / "reference.onnx"))
    onnx.save(_chain(2.5), str(tmp_path / "candidate.onnx"))
    inputs = {"x": np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)}
    found = first_divergent_node(tmp_path / "candidate.onnx", tmp_path / "reference.onnx", inputs, 1, tmp_path)
    assert (found["node"], found["op_type"]) == (
        "mul",
        "Mul",
    )  # add agrees; mul is the first to differ, relu follows it
    assert found["max_abs_diff"] == pytest.approx(2.0)  # (3 + 1) * 0.5
    assert first_divergent_node(tmp_path / "reference.onnx", tmp_path / "reference.onnx", inputs, 1, tmp_path) is None


def test_low_agreement_is_explained_by_where_outputs_diverge():
    result = {
        **measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=0.4, agreement=0.5),
        "divergence": {"node": "mul", "op_type": "Mul", "max_abs_diff": 2.0},
    }
    assert exclusion(result, slo_p99_ms=None, min_agreement=0.99).endswith(
        "first diverges at node mul (Mul): max abs diff 2"
    )
