"""Each workload: example inputs, the example model's outputs, and an agreement metric that
notices a perturbed output."""

from __future__ import annotations

import numpy as np
import pytest

from workloads import image_classification, nlp, object_detection, workload_module

SMALL = {"image_classification": [32, 32], "nlp": [16], "object_detection": [64, 64]}


@pytest.mark.parametrize("workload", sorted(SMALL))
def test_module_interface(workload):
    module = workload_module(workload)
    for name in ("INPUT_NAMES", "DEFAULT_INPUT_SIZE", "example_inputs", "agreement", "build_example_model"):
        assert hasattr(module, name), name
    inputs = module.example_inputs(3, SMALL[workload])
    assert list(inputs) == module.INPUT_NAMES
    assert all(value.shape[0] == 3 for value in inputs.values())
    again = module.example_inputs(3, SMALL[workload])
    assert all(np.array_equal(inputs[k], again[k]) for k in inputs)  # seeded
    if hasattr(module, "dynamic_shapes"):
        assert set(module.dynamic_shapes("B")) == set(module.INPUT_NAMES)


def test_nlp_inputs():
    inputs = nlp.example_inputs(4, [16])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    assert ids.shape == mask.shape == (4, 16)
    assert ids.dtype == mask.dtype == np.int64
    assert set(np.unique(mask)) <= {0, 1}
    assert (ids < nlp.VOCAB_SIZE).all() and (ids >= 0).all()
    assert (ids[:, 0] == nlp.CLS).all() and mask[:, 0].all()  # every sample starts with [CLS]


def test_nlp_inputs_look_like_text():
    """[CLS] words [SEP] then padding, lengths varied, word ids frequency-shaped (Zipf): the
    most frequent ids recur, as "the" and "of" do in tokenized text."""
    inputs = nlp.example_inputs(32, [128])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    lengths = mask.sum(axis=1)
    assert len(set(lengths.tolist())) > 8 and lengths.max() < 128  # varied, padded
    for row, length in zip(ids, lengths, strict=True):
        assert row[length - 1] == nlp.SEP and (row[length:] == nlp.PAD).all()
    assert (np.diff(mask, axis=1) <= 0).all()  # ones then zeros
    words = ids[mask.astype(bool) & (ids != nlp.CLS) & (ids != nlp.SEP)]
    _, counts = np.unique(words, return_counts=True)
    assert counts.max() >= 0.05 * words.size  # the most frequent word is common, as "the" is


def test_nlp_agreement_detects_perturbation():
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((2, 16, nlp.HIDDEN)).astype(np.float32)
    pooled = rng.standard_normal((2, nlp.HIDDEN)).astype(np.float32)
    same = nlp.agreement([hidden, pooled], [hidden.copy(), pooled.copy()])
    assert same.score == pytest.approx(1.0) and same.details["max_abs_diff"] == 0.0
    noisy = hidden.copy()
    noisy[1] += rng.standard_normal(noisy[1].shape).astype(np.float32)  # only the second sample
    worse = nlp.agreement([hidden, pooled], [noisy, pooled])
    assert worse.score < 0.9 and worse.details["mean_cosine"] > worse.score
    assert nlp.agreement([hidden, pooled], [hidden[:1], pooled]).score == 0.0  # wrong shape


def test_image_agreement_detects_perturbation():
    logits = np.random.default_rng(2).standard_normal((4, 10)).astype(np.float32)
    assert image_classification.agreement([logits], [logits.copy()]).score == 1.0
    flipped = logits.copy()
    flipped[0, (logits[0].argmax() + 1) % 10] = logits[0].max() + 1
    assert image_classification.agreement([logits], [flipped]).score == 0.75


def _detections():
    boxes = np.zeros((2, 100, 4), np.float32)
    scores = np.zeros((2, 100), np.float32)
    labels = np.zeros((2, 100), np.int64)
    boxes[:, :3] = [[0, 0, 10, 10], [20, 20, 40, 40], [5, 30, 25, 60]]
    scores[:, :3] = [0.9, 0.8, 0.3]
    labels[:, :3] = [1, 2, 1]
    return [boxes, scores, labels]


def test_detection_agreement():
    reference = _detections()
    same = object_detection.agreement(reference, [x.copy() for x in reference])
    assert same.score == pytest.approx(1.0) and same.details["max_score_diff"] == 0.0
    # The same detections in another order (slots are not compared one by one).
    order = np.array([2, 0, 1, *range(3, 100)])
    shuffled = [x[:, order] for x in reference]
    assert object_detection.agreement(reference, shuffled).score == pytest.approx(1.0)
    moved = [x.copy() for x in reference]
    moved[0][0, 1] += 10.0  # shift one box by half its size
    assert object_detection.agreement(reference, moved).score < 0.95
    relabelled = [x.copy() for x in reference]
    relabelled[2][1, 0] = 7  # a detection of another class matches nothing
    assert object_detection.agreement(reference, relabelled).score < 0.9
    empty = [reference[0], np.zeros_like(reference[1]), reference[2]]
    assert object_detection.agreement(reference, empty).score == 0.0


def test_example_models_run_and_keep_fixed_shapes():
    import torch

    for workload, size in SMALL.items():
        module = workload_module(workload)
        model = module.build_example_model(size)
        inputs = {k: torch.from_numpy(v) for k, v in module.example_inputs(2, size).items()}
        with torch.inference_mode():
            out = model(**inputs)
        outputs = out if isinstance(out, tuple) else (out,)
        if workload == "nlp":
            assert outputs[0].shape == (2, 16, nlp.HIDDEN) and outputs[1].shape == (2, nlp.HIDDEN)
        if workload == "object_detection":
            boxes, scores, labels = outputs
            assert boxes.shape == (2, 100, 4) and scores.shape == (2, 100) and labels.shape == (2, 100)
            _assert_nms_applied(boxes.numpy(), scores.numpy(), labels.numpy())


def _assert_nms_applied(boxes, scores, labels):
    """No two kept detections of one class overlap more than the NMS threshold, and scores are sorted."""
    for image in range(boxes.shape[0]):
        kept = scores[image] > 0
        assert kept.any()
        assert np.all(np.diff(scores[image]) <= 1e-7)
        iou = object_detection.box_iou(boxes[image][kept], boxes[image][kept])
        same = labels[image][kept][:, None] == labels[image][kept][None, :]
        np.fill_diagonal(iou, 0.0)
        assert np.max(np.where(same, iou, 0.0)) <= object_detection.IOU_THRESHOLD + 1e-5


def test_nlp_padding_does_not_change_real_tokens():
    """A sample padded from 10 to 16 tokens (other token ids in the padded positions) gives its 10
    real tokens the outputs of the same 10 tokens unpadded: padding is masked out of attention."""
    import torch

    model = nlp.build_example_model([16])
    real = 10
    ids = nlp.example_inputs(1, [16])["input_ids"]
    padded = np.repeat(ids, 2, axis=0)
    padded[1, real:] = np.arange(2000, 2000 + 16 - real)  # other tokens where the mask says padding
    mask = np.ones_like(padded)
    mask[:, real:] = 0
    assert not mask[:, real:].any() and (padded[0, real:] != padded[1, real:]).all()  # padding happens
    with torch.inference_mode():
        hidden, pooled = (t.numpy() for t in model(torch.from_numpy(padded), torch.from_numpy(mask)))
        alone, alone_pooled = (
            t.numpy() for t in model(torch.from_numpy(ids[:, :real].copy()), torch.from_numpy(mask[:1, :real].copy()))
        )
    for sample in range(2):
        np.testing.assert_allclose(hidden[sample, :real], alone[0], atol=1e-4)
        np.testing.assert_allclose(pooled[sample], alone_pooled[0], atol=1e-4)


def test_nlp_agreement_counts_only_the_tokens_the_mask_keeps():
    """Given the inputs, a difference at padded positions (which no one reads) does not count;
    at a kept token it does; judged over batches, each batch's mask goes with its outputs."""
    from workloads.agreement import over_batches

    rng = np.random.default_rng(3)
    hidden = rng.standard_normal((2, 8, nlp.HIDDEN)).astype(np.float32)
    pooled = rng.standard_normal((2, nlp.HIDDEN)).astype(np.float32)
    mask = np.array([[1] * 8, [1] * 3 + [0] * 5], dtype=np.int64)
    inputs = {"input_ids": np.ones((2, 8), np.int64), "attention_mask": mask}
    moved = hidden.copy()
    moved[1, 3:] = -moved[1, 3:]  # only the second sample's padding
    assert nlp.agreement([hidden, pooled], [moved, pooled]).score < 0.9
    assert nlp.agreement([hidden, pooled], [moved, pooled], inputs=inputs).score == pytest.approx(1.0)
    moved[1, 2] = -moved[1, 2]  # a kept token
    assert nlp.agreement([hidden, pooled], [moved, pooled], inputs=inputs).score < 0.9
    batches = [{k: v[i : i + 1] for k, v in inputs.items()} for i in range(2)]
    padded_only = hidden.copy()
    padded_only[1, 3:] = 0
    joined = over_batches(
        nlp.agreement,
        [[hidden[i : i + 1], pooled[i : i + 1]] for i in range(2)],
        [[padded_only[i : i + 1], pooled[i : i + 1]] for i in range(2)],
        samples=2,
        inputs="synthetic",
        fed=batches,
    )
    assert joined.score == pytest.approx(1.0) and (joined.samples, joined.inputs) == (2, "synthetic")
