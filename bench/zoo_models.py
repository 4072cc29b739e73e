"""A zoo of real architectures, built from their libraries' own code with random weights (nothing
downloaded), exported the ways people export them. Used by `bench/bench_zoo.py` (the whole zoo)
and `tests/e2e/test_zoo.py` (a small subset).

Architectures come from transformers: BERT, DistilBERT, RoBERTa, ViT (ViT-B/16's config),
ResNet-50, MobileNetV2, EfficientNet-B0 and the YOLOS detector. torchvision is not used: the
registry's torchvision 0.28.0 wheel is a CUDA build whose operators do not load with the local
CPU torch 2.13.0 ("operator torchvision::nms does not exist"); transformers implements the same
architectures (MobileNetV3 is not among them: MobileNetV2 stands in).

Recipes: `pt2-positional-dynamic`, `pt2-keyword-static`, `onnx-dynamic` (one file) and
`onnx-external-static` (the .onnx and its data in one zip).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RECIPES = ("pt2-positional-dynamic", "pt2-keyword-static", "onnx-dynamic", "onnx-external-static")
DYNAMIC_EXPORT_BATCH = 2  # a batch of 1 would specialize the batch dim
STATIC_EXPORT_BATCH = 1  # what most static exports are: one sample


@dataclass
class ZooModel:
    name: str
    build: Callable[[], object]  # the torch module, eval mode, seeded random weights
    workload: str  # AYCI workload whose inputs it takes (custom: its own .npz)
    input_size: list[int]
    inputs: Callable[[int], dict[str, np.ndarray]]  # example inputs at a batch, by forward's argument names


def _text_inputs(seq: int, vocab: int, with_types: bool = False):
    def make(batch: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        out = {"input_ids": rng.integers(0, vocab, (batch, seq)), "attention_mask": np.ones((batch, seq), np.int64)}
        return out

    return make


def _image_inputs(size: int, name: str = "pixel_values"):
    return lambda batch: {name: np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)}


def _seeded(build):
    def wrapped():
        import torch

        torch.manual_seed(0)
        return build().eval()

    return wrapped


def zoo(full: bool = False) -> list[ZooModel]:
    """The zoo. Text and vision transformers keep their architecture with fewer layers unless
    `full` (BERT-base's 12 layers take TVM minutes to compile on 2 cores)."""
    import transformers as tf

    layers = {} if full else {"num_hidden_layers": 4}
    seq = 64
    return [
        ZooModel(
            "bert", _seeded(lambda: tf.BertModel(tf.BertConfig(**layers))), "nlp", [seq], _text_inputs(seq, 30522)
        ),
        ZooModel(
            "distilbert",
            _seeded(lambda: tf.DistilBertModel(tf.DistilBertConfig(**({} if full else {"n_layers": 4})))),
            "nlp",
            [seq],
            _text_inputs(seq, 30522),
        ),
        ZooModel(
            "roberta",
            _seeded(lambda: tf.RobertaModel(tf.RobertaConfig(**layers))),
            "nlp",
            [seq],
            _text_inputs(seq, 50265),
        ),
        ZooModel(
            "vit-b16",
            _seeded(lambda: tf.ViTForImageClassification(tf.ViTConfig(**layers))),
            "image_classification",
            [224, 224],
            _image_inputs(224),
        ),
        ZooModel(
            "resnet-50",
            _seeded(lambda: tf.ResNetForImageClassification(tf.ResNetConfig())),
            "image_classification",
            [224, 224],
            _image_inputs(224),
        ),
        ZooModel(
            "mobilenet-v2",
            _seeded(lambda: tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config())),
            "image_classification",
            [224, 224],
            _image_inputs(224),
        ),
        ZooModel(
            "efficientnet-b0",
            _seeded(lambda: tf.EfficientNetForImageClassification(tf.EfficientNetConfig())),
            "image_classification",
            [224, 224],
            _image_inputs(224),
        ),
        ZooModel(
            "yolos-tiny",
            _seeded(
                lambda: tf.YolosForObjectDetection(
                    tf.YolosConfig(
                        hidden_size=192,
                        num_hidden_layers=12 if full else 4,
                        num_attention_heads=3,
                        intermediate_size=768,
                        image_size=[256, 256],
                    )
                )
            ),
            "custom",
            [1],
            _image_inputs(256),
        ),
    ]


def export(model: ZooModel, recipe: str, out_dir: Path) -> Path:
    """`model` exported by `recipe` into `out_dir`; raises whatever the exporter raises."""
    import torch

    module = model.build()
    batch_size = DYNAMIC_EXPORT_BATCH if "dynamic" in recipe else STATIC_EXPORT_BATCH
    inputs = {k: torch.from_numpy(v) for k, v in model.inputs(batch_size).items()}
    batch = torch.export.Dim("batch", min=1, max=64)
    out_dir.mkdir(parents=True, exist_ok=True)
    if recipe == "pt2-positional-dynamic":
        program = torch.export.export(module, tuple(inputs.values()), dynamic_shapes=tuple({0: batch} for _ in inputs))
        path = out_dir / f"{model.name}.pt2"
        torch.export.save(program, str(path))
        return path
    if recipe == "pt2-keyword-static":
        program = torch.export.export(module, (), dict(inputs))
        path = out_dir / f"{model.name}-static.pt2"
        torch.export.save(program, str(path))
        return path
    if recipe == "onnx-dynamic":
        path = out_dir / f"{model.name}.onnx"
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            str(path),
            input_names=list(inputs),
            dynamo=True,
            dynamic_shapes=tuple({0: batch} for _ in inputs),
            external_data=False,
            verbose=False,
        )
        return path
    if recipe == "onnx-external-static":
        folder = out_dir / f"{model.name}-external"
        folder.mkdir(exist_ok=True)
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            str(folder / "model.onnx"),
            input_names=list(inputs),
            dynamo=True,
            external_data=True,
            verbose=False,
        )
        bundle = out_dir / f"{model.name}-external.zip"
        with zipfile.ZipFile(bundle, "w") as archive:
            for file in sorted(folder.iterdir()):
                archive.write(file, file.name)
        return bundle
    raise ValueError(f"unknown recipe {recipe}")


def inputs_file(model: ZooModel, out_dir: Path) -> Path | None:
    """The model's own example inputs (.npz) for the custom workload."""
    if model.workload != "custom":
        return None
    path = out_dir / f"{model.name}-inputs.npz"
    np.savez(path, **model.inputs(4))
    return path
