"""Fixtures shared by all tests: a tiny example model (so tests stay fast on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ayci.logs import configure_logging

configure_logging("console")

TINY_IMAGE_SIZE = [32, 32]


@pytest.fixture(autouse=True)
def _logging_outlives_captured_output():
    """The CLI points the logs at the `sys.stderr` of its call, which is a captured stream
    under `capsys` and closed after the test: point them back at the session's (set up
    first, this is torn down after `capsys`)."""
    yield
    configure_logging("console")


@pytest.fixture(scope="session")
def tiny_image_model(tmp_path_factory) -> Path:
    """The example ResNet-18 exported at 32x32 (real model, small input)."""
    from workloads.examples import export_example

    return export_example("image_classification", TINY_IMAGE_SIZE, tmp_path_factory.mktemp("models") / "resnet18-32.pt2")
