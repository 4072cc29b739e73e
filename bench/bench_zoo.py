"""The zoo, through AYCI: every architecture of `bench/zoo_models.py`, exported by each recipe,
planned and run on the embedded default (base, onnx, tvm on intel; batch 1 and 2 where the
export allows), then one table of model x recipe x optimizer: measured, or failed with the
reason, and the counts the goals are judged by.

    .venv/bin/python bench/bench_zoo.py [--models bert,resnet-50] [--recipes pt2-positional-dynamic]
        [--optimizers base,onnx,tvm] [--full] [--json out.json]

`--full` uses the architectures' full depth (slow). Plan-impossible combinations are counted
apart: they never reach a worker (the third goal: 0 combinations reach a worker that the plan
could have called impossible is checked from each failure's stage).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ayci.bootstrap import embedded
from ayci.settings import Settings
from bench.zoo_models import RECIPES, export, inputs_file, zoo
from core.logs import configure_logging
from schemas import keys
from schemas.combos import Matrix
from schemas.documents import RunSummary
from schemas.events import FailureStage, RequestSubmitted
from schemas.reasons import decisive
from services.request.submission import new_run, store_inputs, store_model


def run_one(app, path: Path, model, optimizers: list[str], batches: list[int], trials: int) -> RunSummary:
    inputs = inputs_file(model, path.parent)
    sha = store_inputs(app.store, inputs) if inputs else None
    ref = store_model(app.store, path, model.workload, model.input_size, sha)
    matrix = Matrix(optimizers={"intel": optimizers}, batch_sizes=batches, memory_sizes_mb=[3538])
    envelope = new_run(RequestSubmitted(model=ref, matrix=matrix, tuning_trials=trials))
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    return RunSummary.read(app.store.get_bytes(keys.summary(envelope.run_id)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--optimizers", default="base,onnx,tvm")
    parser.add_argument("--trials", type=int, default=0, help="TVM tuning trials (0: compile untuned)")
    parser.add_argument("--full", action="store_true", help="full-depth architectures")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    configure_logging("console", logging.WARNING)
    chosen = set(args.models.split(",")) if args.models else None
    models = [m for m in zoo(args.full) if chosen is None or m.name in chosen]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ayci-zoo-") as tmp:
        app = embedded(Settings(data_dir=Path(tmp) / "data", measure_time_cap_s=2.0, measure_min_iterations=10))
        for model in models:
            for recipe in args.recipes.split(","):
                started = time.monotonic()
                try:
                    path = export(model, recipe, Path(tmp) / "models" / recipe)
                except Exception as exc:  # the exporter's own failure: the recipe does not apply to this model
                    rows.append(
                        {
                            "model": model.name,
                            "recipe": recipe,
                            "optimizer": "-",
                            "batch": "-",
                            "state": "export failed",
                            "reason": decisive(f"{type(exc).__name__}: {exc}", 200),
                        }
                    )
                    print(f"{model.name:16} {recipe:22} export failed: {rows[-1]['reason']}", flush=True)
                    continue
                batches = [1, 2]
                try:
                    summary = run_one(app, path, model, args.optimizers.split(","), batches, args.trials)
                except Exception as exc:
                    rows.append(
                        {
                            "model": model.name,
                            "recipe": recipe,
                            "optimizer": "-",
                            "batch": "-",
                            "state": "refused",
                            "reason": decisive(f"{type(exc).__name__}: {exc}", 200),
                        }
                    )
                    print(f"{model.name:16} {recipe:22} refused: {rows[-1]['reason']}", flush=True)
                    continue
                for result in summary.results:
                    rows.append(
                        {
                            "model": model.name,
                            "recipe": recipe,
                            "optimizer": result.combo.optimizer.value,
                            "batch": result.combo.batch_size,
                            "state": "measured",
                            "p50_ms": round(result.latency_ms.p50, 2),
                            "agreement": round(result.agreement.score, 4),
                        }
                    )
                for failure in summary.failures:
                    rows.append(
                        {
                            "model": model.name,
                            "recipe": recipe,
                            "optimizer": failure.combo.optimizer.value,
                            "batch": failure.combo.batch_size,
                            "state": "impossible (plan)"
                            if failure.stage == FailureStage.plan
                            else f"failed ({failure.stage.value})",
                            "reason": decisive(failure.reason, 200),
                        }
                    )
                print(
                    f"{model.name:16} {recipe:22} {time.monotonic() - started:6.0f} s  "
                    + ", ".join(
                        f"{r['optimizer']}/b{r['batch']}: {r['state']}"
                        for r in rows
                        if r["model"] == model.name and r["recipe"] == recipe
                    ),
                    flush=True,
                )
    print()
    print(f"{'model':16} {'recipe':22} {'optimizer':9} {'batch':5} {'state':20} detail")
    for r in rows:
        detail = (
            f"p50 {r['p50_ms']} ms, agreement {r['agreement']}" if r["state"] == "measured" else r.get("reason", "")
        )
        print(f"{r['model']:16} {r['recipe']:22} {str(r['optimizer']):9} {str(r['batch']):5} {r['state']:20} {detail}")
    print()
    counts = Counter(r["state"].split(" (")[0] for r in rows)
    print("counts:", dict(counts))
    for optimizer in args.optimizers.split(","):
        per_model = {}
        for r in rows:
            if r["optimizer"] == optimizer and r["batch"] == 1:
                per_model[(r["model"], r["recipe"])] = (
                    per_model.get((r["model"], r["recipe"])) or r["state"] == "measured"
                )
        if per_model:
            ok = sum(per_model.values())
            print(
                f"{optimizer}: measured at batch 1 for {ok} of {len(per_model)} exported model x recipe "
                f"({100 * ok / len(per_model):.0f} %)"
            )
    late = [
        r
        for r in rows
        if r["state"].startswith("failed")
        and ("fixed batch" in r.get("reason", "") or "certain out of memory" in r.get("reason", ""))
    ]
    print(f"combinations that reached a worker though the plan could have called them impossible: {len(late)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
