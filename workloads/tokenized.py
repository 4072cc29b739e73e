"""Example inputs from real text: the sentences the project ships (`data/sentences.txt`)
tokenized by the user's own Hugging Face tokenizer (`--tokenizer DIR`).

Only files that carry no code are read: `tokenizer.json` (loaded by the `tokenizers` library's
`Tokenizer.from_file`), or else `vocab.txt` (a BERT WordPiece vocabulary, with
`tokenizer_config.json`'s `do_lower_case` if there is one). Each file's size is checked before
it is read. A directory with neither (only pickles, `.bin` weights or Python files, which
can carry code) is refused, saying so.

The result is an `.npz` of `input_ids`, `attention_mask` and `token_type_ids` (int64, one row
per sentence, padded and truncated to the run's sequence length) plus `TOKENIZED_MARKER` (each
row's sentence number): it travels as the user's `--inputs` do, stored with the run, so the
sandboxed conversion and measurement never need the tokenizer. Binding takes from it what the
model's signature asks for (`workloads/binding.py`); the marker says what the inputs are, so
every agreement says it rests on tokenized sentences (`workloads/agreement.py` `TOKENIZED`).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

SENTENCES_PATH = Path(__file__).parent / "data" / "sentences.txt"
TOKENIZED_MARKER = "ayci_tokenized_sentence"  # not a model input: each row's sentence number in SENTENCES_PATH
TOKENIZER_JSON_MAX_BYTES = 64 << 20  # the largest multilingual tokenizers take about 20 MB
VOCAB_MAX_BYTES = 16 << 20
CONFIG_MAX_BYTES = 1 << 20
CODE_SUFFIXES = (".bin", ".pkl", ".pickle", ".pt", ".pth", ".py", ".pyc", ".ckpt", ".joblib")
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
PAD_TOKENS = ("[PAD]", "<pad>", "<|padding|>")


class TokenizerError(ValueError):
    """The directory holds no tokenizer AYCI reads; the message says why and what to give."""


def sentences(path: Path = SENTENCES_PATH) -> list[str]:
    """The shipped sentences, one a line (blank lines skipped)."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _checked_file(path: Path, limit: int) -> Path:
    if not path.is_file():
        raise TokenizerError(f"{path} is not a regular file")
    size = path.stat().st_size
    if size > limit:
        raise TokenizerError(f"{path} takes {size / (1 << 20):.1f} MB, more than the {limit >> 20} MB AYCI reads")
    return path


def load_tokenizer(directory: Path):
    """A `tokenizers.Tokenizer` from `directory`'s `tokenizer.json`, else its `vocab.txt`
    (BERT WordPiece); `TokenizerError` if it has neither."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TokenizerError(
            f"{directory}: no such directory (give the directory a Hugging Face tokenizer was saved in)"
        )
    try:
        import tokenizers
    except ImportError:
        raise TokenizerError("--tokenizer needs the `tokenizers` package: pip install tokenizers") from None
    if (directory / "tokenizer.json").exists():
        path = _checked_file(directory / "tokenizer.json", TOKENIZER_JSON_MAX_BYTES)
        try:
            return tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # the library says what is wrong with the file
            raise TokenizerError(f"{path} is not a tokenizer the tokenizers library reads: {exc}") from None
    if (directory / "vocab.txt").exists():
        return _wordpiece(directory, tokenizers)
    found = sorted(p.name for p in directory.iterdir())
    code = [name for name in found if name.endswith(CODE_SUFFIXES)]
    held = f" (it holds {', '.join(found[:12])}{', ...' if len(found) > 12 else ''})" if found else " (it is empty)"
    why = (
        ": AYCI never loads pickles, .bin files or Python files, which can carry code"
        if code
        else ": AYCI reads only these code-free formats"
    )
    raise TokenizerError(
        f"{directory} has no tokenizer.json or vocab.txt{held}{why}; save the tokenizer with "
        "`tokenizer.save_pretrained(DIR)` from a fast tokenizer, which writes tokenizer.json"
    )


def _wordpiece(directory: Path, tokenizers):
    """BERT's tokenizer from `vocab.txt`: WordPiece, BERT's normalizer and pre-tokenizer,
    `[CLS] ... [SEP]` around each sentence (what `BertTokenizerFast` builds)."""
    from tokenizers import normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    path = _checked_file(directory / "vocab.txt", VOCAB_MAX_BYTES)
    # as transformers' `load_vocab`: a token's id is its line number (a repeated token, its last)
    vocab = {token.rstrip("\r"): index for index, token in enumerate(path.read_text(encoding="utf-8").split("\n"))}
    vocab.pop("", None)
    lowercase = True
    config = directory / "tokenizer_config.json"
    if config.exists():
        try:
            settings = json.loads(_checked_file(config, CONFIG_MAX_BYTES).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"{config} is not JSON: {exc}") from None
        lowercase = bool(settings.get("do_lower_case", True)) if isinstance(settings, dict) else True
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in vocab]
    if missing:
        raise TokenizerError(f"{path} is not a BERT vocabulary: it lacks {', '.join(missing)}")
    tokenizer = tokenizers.Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return tokenizer


def pad_id(tokenizer) -> int:
    """The id padding takes: the tokenizer's padding setting, else its pad token, else 0."""
    padding = tokenizer.padding
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    for token in PAD_TOKENS:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return 0


def tokenize(tokenizer, sequence_length: int, texts: list[str] | None = None) -> dict[str, np.ndarray]:
    """`texts` (default: the shipped sentences) as `input_ids`, `attention_mask`,
    `token_type_ids` [len(texts), sequence_length] int64: the tokenizer's special tokens
    included, truncated to `sequence_length`, padded after (mask 0)."""
    texts = sentences() if texts is None else texts
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=sequence_length)
    encodings = tokenizer.encode_batch(texts)
    arrays = {name: np.zeros((len(texts), sequence_length), dtype=np.int64) for name in INPUT_NAMES}
    arrays["input_ids"][:] = pad_id(tokenizer)
    for row, encoding in enumerate(encodings):
        length = min(len(encoding.ids), sequence_length)
        arrays["input_ids"][row, :length] = encoding.ids[:length]
        arrays["attention_mask"][row, :length] = encoding.attention_mask[:length]
        arrays["token_type_ids"][row, :length] = encoding.type_ids[:length]
    return arrays


def write_npz(arrays: dict[str, np.ndarray], path: Path) -> Path:
    """`arrays` and `TOKENIZED_MARKER` as an `.npz` whose bytes depend on the arrays alone (no
    timestamps), so the same tokenizer and length make the same stored inputs, run after run."""
    rows = len(next(iter(arrays.values())))
    every = {**arrays, TOKENIZED_MARKER: np.arange(rows, dtype=np.int64)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, value in every.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(value), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())
    return path


def tokenized_npz(directory: Path, sequence_length: int, out_dir: Path) -> Path:
    """The shipped sentences tokenized by the tokenizer in `directory`, written under `out_dir`."""
    import hashlib

    arrays = tokenize(load_tokenizer(directory), sequence_length)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in arrays.values())).hexdigest()[:16]
    return write_npz(arrays, Path(out_dir) / f"tokenized-{sequence_length}-{digest}.npz")
