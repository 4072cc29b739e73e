"""Time to the answer: the same matrix in quick (racing) and exact precision, on the embedded default.

For each model (the issue's transformer encoder, all-MiniLM-L6-v2 pretrained, NLP, sequence 128, or
`encoder`, the smaller example encoder; ResNet-18 224x224; `mobilenet-v2` and `distilbert` from the zoo, which
none of the plan's priors came from) and each
precision, a fresh store (nothing reused), the matrix submitted and driven to its summary:
- wall time, from submission to the archived summary;
- time to the first answer: quick, when the running answer (`runs/{id}/answer.json`) is first shown,
  i.e. leaves its `gathering` stage: the provisional answer once every engine's lead combination
  (its smallest batch at the size nearest 1 vCPU) has its quick outcome, tuned TVM not waited for
  (`core/racing.py`); with its content (how many combinations had ended, the engines it compares,
  its picks and whether the summary's picks are the same). Also the quick pass's answer (every
  combination measured quickly: the race decided, stage `quick`), the first answer before issue 38's
  second change. Exact: the summary;
- measurements: quick-pass ones and full ones (a refinement or an exact measurement), what the race found
  dominated and the contenders it kept at their quick figures (`core.racing.kept_quick`);
- `ayci plan`'s estimate of the run (`plan_of` on the fresh store, before submission: its priors)
  against the run's wall time without lock waits (issue 38's honest plan: within ±25 %);
- whether the picks agree: each of fastest, cheapest, balanced the same, or the quick pick within the
  margin the quick answer stated (its figures in the exact run no further from the exact pick than
  the margin's upper bound; for balanced, on both p99 and cost).

Goals (issue 38): quick in at most a quarter of exact's wall time with the same picks, a first answer
within 2 minutes, the 96 combinations (base, onnx, tvm, onnx_int8 x batch 1, 2, 4, 8 x six sizes,
--predict) within 15 minutes, tuning included.

Measured here (2026-12-06, a 2-core host shared with other benchmarks; docs/benchmarks.md has the tables, waits
for the machine's measurement lock counted apart): the issue's 96 combinations on ResNet-18, exact 94.8 min (49.7
without waits; TVM tuned at four batch sizes), quick 25.9 min (13.7 without waits: 0.28 of exact; fastest the same,
cheapest within its margin, balanced different); the first (provisional) answer on those 96 (`--first-answer-only`):
57.6 s of the run's own work, 1107.6 s wall behind 1050 s of lock waits. Later the same day on a quiet host
(docs/benchmarks.md): MiniLM exact 25.4 min, quick 14.3 min (0.56; first answer 70.9 s; fastest and cheapest the
same, balanced within its margin), quick again with the int8 recipe reused 12.8 min; ResNet-18 quick 7.5 min
(first answer 46.9 s). 2026-12-07, an Intel host, TVM's best case taken at the run's 64 trials: ResNet-18 quick
5.8 min against exact 28.2 (0.21; first answer 31 s), MiniLM quick 14.6 against 22.1 (0.66; nothing dominated:
torch runs it about as fast as int8 there). Later that day, converged quick measurements kept and the host-speed
probe on: MiniLM quick 15.8 against exact 20.2 min (0.78; its quick pass alone 0.35), ResNet-18 quick 7.5 against
26.8 min (0.28; fastest differs on a doubled p99 at 2 vCPUs). Later, a converged quick measurement tuned at its own
size kept as full where its session search timed every candidate: ResNet-18 quick 6.1 min (0.23 and 0.22 of the two
exact runs; picks the same or within margin), MiniLM quick 15.6 min (0.71-0.77), the example encoder 8.6 against 14.3
min (0.60); `ayci plan` with per-workload priors within 25 % on MiniLM and ResNet-18 exact and on DistilBERT quick,
not on the encoder (+97 % quick), MobileNetV2 (-37 %) nor ResNet-18 quick (+33 %).

    .venv/bin/python bench/bench_time_to_answer.py                       # the issue's matrix (hours in exact)
    .venv/bin/python bench/bench_time_to_answer.py --models resnet18 --precisions quick --first-answer-only
    .venv/bin/python bench/bench_time_to_answer.py --models resnet18 --optimizers base,onnx,onnx_int8 \\
        --batches 1 --memory 1024,1769 --no-predict --time-cap 4            # a small one
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ayci.bootstrap import embedded  # noqa: E402
from ayci.cli.common import plan_of  # noqa: E402
from ayci.settings import Settings  # noqa: E402
from bench.cache import CACHE, exported_example  # noqa: E402
from core import measurement_lock  # noqa: E402
from core.ports import NotFound  # noqa: E402
from core.racing import answer_lines  # noqa: E402
from schemas import keys  # noqa: E402
from schemas.combos import Matrix  # noqa: E402
from schemas.events import RequestSubmitted  # noqa: E402
from services.request.submission import store_model, submit_run  # noqa: E402


class FirstAnswer(Exception):
    """--first-answer-only: the run's first answer is shown; stop there."""


LOCK_WAITS: list[float] = []  # seconds each holder of the machine's measurement lock waited for it, this process


def _counting(lock):
    """`lock` (`measurement_lock.shared` or `exclusive`) counting its waits: on a shared host another
    process's measurement or conversion holds the lock, and that time is not the run's own."""

    @contextlib.contextmanager
    def counted(*args, **kwargs):
        with lock(*args, **kwargs) as waited:
            LOCK_WAITS.append(waited)
            yield waited

    return counted


measurement_lock.shared = _counting(measurement_lock.shared)
measurement_lock.exclusive = _counting(measurement_lock.exclusive)

MODELS = {
    "minilm": ("minilm", "nlp", [128]),  # the encoder: all-MiniLM-L6-v2, pretrained (bench_int8.minilm)
    "encoder": ("encoder-seq128", "nlp", [128]),
    "resnet18": ("resnet18-224", "image_classification", [224, 224]),
}
# models none of the plan's priors came from (`core/plan_costs.PRIORS`): the zoo's, full depth, exported with
# `torch.export` and a dynamic batch (`bench/zoo_models.py`), random weights
ZOO = ("mobilenet-v2", "distilbert")
KINDS = ("fastest", "cheapest", "balanced")


def run_once(name: str, precision: str, args: argparse.Namespace, data_dir: Path) -> dict:
    if name in ZOO:
        from bench.zoo_models import export, zoo

        zoo_model = next(m for m in zoo(full=True) if m.name == name)
        workload, size = zoo_model.workload, zoo_model.input_size
        model_path = export(zoo_model, "pt2-positional-dynamic", CACHE / "zoo")
    else:
        slug, workload, size = MODELS[name]
        if name == "minilm":
            from bench.bench_int8 import minilm

            model_path, _sentences = minilm()
        else:
            model_path = exported_example(slug, workload, size, CACHE)
    app = embedded(Settings(data_dir=data_dir, measure_time_cap_s=args.time_cap))
    learned = bool(app.store.list_keys(keys.results_prefix()))  # the models run before in this precision's store
    model = store_model(app.store, model_path, workload, size)
    matrix = Matrix(
        optimizers={"intel": args.optimizers.split(",")},
        batch_sizes=[int(b) for b in args.batches.split(",")],
        memory_sizes_mb=[int(m) for m in args.memory.split(",")],
    )
    request = RequestSubmitted(
        model=model, matrix=matrix, predict=args.predict, precision=precision, tuning_trials=args.trials
    )
    # what `ayci plan` says of this run before it starts, held against the run: on a fresh store (its
    # priors) and, after another model's run in this precision's store, learned from that run's results
    estimate_s = plan_of(request, model_path, None, None).wall_s
    learned_s = plan_of(request, model_path, None, app.store).wall_s if learned else None
    counts = {"quick": 0, "full": 0}
    seen: dict[str, tuple[float, dict]] = {}  # answer stage -> (seconds since submission, the answer then)
    started = time.perf_counter()

    def look() -> None:
        """The running answer as the delivery before left it: the first time of each stage."""
        if "final" in seen:
            return
        try:
            doc = json.loads(app.store.get_bytes(keys.answer(envelope.run_id)))
        except NotFound:
            return
        stage = doc.get("stage")
        if stage and stage not in seen:
            seen[stage] = (time.perf_counter() - started, {**doc, "lock_wait_before_s": round(sum(LOCK_WAITS), 1)})

    def observe(queue: str, event) -> None:
        look()
        if args.first_answer_only and any(stage != "gathering" for stage in seen):
            raise FirstAnswer  # out of the bus's loop: the run is left unfinished
        if event.type == "ModelConverted" and queue.startswith("inference"):
            refine = getattr(event.payload, "refine", False)
            counts["full" if refine or precision == "exact" else "quick"] += 1

    app.bus.observers.append(observe)
    load_before = os.getloadavg()[0]
    LOCK_WAITS.clear()
    # as `ayci run` submits (services/request/submission.submit_run): the run's record is what TVM's
    # tuning waits on for the other engines' figures (core/tuning_stakes.waits_for_others)
    envelope = submit_run(app.store, app.publisher, request)
    with contextlib.suppress(FirstAnswer):
        app.bus.run_until_idle()
    wall = time.perf_counter() - started
    look()
    load_after = os.getloadavg()[0]
    try:
        summary = json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))
    except NotFound:  # --first-answer-only
        summary = {"results": [], "recommendation": None}
    phases = {**run_phases(app.store, envelope.run_id, summary), "lock_wait_s": round(sum(LOCK_WAITS), 1)}
    try:
        answer = json.loads(app.store.get_bytes(keys.answer(envelope.run_id)))
    except NotFound:
        answer = None
    recommendation = summary.get("recommendation") or {}
    shown = [(t, doc) for stage, (t, doc) in seen.items() if stage != "gathering"]
    first_s, first_doc = min(shown, key=lambda pair: pair[0]) if shown else (wall, None)
    first = {}
    if first_doc is not None:
        engines = {
            label.rsplit("/", 2)[0] for part in ("rows", "dominated", "out") for label in first_doc.get(part, {})
        }
        first = {
            "first_answer_stage": first_doc.get("stage"),
            "first_answer_lock_wait_s": first_doc["lock_wait_before_s"],
            "first_answer_ended": first_doc.get("ended"),
            "first_answer_total": first_doc.get("total", len(first_doc.get("rows") or {})),
            "first_answer_engines": sorted(engines),
            "first_answer_picks": first_doc.get("picks"),
            "first_answer_text": answer_lines(first_doc),
            "first_answer_picks_final": {
                k: (first_doc.get("picks") or {}).get(k) == recommendation.get(k) for k in KINDS
            }
            if recommendation
            else None,
        }
    rows = {
        f"{r['combo']['hardware']}/{r['combo']['optimizer']}/b{r['combo']['batch_size']}/{r['combo']['memory_mb']}MB": r
        for r in summary["results"]
    }
    return {
        "model": name,
        "precision": precision,
        "combinations": len(matrix.combos()),
        "wall_s": wall,
        "plan_estimate_s": estimate_s,
        "plan_learned_estimate_s": learned_s,
        "first_answer_s": first_s if precision == "quick" else wall,
        "quick_pass_answer_s": seen["quick"][0] if "quick" in seen else None,
        **first,
        "measured_quick": counts["quick"],
        "measured_full": counts["full"],
        "dominated": sum(1 for r in summary["results"] if r.get("dominated_by")),
        "kept_quick": sum(1 for r in summary["results"] if r.get("kept_quick")),
        "picks": {k: recommendation.get(k) for k in KINDS},
        "margins": recommendation.get("margins") or {},
        "rows": rows,
        "answer_stage": answer and answer.get("stage"),
        "loadavg_1m": [round(load_before, 2), round(load_after, 2)],
        **phases,
    }


def run_phases(store, run_id: str, summary: dict) -> dict:
    """Where the run's time went, from its stored results and manifests: conversions (each artifact once),
    the measuring processes (tuning and timing children), and the time measurements waited for the
    machine's measurement lock is counted apart (`LOCK_WAITS`)."""
    measuring = 0.0
    artifacts: dict[str, float] = {}
    for row in summary["results"]:
        combo_key = row.get("combo_key")
        if not combo_key:
            continue
        for key in store.list_keys(keys.result_versions_prefix(combo_key)):
            if run_id not in key or not key.endswith(".json"):
                continue
            result = json.loads(store.get_bytes(key))
            measuring += result.get("measurement_s") or 0.0
            measuring += (result.get("engine_tuning") or {}).get("tuning_s") or 0.0
            artifacts[result.get("artifact_key")] = (result.get("conversion_s") or 0.0) + (
                result.get("tuning_s") or 0.0
            )
    return {
        "conversion_s": round(sum(artifacts.values()), 1),
        "measuring_s": round(measuring, 1),
    }


FIGURE = {
    "p99": lambda row: row["latency_ms"]["p99"],
    "cost": lambda row: row["cost"]["per_million_inferences_usd"],
}
# a margin as `core.racing.Margin.text` states it: "31 % ± 4 % more", "1 % more (95 %: 8 % less to 213 % more)"
# or "40 % higher (95 %: 3 % to 137 % higher)"
WORD = r"(?:higher|lower|more|less)"
STATED = re.compile(rf"(\d+) % ± (\d+) % {WORD}|\d+ % {WORD} \(95 %: (\d+) %(?: {WORD})? to (\d+) % {WORD}\)")


def stated_bounds(text: str) -> list[float]:
    """How far each margin stated in `text` reaches, in % either way (its value and spread, or the
    farther end of its range), in order (p99 first for balanced)."""
    return [
        float(value) + float(spread) if value else max(float(low), float(high))
        for value, spread, low, high in STATED.findall(text)
    ]


def agree(quick: dict, exact: dict) -> dict[str, str]:
    """Per kind: `same`, `within margin` or `differs`. Within margin: in the exact run, the quick
    pick is no further behind the exact pick than the quick answer's stated margin allows (its
    value plus its spread): on p99 for fastest, on cost for cheapest, on both for balanced (its
    margin states both figures, p99 first)."""
    out = {}
    for kind in KINDS:
        q, e = quick["picks"][kind], exact["picks"][kind]
        if q == e:
            out[kind] = "same"
            continue
        stated = stated_bounds(quick["margins"].get(kind, ""))
        figures = {"fastest": ["p99"], "cheapest": ["cost"], "balanced": ["p99", "cost"]}[kind]
        q_row, e_row = exact["rows"].get(q or ""), exact["rows"].get(e or "")
        if len(stated) < len(figures) or not (q_row and e_row):
            out[kind] = "differs"
            continue
        verdicts = []
        for what, bound in zip(figures, stated, strict=False):
            gap = (FIGURE[what](q_row) / FIGURE[what](e_row) - 1) * 100
            verdicts.append((gap <= bound, f"{what} {gap:+.0f} % vs {bound:.0f} %"))
        detail = ", ".join(text for _, text in verdicts)
        out[kind] = f"within margin ({detail})" if all(ok for ok, _ in verdicts) else f"differs ({detail})"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="minilm,resnet18")
    parser.add_argument("--optimizers", default="base,onnx,tvm,onnx_int8")
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--memory", default="512,1024,1769,2048,3008,3538")
    parser.add_argument("--predict", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--time-cap", type=float, default=Settings().measure_time_cap_s)
    parser.add_argument("--trials", type=int, default=64, help="TVM tuning trials per artifact")
    parser.add_argument("--precisions", default="quick,exact")
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument(
        "--first-answer-only",
        action="store_true",
        help="stop each run when its first answer is shown (time to the first answer alone; no summary, no picks)",
    )
    parser.add_argument("--keep-stores", action="store_true", help="keep each precision's store (its results, logs)")
    args = parser.parse_args()
    report = []
    precisions = args.precisions.split(",")
    # one store per precision, fresh for the first model: the next model's plan learns from the runs before
    # it (what `ayci plan` knows on a store with other models' results); nothing of one model serves another
    stores = {p: Path(tempfile.mkdtemp(prefix=f"bench-answer-{p}-")) for p in precisions}
    for name in args.models.split(","):
        runs = {}
        for p in precisions:
            runs[p] = run_once(name, p, args, stores[p] / "data")
            brief = {k: v for k, v in runs[p].items() if k not in ("rows", "first_answer_text")}
            print(f"run done: {json.dumps(brief)}", flush=True)  # each run's figures as it ends
        row = {p: {k: v for k, v in r.items() if k != "rows"} for p, r in runs.items()}
        if "quick" in runs and "exact" in runs:
            row["agreement"] = agree(runs["quick"], runs["exact"])
            row["quick_share_of_exact"] = runs["quick"]["wall_s"] / runs["exact"]["wall_s"]
            row["quick_share_without_waits"] = (runs["quick"]["wall_s"] - runs["quick"]["lock_wait_s"]) / (
                runs["exact"]["wall_s"] - runs["exact"]["lock_wait_s"]
            )
        report.append(row)
        print_row(name, row)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    for store in stores.values():
        if args.keep_stores:
            print(f"kept: {store}")
        else:
            shutil.rmtree(store, ignore_errors=True)
    return 0


def print_row(name: str, row: dict) -> None:
    print(f"\n{name}")
    print(
        f"  {'precision':<9} {'combos':>6} {'wall s':>8} {'first answer s':>14} "
        f"{'quick':>6} {'full':>5} {'dominated':>9} {'kept':>5} {'convert s':>9} {'measure s':>9} {'lock wait s':>11} "
        f"{'load 1m':>11}"
    )
    for precision in ("quick", "exact"):
        r = row.get(precision)
        if r:
            load = "{:.1f}->{:.1f}".format(*r["loadavg_1m"])
            print(
                f"  {precision:<9} {r['combinations']:>6} {r['wall_s']:>8.1f} {r['first_answer_s']:>14.1f} "
                f"{r['measured_quick']:>6} {r['measured_full']:>5} {r['dominated']:>9} {r.get('kept_quick', 0):>5} "
                f"{r['conversion_s']:>9.1f} "
                f"{r['measuring_s']:>9.1f} {r['lock_wait_s']:>11.1f} {load:>11}"
            )
    for precision in ("quick", "exact"):
        r = row.get(precision)
        for basis, key in (("on a fresh store (priors)", "plan_estimate_s"), ("learned", "plan_learned_estimate_s")):
            if r and r.get(key):
                own = r["wall_s"] - r["lock_wait_s"]
                print(
                    f"  {precision}: `ayci plan` {basis} estimated {r[key] / 60:.1f} min; the run took "
                    f"{own / 60:.1f} min without lock waits ({(r[key] / own - 1) * 100:+.0f} %, goal ±25 %)"
                )
    quick = row.get("quick") or {}
    if quick.get("first_answer_stage"):
        print(
            f"  first answer ({quick['first_answer_stage']}) at {quick['first_answer_s']:.1f} s "
            f"({quick['first_answer_s'] - quick['first_answer_lock_wait_s']:.1f} s without "
            f"{quick['first_answer_lock_wait_s']:.1f} s of lock waits before it): "
            f"{quick['first_answer_ended']} of {quick['first_answer_total']} ended, engines "
            f"{', '.join(quick['first_answer_engines'])}; the quick pass's answer at "
            f"{quick['quick_pass_answer_s'] or float('nan'):.1f} s; "
            f"its picks the summary's: {quick['first_answer_picks_final']}"
        )
        for line in quick.get("first_answer_text") or []:
            print(f"    {line}")
    if "agreement" in row:
        print(f"  quick / exact wall time: {row['quick_share_of_exact']:.2f} (goal <= 0.25)")
        print(f"  the same without waits for other processes' measurements: {row['quick_share_without_waits']:.2f}")
        for kind, verdict in row["agreement"].items():
            print(f"  {kind}: quick {row['quick']['picks'][kind]} / exact {row['exact']['picks'][kind]}: {verdict}")
    for line in (row.get("quick") or {}).get("margins", {}).values():
        print(f"  {line}")


if __name__ == "__main__":
    sys.exit(main())
