"""The arm runtime path under qemu: aarch64 artifacts (onnx, cross-compiled tvm) loaded by the
engines' own `load` in an emulated aarch64 Python agree with x86 base.

Skipped when the emulation root is missing (scripts/arm-sysroot.sh builds it), unless
AYCI_REQUIRE_ARM=1, where a missing root is a failure (CI sets it after building the root)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from engines.arm_emulation import arm_available
from tests.conftest import skip_unless_required

pytestmark = pytest.mark.arm

ROOT = Path(__file__).resolve().parents[2]


def _check_arm_module():
    spec = importlib.util.spec_from_file_location("check_arm", ROOT / "scripts" / "check_arm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _require_emulation() -> None:
    ok, reason = arm_available()
    if not ok:
        skip_unless_required("AYCI_REQUIRE_ARM", f"arm emulation unavailable: {reason}")


def test_arm_artifacts_agree_with_x86_base_under_emulation(tmp_path):
    _require_emulation()
    summary = _check_arm_module().check_arm(tmp_path, [32, 32], trials=0)
    assert summary["tvm_elf_machine"] == 183
    assert set(summary["engines"]) == {"onnx", "tvm"}
    for name, result in summary["engines"].items():
        assert result["ok"], (name, result)
    assert summary["emulated"]["torch_imported"] is False  # the runtime path stays torch-free
    assert summary["ok"]
