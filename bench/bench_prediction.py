"""How well three measured sizes predict the others (`--predict`, `core/lambda_model/prediction.py`).

For each model (the three example workloads and zoo models, where transformers is installed)
and optimizer, every size this host can give as Lambda would is measured in one run through
the pipeline (confined: CPU quota and memory cap). Then the prediction is made from the anchor
sizes `--predict` would have measured alone, and compared with the measurements of the other
sizes: the mean and max absolute percentage error of the p50 and the p99, how often the
measured value fell inside the predicted interval, and how many measurements the prediction
saved. Goal (issue 14): p50 mean error <= 5 %, max <= 15 %; p99 mean <= 10 %.

    .venv/bin/python bench/bench_prediction.py
        [--models resnet18,nlp,detector,resnet-50,mobilenet-v2,distilbert,vit-b16] [--optimizers onnx]
        [--time-cap 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ayci.bootstrap import embedded
from ayci.settings import Settings
from core.lambda_model.prediction import predict_run
from core.logs import configure_logging
from core.run_plan import measured_and_predicted
from measuring.confinement import unavailable_reason
from schemas import keys
from schemas.combos import Matrix
from schemas.documents import RunSummary
from schemas.events import RequestSubmitted
from services.request.submission import new_run, store_inputs, store_model

SIZES = [256, 512, 1024, 1536, 1769, 2048, 2560, 3008, 3538]  # what a 2-core host can give as Lambda would
EXAMPLES = {
    "resnet18": ("image_classification", [224, 224]),
    "nlp": ("nlp", [128]),
    "detector": ("object_detection", [320, 320]),
}


def model_files(names: list[str], folder: Path):
    """(name, path, workload, input size, inputs .npz or None) for each name."""
    from workloads.examples import export_example

    zoo_names = [n for n in names if n not in EXAMPLES]
    zoo = {}
    if zoo_names:
        try:
            from zoo_models import export, inputs_file
            from zoo_models import zoo as zoo_list

            zoo = {m.name: m for m in zoo_list()}
        except ImportError as exc:  # transformers is a dev dependency
            print(f"zoo models skipped: {exc}")
    for name in names:
        if name in EXAMPLES:
            workload, size = EXAMPLES[name]
            yield name, export_example(workload, size, folder / f"{name}.pt2"), workload, size, None
        elif name in zoo:
            model = zoo[name]
            path = export(model, "onnx-dynamic", folder)
            yield name, path, model.workload, model.input_size, inputs_file(model, folder)
        else:
            print(f"unknown model {name}: skipped")


def measure_all(
    app, path: Path, workload: str, size: list[int], inputs: Path | None, optimizers: list[str]
) -> tuple[RequestSubmitted, RunSummary]:
    sha = store_inputs(app.store, inputs) if inputs else None
    model = store_model(app.store, path, workload, size, sha)
    request = RequestSubmitted(
        model=model, matrix=Matrix(optimizers={"intel": optimizers}, batch_sizes=[1], memory_sizes_mb=SIZES), force=True
    )
    envelope = new_run(request)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    return request, RunSummary.read(app.store.get_bytes(keys.summary(envelope.run_id)))


def compare(request: RequestSubmitted, summary: RunSummary) -> list[dict]:
    """The prediction from the anchors alone against the measurement of every other size."""
    predicting = request.model_copy(update={"predict": True})
    anchors, predicted = measured_and_predicted(predicting)
    anchor_labels = {c.label for c in anchors}
    measured = {r.label: r for r in summary.results}
    anchor_results = [r for r in measured.values() if r.label in anchor_labels]
    anchor_failures = [f for f in summary.failures if f.label in anchor_labels]
    rows, refused = predict_run(predicting, predicted, anchor_results, anchor_failures, predicting.price_region)
    out = []
    for row in rows:
        actual = measured.get(row.label)
        if actual is None or actual.disturbed:
            continue
        entry = {"label": row.label, "regime": row.prediction.regime}
        for stat in ("p50", "p99"):
            guess, real = getattr(row.latency_ms, stat), getattr(actual.latency_ms, stat)
            low, high = getattr(row.interval, stat)
            entry[f"{stat}_predicted"], entry[f"{stat}_measured"] = guess, real
            entry[f"{stat}_error"] = abs(guess - real) / real
            entry[f"{stat}_inside"] = low <= real <= high
        out.append(entry)
    for item in refused:
        failed = next((f for f in summary.failures if f.label == item.label), None)
        out.append({"label": item.label, "refused": item.reason, "measured_failed": failed.reason if failed else None})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18,nlp,detector,resnet-50,mobilenet-v2,distilbert,vit-b16")
    parser.add_argument("--optimizers", default="onnx")
    parser.add_argument("--time-cap", type=float, default=8.0, help="seconds of timing per measurement")
    parser.add_argument("--json", help="write every comparison here")
    args = parser.parse_args()
    configure_logging("console", logging.WARNING)
    reason = unavailable_reason()
    print(
        "confinement: "
        f"{'cgroups' if reason is None else 'NONE (' + reason + '): sizes are not measured as Lambda would run them'}"
    )
    everything, saved, total = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="ayci-bench-prediction-") as tmp:
        folder = Path(tmp)
        for name, path, workload, size, inputs in model_files(args.models.split(","), folder):
            app = embedded(Settings(data_dir=folder / f"data-{name}", measure_time_cap_s=args.time_cap))
            request, summary = measure_all(app, path, workload, size, inputs, args.optimizers.split(","))
            rows = compare(request, summary)
            anchors, predicted = measured_and_predicted(request.model_copy(update={"predict": True}))
            saved += len(predicted)
            total += len(anchors) + len(predicted)
            for row in rows:
                row["model"] = name
                if "refused" in row:
                    print(
                        f"{name:>13} {row['label']:<26} {row['refused']} (measured: {row['measured_failed'] or 'ran'})"
                    )
                    continue
                print(
                    f"{name:>13} {row['label']:<26} {row['regime']:<16} p50 {row['p50_predicted']:8.2f} vs "
                    f"{row['p50_measured']:8.2f} "
                    f"({row['p50_error']:5.1%}{'' if row['p50_inside'] else ' OUT'})  p99 {row['p99_predicted']:8.2f} "
                    "vs "
                    f"{row['p99_measured']:8.2f} ({row['p99_error']:5.1%}{'' if row['p99_inside'] else ' OUT'})",
                    flush=True,
                )
            everything += rows
    scored = [r for r in everything if "refused" not in r]
    if not scored:
        print("nothing predicted")
        return 1
    for stat in ("p50", "p99"):
        errors = [r[f"{stat}_error"] for r in scored]
        inside = sum(r[f"{stat}_inside"] for r in scored)
        print(
            f"{stat}: mean abs error {statistics.mean(errors):.1%}, max {max(errors):.1%}, inside the interval "
            f"{inside}/{len(scored)}"
        )
    by_regime = {}
    for r in scored:
        by_regime.setdefault(r["regime"], []).append(r["p50_error"])
    print(
        "p50 mean error by regime: "
        + ", ".join(f"{k} {statistics.mean(v):.1%} ({len(v)})" for k, v in sorted(by_regime.items()))
    )
    print(f"measurements saved: {saved} of {total} sizes predicted ({saved / total:.0%})")
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
