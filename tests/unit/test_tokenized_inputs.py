"""`--tokenizer DIR`: the shipped sentences tokenized by the user's Hugging Face tokenizer become
the NLP example inputs (workloads/tokenized.py), travel as `--inputs` do, and every agreement on
them says it rests on tokenized sentences. Tokenizers are built here from a small vocabulary
(nothing downloaded); a directory holding only pickles or Python files is refused."""

from __future__ import annotations

import argparse
import hashlib
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workloads import tokenized
from workloads.agreement import TOKENIZED
from workloads.custom import check_npz, inputs_from_npz, inputs_kind

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP = 0, 1, 2, 3


def _vocab_file(tmp_path: Path) -> Path:
    """BERT's special tokens, then every word (and punctuation mark) of the shipped sentences
    but a few, so some words fall to [UNK] as rare words do."""
    words = set()
    for sentence in tokenized.sentences():
        for word in sentence.lower().replace("'", " ' ").split():
            words.add(word.strip(".,;:!?"))
    words -= {"", "sourdough", "nineteen"}
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join([*SPECIAL, *sorted(words), ".", ",", ";", "!", "?", "'", "-"]) + "\n", encoding="utf-8")
    return path


def _saved_tokenizer(tmp_path: Path) -> tuple[Path, object]:
    """A BertTokenizerFast built from the small vocabulary, saved as a user's tokenizer is."""
    from transformers import BertTokenizerFast

    vocab_path = _vocab_file(tmp_path)
    vocab = {token: index for index, token in enumerate(vocab_path.read_text(encoding="utf-8").splitlines())}
    fast = BertTokenizerFast(vocab=vocab, do_lower_case=True)
    directory = tmp_path / "tokenizer"
    fast.save_pretrained(str(directory))
    assert (directory / "tokenizer.json").is_file()
    return directory, fast


def test_the_sentences_become_padded_truncated_token_ids_with_cls_and_sep(tmp_path):
    directory, fast = _saved_tokenizer(tmp_path)
    seq = 16
    path = tokenized.tokenized_npz(directory, seq, tmp_path / "out")
    count = len(tokenized.sentences())
    assert count >= 60
    assert check_npz(path) == {name: ((count, seq), "int64") for name in tokenized.INPUT_NAMES}
    assert inputs_kind(path) == TOKENIZED
    with np.load(path, allow_pickle=False) as npz:
        ids, mask, types = npz["input_ids"], npz["attention_mask"], npz["token_type_ids"]
    lengths = mask.sum(axis=1)
    assert set(np.unique(mask)) <= {0, 1} and np.all(types == 0)
    assert np.all(ids[:, 0] == CLS) and np.all(ids[np.arange(count), lengths - 1] == SEP)
    assert np.all(mask[:, :1] == 1) and all(
        np.all(row[:n] == 1) and np.all(row[n:] == 0) for row, n in zip(mask, lengths, strict=True)
    )
    assert np.all(ids[mask == 0] == PAD)  # padding after the sentence
    assert len(set(lengths.tolist())) >= 5  # lengths vary
    assert lengths.min() < seq and lengths.max() == seq  # some padded, the long ones truncated (ending in [SEP])
    assert np.sum(ids == UNK) > 0 and np.mean(ids[mask == 1] == UNK) < 0.2  # words, a few rare ones unknown
    # the same ids the user's tokenizer gives (special tokens, truncation), sentence by sentence
    for row, sentence in enumerate(tokenized.sentences()[:8]):
        expected = fast(sentence, truncation=True, max_length=seq)["input_ids"]
        assert ids[row, : len(expected)].tolist() == expected and lengths[row] == len(expected)
    # rows cycle from a start, without the marker (never a model input)
    assert set(inputs_from_npz(path, 4, start=count - 1)) == set(tokenized.INPUT_NAMES)
    # a vocab.txt alone gives the same inputs, and the file's bytes depend on its arrays alone
    only_vocab = tmp_path / "vocab-only"
    only_vocab.mkdir()
    (only_vocab / "vocab.txt").write_bytes((tmp_path / "vocab.txt").read_bytes())
    again = tokenized.tokenized_npz(only_vocab, seq, tmp_path / "again")
    assert again.read_bytes() == path.read_bytes()


def _onnx_encoder(path: Path) -> Path:
    """A stand-in NLP model whose inputs are named unlike the npz's arrays (`ids`, `mask`): bound
    by role. It takes no token type ids."""
    import onnx
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("ids", "mask")]
    output = helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq"])
    nodes = [
        helper.make_node("Mul", ["ids", "mask"], ["kept"]),
        helper.make_node("Cast", ["kept"], ["hidden"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "encoder", inputs, [output])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return path


def test_int8_samples_and_the_agreement_basis_say_tokenized_sentences(tmp_path):
    from engines import ConversionJob
    from engines.quantization import samples_for
    from report.render import rests_on
    from report.table import agreement_basis
    from schemas.combos import ModelFormat, ModelRef, Workload
    from schemas.documents import Agreement

    directory, _ = _saved_tokenizer(tmp_path)
    npz = tokenized.tokenized_npz(directory, 16, tmp_path / "out")
    onnx_path = _onnx_encoder(tmp_path / "encoder.onnx")
    model = ModelRef(
        sha256=hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
        size_bytes=onnx_path.stat().st_size,
        format=ModelFormat.onnx,
        workload=Workload.nlp,
        input_size=[16],
        inputs_sha256=hashlib.sha256(npz.read_bytes()).hexdigest(),
    )
    job = ConversionJob(
        model=model,
        model_path=onnx_path,
        hardware=None,
        batch_size=1,
        target_cpu="",
        out_dir=tmp_path / "job",
        inputs_path=npz,
    )
    samples = samples_for(job)
    assert samples.basis() == {"inputs": TOKENIZED, "samples": 32, "calibration_samples": 32}
    with np.load(npz, allow_pickle=False) as arrays:
        first = arrays["input_ids"][0:1], arrays["attention_mask"][0:1]
    assert list(samples.judged[0]) == ["ids", "mask"]  # what the model's signature asks, by role
    assert np.array_equal(samples.judged[0]["ids"], first[0]) and np.array_equal(samples.judged[0]["mask"], first[1])
    with np.load(npz, allow_pickle=False) as arrays:  # calibrated on the other 32 sentences, judged on the first 32
        assert np.array_equal(np.concatenate([b["ids"] for b in samples.calibration]), arrays["input_ids"][32:64])
    # the reference every measurement's agreement is judged against says so too (run here unsandboxed)
    from services.converter.reference import reference_outputs

    reference_outputs(str(onnx_path), model.model_dump_json(), 1, str(tmp_path / "reference.npz"), str(npz))
    with np.load(tmp_path / "reference.npz", allow_pickle=False) as reference:
        assert (str(reference["basis:inputs"]), int(reference["basis:samples"])) == (TOKENIZED, 32)
        assert np.array_equal(reference["input:ids"], first[0]) and "input:token_type_ids" not in reference.files
    result = SimpleNamespace(agreement=Agreement(score=0.995, metric="min_cosine", samples=32, inputs=TOKENIZED))
    basis = agreement_basis(result)
    assert basis == "tokenized sentences (32)"
    assert "tokenized sentences (32)" in rests_on(basis) and "not your data" in rests_on(basis)


def test_a_directory_of_pickles_and_python_files_is_refused(tmp_path):
    from ayci.cli.console import UsageError
    from ayci.cli.tokenized import tokenized_inputs

    directory = tmp_path / "pickled"
    directory.mkdir()
    (directory / "tokenizer.pkl").write_bytes(pickle.dumps({"vocab": ["[CLS]"]}))
    (directory / "pytorch_model.bin").write_bytes(pickle.dumps([1, 2, 3]))
    (directory / "tokenization_custom.py").write_text("raise SystemExit('never run')\n")
    with pytest.raises(tokenized.TokenizerError, match="never loads pickles") as refused:
        tokenized.load_tokenizer(directory)
    assert "tokenizer.pkl" in str(refused.value) and "tokenizer.json" in str(refused.value)
    args = argparse.Namespace(tokenizer=str(directory), inputs=None, workload="nlp", input_size="16")
    with pytest.raises(UsageError, match="no tokenizer.json or vocab.txt"):
        tokenized_inputs(args)
    with pytest.raises(UsageError, match="not both"):
        tokenized_inputs(argparse.Namespace(**{**vars(args), "inputs": "x.npz"}))


def test_a_tokenizer_file_too_large_is_not_read(tmp_path, monkeypatch):
    directory, _ = _saved_tokenizer(tmp_path)
    monkeypatch.setattr(tokenized, "TOKENIZER_JSON_MAX_BYTES", 100)
    with pytest.raises(tokenized.TokenizerError, match="more than"):
        tokenized.load_tokenizer(directory)
