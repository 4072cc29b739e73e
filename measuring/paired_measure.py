"""Two artifacts timed side by side in one confined process: `python -m measuring.paired_measure SPEC.json`
(the gate's paired confirmation, `ayci/paired.py`), and `measure_pair`, which starts it.

Both artifacts are loaded, each checked to run on its reference inputs and warmed up; then
`rounds` rounds, each alternating short blocks of A's inferences and B's (about
`BLOCK_S` each, A first in even rounds, B first in odd ones) until each side has
`side_time_s` of timing. A round's figures per side (p50, p99, mean billed time) come from its
own samples, so each round pairs A and B measured in the same moments: the machine's load,
which drifts over seconds, weighs on both alike. The process has the combination's CPU share
(its memory size's vCPUs, as a measurement) and room for both models (twice the memory).
Prints one JSON object after `RESULT_MARKER`."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

RESULT_MARKER = "@@RESULT@@"  # as `measuring/launcher.py` reads a measuring process's report
BLOCK_S = 0.05  # one block of a side's inferences: short, so the two sides interleave finely
WARMUP_S = 0.5


def _figures(samples: list[float]) -> dict[str, float]:
    from measuring.measure import percentile  # as a measurement computes its percentiles

    return {
        "p50_ms": percentile(samples, 50),
        "p99_ms": percentile(samples, 99),
        "billed_ms_mean": sum(math.ceil(s) for s in samples) / len(samples),
        "samples": len(samples),
    }


def main(spec_path: str) -> dict:
    import engines
    from measuring.measure import read_reference, timed, warm_up

    spec = json.loads(Path(spec_path).read_text())
    threads = int(spec["threads"])
    sides = {}
    for name in ("A", "B"):
        side = spec[name]
        artifact = Path(side["artifact_path"])
        engine = engines.module(side["optimizer"])
        engine.import_runtime(artifact)
        settings = side.get("settings")
        run = engine.load(artifact, threads, settings=settings) if settings else engine.load(artifact, threads)
        inputs, _ = read_reference(side["reference_path"])
        run(inputs)
        sides[name] = (run, inputs)
    per_block = {}
    for name, (run, inputs) in sides.items():
        warm_up(run, inputs, cap_s=WARMUP_S)
        one = min(timed(run, inputs) for _ in range(3)) / 1000  # seconds
        per_block[name] = max(1, round(BLOCK_S / max(one, 1e-6)))
    rounds = []
    for number in range(int(spec["rounds"])):
        order = "AB" if number % 2 == 0 else "BA"
        samples = {"A": [], "B": []}
        spent = {"A": 0.0, "B": 0.0}
        while min(spent.values()) < float(spec["side_time_s"]):
            for name in order:
                run, inputs = sides[name]
                block = [timed(run, inputs) for _ in range(per_block[name])]
                samples[name] += block
                spent[name] += sum(block) / 1000
        rounds.append({"order": order, "a": _figures(samples["A"]), "b": _figures(samples["B"])})
    return {"rounds": rounds, "per_block": per_block}


@dataclass
class PairSide:
    optimizer: str
    artifact_path: Path
    reference_path: Path
    settings: dict | None = None


def measure_pair(
    a: PairSide, b: PairSide, memory_mb: int, rounds: int, side_time_s: float, timeout_s: float = 900.0
) -> dict:
    """Time `a` and `b` side by side (`main`) in a fresh process confined to the memory size's
    CPU share (memory: twice the size, for both models), under the machine's measurement lock:
    `{"rounds": [...], "confined", "confinement_reason", "load", "lock_wait_s"}`. Raises
    `MeasurementFailed` (`MachineBusy` when the lock stays busy)."""
    from measuring import sandbox
    from measuring.confinement import Limits
    from measuring.launcher import MeasurementFailed, confined_group, machine_lock, run_confined_child
    from measuring.machine_load import host_cores
    from schemas.lambda_limits import lambda_threads, lambda_vcpus

    vcpus = lambda_vcpus(memory_mb)
    threads = min(host_cores(), lambda_threads(memory_mb))
    with machine_lock(timeout_s) as lock_wait_s:
        group, reason = confined_group(Limits(memory_mb=2 * memory_mb, vcpus=vcpus))
        try:
            with sandbox.Workspace.create(prefix="paired-") as workspace:
                spec = {"threads": threads, "rounds": rounds, "side_time_s": side_time_s}
                for name, side in (("A", a), ("B", b)):
                    artifact = workspace.bring(side.artifact_path, f"{name}/{side.artifact_path.name}")
                    reference = workspace.bring(side.reference_path, f"{name}/reference.npz")
                    spec[name] = {
                        "optimizer": side.optimizer,
                        "artifact_path": str(artifact),
                        "reference_path": str(reference),
                        "settings": side.settings,
                    }
                spec_path = workspace.path / "spec.json"
                spec_path.write_text(json.dumps(spec))
                child = run_confined_child(
                    "measuring.paired_measure",
                    [str(spec_path)],
                    sandbox.SandboxLimits(wall_s=timeout_s, address_space_mb=max(8192, 8 * memory_mb), threads=threads),
                    workspace,
                    group,
                    needed_cores=vcpus if group is not None else threads,
                    failure=lambda exc: MeasurementFailed(f"paired measuring process: {exc}"),
                    what="paired measuring process",
                )
        finally:
            if group is not None:
                group.remove()
    return {
        **json.loads(child.result),
        "confined": group is not None,
        "confinement_reason": reason,
        "threads": threads,
        "lock_wait_s": lock_wait_s,
        "load": child.load,
    }


if __name__ == "__main__":
    found = main(sys.argv[1])
    sys.stdout.write(f"\n{RESULT_MARKER}{json.dumps(found)}\n")
