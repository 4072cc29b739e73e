"""Options several commands share: those of every command that executes a run, those of a
request (`run`, `plan`), those of the endpoint (`endpoint`, `loadtest`)."""

from __future__ import annotations

import argparse

from schemas.events import DEFAULT_TUNING_TRIALS

DATA_DIR_HELP = "the local object store (default .ayci/data)"


def executing() -> argparse.ArgumentParser:
    """The options of every command that executes a run (`run`, `replay`)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--force", action="store_true", help="measure again even where results are stored")
    parent.add_argument("--data-dir", help=DATA_DIR_HELP)
    parent.add_argument(
        "--localstack", action="store_true", help="on the real path: LocalStack, the stack, one process per service"
    )
    parent.add_argument("--stack", default="ayci", help="stack name and resource prefix (with --localstack)")
    parent.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the run (with --localstack)")
    parent.add_argument(
        "--target-cpu",
        help="the CPU intel TVM artifacts are compiled for: an LLVM CPU name, or `host` for this machine's "
        "(not portable: may not run on every Lambda host); default x86-64-v3 (docs/lambda.md)",
    )
    return parent


def add_request_options(command: argparse.ArgumentParser) -> None:
    """The options that make a run's request (`run`, `plan`)."""
    command.add_argument(
        "--model", help="a .pt2 (torch.export) or .onnx file; default: the example model of the workload"
    )
    command.add_argument(
        "--workload", default="image_classification", help="image_classification | nlp | object_detection | custom"
    )
    command.add_argument(
        "--inputs",
        help="your own example inputs: an .npz with one array per model input, batch first "
        "(required by --workload custom)",
    )
    command.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="nlp: a Hugging Face tokenizer directory (tokenizer.json or vocab.txt); AYCI's sample sentences, "
        "tokenized by it, become the example inputs for agreement and int8 calibration",
    )
    command.add_argument("--input-size", help="H,W for images and detection; sequence length for nlp")
    command.add_argument(
        "--matrix",
        nargs="+",
        default=["intel=base,onnx"],
        help="HARDWARE=OPT[,OPT] ... (OPT: base, onnx, tvm, onnx_int8) e.g. intel=base,onnx,tvm arm=onnx",
    )
    command.add_argument("--batch", default="1", help="batch sizes, e.g. 1,4")
    command.add_argument(
        "--memory",
        default="1769",
        help="Lambda memory sizes in MB, e.g. 1024,1769,3538, or a range: 128-10240 (Lambda's common sizes within it)",
    )
    command.add_argument(
        "--predict",
        action="store_true",
        help="measure at most 3 memory sizes per hardware, optimizer and "
        "batch, and predict the others with an interval (needs at least 4 sizes)",
    )
    command.add_argument(
        "--precision",
        default="quick",
        choices=["quick", "exact"],
        help="quick (default): measure every combination briefly, then to full precision only those that can "
        "still be an answer; exact: everything to full precision",
    )
    command.add_argument(
        "--trials",
        type=int,
        default=DEFAULT_TUNING_TRIALS,
        help=f"TVM tuning trials per model (MetaSchedule; default {DEFAULT_TUNING_TRIALS})",
    )
    command.add_argument("--slo", type=float, help="p99 SLO in ms")
    command.add_argument("--min-agreement", type=float, default=0.99)
    command.add_argument(
        "--balance-weight", type=float, default=0.5, help="weight of cost against p99 in the balanced pick, 0..1"
    )
    command.add_argument("--price-region", help="Lambda price region (default: the price table's, us-east-1)")
    command.add_argument("--email")
    command.add_argument(
        "--traffic-rps",
        type=float,
        help="price the results under this many requests/s in the email (see `ayci traffic`)",
    )
    command.add_argument("--traffic-pattern", default="steady", choices=["steady", "spiky"])


def serving() -> argparse.ArgumentParser:
    """The options of the endpoint, and of the load test that starts one."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "runs",
        help="RUN_ID[:COMBINATION][,RUN_ID...]: each run's recommended combination, or the one named "
        "(e.g. RUN_ID:intel/onnx/b1/1769MB)",
    )
    parent.add_argument(
        "--memory-budget",
        type=int,
        help="MB the workers may reserve together (each its combination's memory size); "
        "default 80%% of the memory available",
    )
    parent.add_argument("--max-workers", type=int, default=2, help="workers per model at most")
    parent.add_argument(
        "--idle-time", type=float, default=30.0, help="seconds a worker may idle before it is stopped (one stays)"
    )
    parent.add_argument(
        "--max-queue", type=int, default=32, help="requests queued per model; beyond: 503 with Retry-After"
    )
    parent.add_argument("--max-body-mb", type=float, default=16.0, help="the largest request body (413 beyond)")
    parent.add_argument("--data-dir", help=DATA_DIR_HELP)
    return parent
