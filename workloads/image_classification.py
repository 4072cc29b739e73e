"""Image classification: ResNet-18 built in code with random weights (nothing downloaded).

Inputs: one float tensor `pixels` [batch, 3, height, width]. Agreement: top-1 agreement with
`base` (the score) and the max absolute difference of the logits.
"""

from __future__ import annotations

import numpy as np

from workloads.agreement import Agreement, max_abs_diff
from workloads.binding import IMAGE

INPUT_NAMES = ["pixels"]
INPUT_ROLES = {"pixels": IMAGE}  # what each input is, to bind it to a model's inputs (workloads/binding.py)
DEFAULT_INPUT_SIZE = [224, 224]


def input_shapes(batch: int, input_size: list[int]) -> dict[str, tuple[tuple[int, ...], str]]:
    height, width = input_size
    return {"pixels": ((batch, 3, height, width), "float32")}


def example_inputs(batch: int, input_size: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    height, width = input_size
    rng = np.random.default_rng(seed)
    return {"pixels": rng.standard_normal((batch, 3, height, width), dtype=np.float32)}


def agreement(reference: list[np.ndarray], outputs: list[np.ndarray]) -> Agreement:
    ref, out = reference[0], outputs[0]
    if ref.shape != out.shape:
        return Agreement(0.0, "top1", {"shape_mismatch": 1.0})
    top1 = float(np.mean(ref.argmax(axis=-1) == out.argmax(axis=-1)))
    return Agreement(top1, "top1", {"max_abs_diff": max_abs_diff(reference, outputs)})


def build_example_model(input_size: list[int] | None = None, num_classes: int = 1000):
    """ResNet-18 (He et al. 2015) with seeded random weights, in eval mode."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
            )
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, pixels):
            x = self.layers(self.stem(pixels))
            return self.fc(torch.flatten(self.pool(x), 1))

    torch.manual_seed(0)
    model = ResNet18()
    with torch.no_grad():  # non-trivial batch-norm statistics, so folding them is exercised
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()
