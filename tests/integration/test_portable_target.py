"""Portable by default (#32): an `intel` TVM artifact is compiled for x86-64-v3 (AVX2, FMA; what
every current Lambda x86_64 host runs), not for the build host's CPU; the host's exact CPU only
when asked (`intel_cpu="host"`). The compiled model.so is disassembled: no AVX-512 instruction
in the portable build; on an AVX-512 host, the host build has them (so the check can fail)."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engines import ConversionJob
from engines.targets import host_cpu_name, is_portable, target_cpu
from engines.tvm.target import DEFAULT_ARM_CPU, HOST_CPU, PORTABLE_INTEL_CPU, target_spec
from schemas.combos import Combo, ModelRef, Tuning, artifact_key
from tests.conftest import import_or_skip_unless_required
from workloads import workload_module

# AVX-512 in AT&T syntax: 512-bit registers, opmask registers, the 16 upper vector registers
# (EVEX only), or an instruction whose first byte (after address-size/segment prefixes) is the
# EVEX prefix 0x62 (in 64-bit mode it is nothing else)
AVX512_OPERAND = re.compile(r"%zmm\d+|%k[0-7]\b|%[xy]mm(?:1[6-9]|2\d|3[01])\b")
SKIPPED_PREFIXES = {"67", "2e", "3e", "26", "64", "65", "36"}


def avx512_instructions(library: Path) -> list[str]:
    """The instructions of `library` that only an AVX-512 CPU runs."""
    listing = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    found = []
    for line in listing.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[2].strip():
            continue  # a label, or the rest of a long instruction's bytes
        code = [b for b in parts[1].split() if b]
        while code and code[0] in SKIPPED_PREFIXES:
            code = code[1:]
        if AVX512_OPERAND.search(parts[2]) or (code and code[0] == "62"):
            found.append(parts[2].strip())
    return found


def avx2_instructions(library: Path) -> int:
    listing = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return len(re.findall(r"%ymm\d+", listing))


def host_has_avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> tuple[Path, ModelRef]:
    import_or_skip_unless_required("tvm", "AYCI_REQUIRE_TVM")
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.head = torch.nn.Linear(16, 10)

        def forward(self, pixels):
            return self.head(torch.nn.functional.gelu(self.conv(pixels)).mean((2, 3)))

    size = [32, 32]
    inputs = {
        k: torch.from_numpy(v) for k, v in workload_module("image_classification").example_inputs(1, size).items()
    }
    path = tmp_path_factory.mktemp("portable") / "tiny.pt2"
    torch.export.save(torch.export.export(Tiny().eval(), (), inputs), str(path))
    model = ModelRef(
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        size_bytes=path.stat().st_size,
        format="pt2",
        workload="image_classification",
        input_size=size,
    )
    return path, model


def convert(path: Path, model: ModelRef, cpu: str, out: Path) -> Path:
    from engines import tvm as tvm_engine

    out.mkdir(parents=True, exist_ok=True)
    conversion = tvm_engine.convert(
        ConversionJob(
            model=model,
            model_path=path,
            hardware="intel",
            batch_size=1,
            target_cpu=cpu,
            out_dir=out,
            tuning_trials=0,
            tuning_dir=None,
            tuning_time_limit_s=None,
            progress=lambda message: None,
        )
    )
    return out / conversion.artifact_file, conversion.details


def test_the_default_targets_are_portable_and_the_host_only_when_asked():
    assert target_cpu("intel", "tvm") == PORTABLE_INTEL_CPU == "x86-64-v3"
    assert target_cpu("arm", "tvm") == DEFAULT_ARM_CPU == "neoverse-n1"
    assert target_cpu("intel", "onnx") == "x86_64" and target_cpu("intel", "tvm", intel_cpu="skylake") == "skylake"
    assert target_spec("intel", None)["mcpu"] == PORTABLE_INTEL_CPU
    assert is_portable("intel", "x86-64-v3") and is_portable("arm", "neoverse-n1")
    host = target_cpu("intel", "tvm", intel_cpu=HOST_CPU)
    assert host == host_cpu_name() and host != HOST_CPU
    if host != PORTABLE_INTEL_CPU:
        assert not is_portable("intel", host)
    # the target is in the artifact key: a host build is never served as the portable one
    model = ModelRef(sha256="a" * 64, size_bytes=1, format="onnx", workload="nlp", input_size=[8])
    combo = Combo(hardware="intel", optimizer="tvm", batch_size=1, memory_mb=1769)
    tuning = Tuning(trials=0)
    assert artifact_key(model, combo, PORTABLE_INTEL_CPU, tuning) != artifact_key(model, combo, "znver4", tuning)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="binutils' objdump is needed to disassemble")
def test_a_portable_intel_artifact_has_no_avx512_and_a_host_one_does_on_an_avx512_host(tiny_model, tmp_path):
    path, model = tiny_model
    portable, details = convert(path, model, target_cpu("intel", "tvm"), tmp_path / "portable")
    assert details["target"]["mcpu"] == "x86-64-v3"
    assert avx512_instructions(portable) == []
    assert avx2_instructions(portable) > 0  # vectorized for AVX2: the level is v3, not v2
    if not host_has_avx512():
        pytest.skip("this host has no AVX-512: a host build cannot show the check failing")
    host, details = convert(path, model, target_cpu("intel", "tvm", intel_cpu=HOST_CPU), tmp_path / "host")
    assert details["target"]["mcpu"] == host_cpu_name()
    assert len(avx512_instructions(host)) > 10


def test_the_cli_asks_for_the_host_cpu_with_target_cpu_host(monkeypatch):
    import argparse

    from ayci.cli.common import settings_of
    from ayci.cli.options import executing

    monkeypatch.delenv("AYCI_INTEL_CPU", raising=False)
    parser = argparse.ArgumentParser(parents=[executing()])
    assert settings_of(parser.parse_args([])).target_cpu("intel", "tvm") == PORTABLE_INTEL_CPU
    monkeypatch.setenv("AYCI_INTEL_CPU", "")  # restored after the test: settings_of sets it for the run's processes
    settings = settings_of(parser.parse_args(["--target-cpu", "host"]))
    assert settings.target_cpu("intel", "tvm") == host_cpu_name() and settings.target_cpu("intel", "onnx") == "x86_64"
