"""`--tokenizer DIR`: the sentences AYCI ships, tokenized by the user's Hugging Face tokenizer
into the NLP workload's example inputs (`workloads/tokenized.py`). They are written as an
`.npz` and go on as `--inputs` do: stored with the run, read by the sandboxed conversion and
measurement, which never need the tokenizer."""

from __future__ import annotations

import argparse
import atexit
import shutil
import tempfile
from pathlib import Path

from ayci.cli.console import UsageError


def tokenized_inputs(args: argparse.Namespace) -> Path:
    """The `.npz` of the shipped sentences tokenized by `args.tokenizer` to the run's sequence
    length (`--input-size`, else the NLP workload's default); a `UsageError` saying what is wrong."""
    from workloads import nlp
    from workloads.custom import BadInputs, check_npz
    from workloads.tokenized import TokenizerError, tokenized_npz

    if getattr(args, "inputs", None):
        raise UsageError("give --tokenizer or --inputs, not both: --inputs are your own examples already")
    if args.workload != "nlp":
        raise UsageError(f"--tokenizer makes text inputs for --workload nlp, not {args.workload}")
    try:
        (sequence_length,) = [int(v) for v in args.input_size.split(",")] if args.input_size else nlp.DEFAULT_INPUT_SIZE
    except ValueError:
        raise UsageError(f"--input-size for nlp is one sequence length, got {args.input_size!r}") from None
    if sequence_length < 2:
        raise UsageError("--tokenizer needs a sequence length of at least 2 (room for [CLS] and [SEP])")
    out_dir = Path(tempfile.mkdtemp(prefix="ayci-tokenized-"))
    atexit.register(shutil.rmtree, out_dir, ignore_errors=True)
    try:
        path = tokenized_npz(Path(args.tokenizer), sequence_length, out_dir)
        check_npz(path)
    except (TokenizerError, BadInputs) as exc:
        raise UsageError(f"--tokenizer {args.tokenizer}: {exc}") from None
    return path
