"""Object detection: a small single-stage detector built in code with seeded random weights.

Input: one float tensor `pixels` [batch, 3, height, width] (height and width multiples of 16).
The model's forward does the whole post-processing, in plain torch ops so that it exports with
torch.export and ONNX (no torchvision): decode the boxes of 3 anchors per cell of a stride-16
grid, score = objectness x best class, keep the top 300 candidates, class-aware NMS (IoU 0.5),
then the top 100 detections. Outputs, fixed shapes: `boxes` float [batch, 100, 4] (x1, y1, x2,
y2 in pixels), `scores` float [batch, 100] (0 for padding and suppressed slots), `labels`
int64 [batch, 100].

NMS is Cluster-NMS (Zheng et al. 2020): Fast-NMS's matrix form iterated, each pass suppressing
only with the boxes still kept. At its fixed point it equals greedy NMS; the model runs a fixed
number of passes (4), which is exact whenever suppression chains are at most that deep.

Agreement: detections are matched by IoU, not by slot (two engines may order equal scores
differently). For each reference detection with a score above 0.05, the best IoU with an output
detection of the same class; the score is the mean of those (1.0 if identical), with the max
score difference of the matched pairs as a detail.
"""

from __future__ import annotations

import numpy as np

from workloads.agreement import Agreement
from workloads.binding import IMAGE

INPUT_NAMES = ["pixels"]
INPUT_ROLES = {"pixels": IMAGE}  # what each input is, to bind it to a model's inputs (workloads/binding.py)
DEFAULT_INPUT_SIZE = [256, 256]
NUM_CLASSES = 20
ANCHORS = ((24.0, 24.0), (48.0, 32.0), (32.0, 64.0))  # (width, height) in pixels
STRIDE = 16
PRE_NMS_TOP_K = 300
MAX_DETECTIONS = 100
IOU_THRESHOLD = 0.5
NMS_PASSES = 4
SCORE_FLOOR = 0.05  # detections below it are not compared


def input_shapes(batch: int, input_size: list[int]) -> dict[str, tuple[tuple[int, ...], str]]:
    height, width = input_size
    return {"pixels": ((batch, 3, height, width), "float32")}


def example_inputs(batch: int, input_size: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    height, width = input_size
    rng = np.random.default_rng(seed)
    return {"pixels": rng.standard_normal((batch, 3, height, width), dtype=np.float32)}


def dynamic_shapes(batch_dim) -> dict[str, dict[int, object]]:
    """`torch.export` dynamic shapes with a dynamic batch (axis 0)."""
    return {"pixels": {0: batch_dim}}


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` [n, 4] with every box in `b` [m, 4] (x1, y1, x2, y2) -> [n, m]."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def agreement(reference: list[np.ndarray], outputs: list[np.ndarray]) -> Agreement:
    if len(outputs) != 3 or any(r.shape != o.shape for r, o in zip(reference, outputs, strict=False)):
        return Agreement(0.0, "mean_matched_iou", {"shape_mismatch": 1.0})
    ref_boxes, ref_scores, ref_labels = (np.asarray(x) for x in reference)
    boxes, scores, labels = (np.asarray(x) for x in outputs)
    ious: list[float] = []
    score_diffs: list[float] = [0.0]
    for image in range(ref_boxes.shape[0]):
        wanted = ref_scores[image] > SCORE_FLOOR
        present = scores[image] > SCORE_FLOOR
        if not wanted.any():
            ious.append(1.0 if not present.any() else 0.0)
            continue
        if not present.any():
            ious.extend([0.0] * int(wanted.sum()))
            continue
        iou = box_iou(ref_boxes[image][wanted].astype(np.float64), boxes[image][present].astype(np.float64))
        same_class = ref_labels[image][wanted][:, None] == labels[image][present][None, :]
        iou = np.where(same_class, iou, 0.0)
        best = iou.argmax(axis=1)
        ious.extend(iou.max(axis=1).tolist())
        score_diffs.extend(np.abs(ref_scores[image][wanted] - scores[image][present][best]).tolist())
    score = float(np.mean(ious)) if ious else 1.0
    return Agreement(
        score,
        "mean_matched_iou",
        {"max_score_diff": float(max(score_diffs)), "matched": float(len(ious))},
    )


def build_example_model(input_size: list[int] | None = None):
    """The detector for images of `input_size` ([height, width]); seeded, in eval mode."""
    import torch
    from torch import nn

    height, width = input_size or DEFAULT_INPUT_SIZE
    if height % STRIDE or width % STRIDE:
        raise ValueError(f"the example detector needs height and width that are multiples of {STRIDE}")
    rows, cols, anchors = height // STRIDE, width // STRIDE, len(ANCHORS)
    candidates = rows * cols * anchors
    pre_nms = min(PRE_NMS_TOP_K, candidates)

    def conv(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
        )

    class Detector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(
                conv(3, 16, 2),
                conv(16, 32, 2),
                conv(32, 32, 1),
                conv(32, 64, 2),
                conv(64, 64, 1),
                conv(64, 128, 2),
                conv(128, 128, 1),
            )
            self.head = nn.Conv2d(128, anchors * (5 + NUM_CLASSES), 1)
            # Cell centres and anchor sizes, per candidate, in the order the head's output is flattened.
            ys, xs = torch.meshgrid(
                torch.arange(rows, dtype=torch.float32), torch.arange(cols, dtype=torch.float32), indexing="ij"
            )
            centres = torch.stack([(xs + 0.5) * STRIDE, (ys + 0.5) * STRIDE], dim=-1).reshape(rows * cols, 1, 2)
            sizes = torch.tensor(ANCHORS, dtype=torch.float32).reshape(1, anchors, 2)
            self.register_buffer("centres", centres.expand(rows * cols, anchors, 2).reshape(-1, 2).clone())
            self.register_buffer("sizes", sizes.expand(rows * cols, anchors, 2).reshape(-1, 2).clone())
            # Class-aware NMS: boxes of different classes are shifted apart so they never overlap.
            self.class_offset = float(max(height, width) * 2)

        def forward(self, pixels):
            batch = pixels.shape[0]
            raw = self.head(self.backbone(pixels))  # [B, A*(5+C), rows, cols]
            raw = raw.permute(0, 2, 3, 1).reshape(batch, candidates, 5 + NUM_CLASSES)
            # Decode (YOLO-style): centre offset within the cell, size relative to the anchor.
            centre = self.centres + (torch.sigmoid(raw[..., 0:2]) * 2.0 - 1.0) * STRIDE
            size = self.sizes * torch.exp(torch.clamp(raw[..., 2:4], -4.0, 4.0))
            boxes = torch.cat([centre - size / 2, centre + size / 2], dim=-1)
            boxes = torch.stack(
                [
                    boxes[..., 0].clamp(0, width),
                    boxes[..., 1].clamp(0, height),
                    boxes[..., 2].clamp(0, width),
                    boxes[..., 3].clamp(0, height),
                ],
                dim=-1,
            )
            class_scores, labels = torch.sigmoid(raw[..., 5:]).max(dim=-1)
            scores = torch.sigmoid(raw[..., 4]) * class_scores  # [B, N]

            scores, order = torch.topk(scores, pre_nms, dim=1)  # sorted, highest first
            boxes = torch.gather(boxes, 1, order.unsqueeze(-1).expand(batch, pre_nms, 4))
            labels = torch.gather(labels, 1, order)

            shifted = boxes + (labels.to(boxes.dtype) * self.class_offset).unsqueeze(-1)
            top_left = torch.maximum(shifted[:, :, None, :2], shifted[:, None, :, :2])
            bottom_right = torch.minimum(shifted[:, :, None, 2:], shifted[:, None, :, 2:])
            overlap = torch.clamp(bottom_right - top_left, min=0.0)
            inter = overlap[..., 0] * overlap[..., 1]
            area = (shifted[..., 2] - shifted[..., 0]) * (shifted[..., 3] - shifted[..., 1])
            iou = inter / torch.clamp(area[:, :, None] + area[:, None, :] - inter, min=1e-6)
            # iou[b, i, j] for i ranked above j only (upper triangle).
            iou = torch.triu(iou, diagonal=1)
            keep = torch.ones_like(scores)
            for _ in range(NMS_PASSES):  # Cluster-NMS: suppress only with boxes still kept
                worst = (iou * keep.unsqueeze(-1)).max(dim=1).values
                keep = (worst <= IOU_THRESHOLD).to(scores.dtype)
            scores = scores * keep

            final = min(MAX_DETECTIONS, pre_nms)
            scores, order = torch.topk(scores, final, dim=1)
            boxes = torch.gather(boxes, 1, order.unsqueeze(-1).expand(batch, final, 4))
            labels = torch.gather(labels, 1, order)
            if final < MAX_DETECTIONS:  # fixed output shapes: pad with empty detections
                pad = MAX_DETECTIONS - final
                boxes = torch.cat([boxes, boxes.new_zeros(batch, pad, 4)], dim=1)
                scores = torch.cat([scores, scores.new_zeros(batch, pad)], dim=1)
                labels = torch.cat([labels, labels.new_zeros(batch, pad)], dim=1)
            return boxes, scores, labels

    torch.manual_seed(0)
    model = Detector()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
        # A spread of objectness: a few confident cells, most not (as a trained detector gives).
        model.head.weight.mul_(0.5)
    return model.eval()
