"""The sandbox (`measuring/sandbox.py`): what a child that touches a user's model gets, and
how its death is reported while the parent lives on."""

from __future__ import annotations

import os
import socket
import time

import pytest

from measuring import sandbox

LIMITS = sandbox.SandboxLimits(wall_s=60, address_space_mb=2048)


# --- what the sandboxed child runs (imported there by name) ---
def what_the_child_sees() -> dict:
    network = "reachable"
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    except OSError as exc:
        network = f"unreachable: {exc}"
    return {"env": dict(os.environ), "uid": os.getuid(), "cwd": os.getcwd(), "network": network}


def allocate(mb: int) -> int:
    return len(bytearray(mb << 20))


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def spin() -> None:
    while True:
        pass


def plant_link(target: str) -> None:
    os.symlink(target, "out.txt")


def raise_value_error() -> None:
    raise ValueError("the model's own error")


# --- the tests ---
def test_the_child_gets_no_secret_of_the_parent(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    monkeypatch.setenv("AYCI_API_KEYS", "secret-key:owner")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    with sandbox.Workspace.create() as workspace:
        seen = sandbox.call("tests.unit.test_sandbox:what_the_child_sees", {}, LIMITS, workspace)
    values = " ".join(seen["env"].values())
    assert not [name for name in seen["env"] if name.startswith(("AWS_", "AYCI_API")) or "KEY" in name]
    assert "EXAMPLEKEY" not in values and "secret" not in values
    assert seen["env"]["HOME"] == seen["cwd"] == str(workspace.path)
    if os.geteuid() == 0:  # root: another user, and a network of its own with nothing up
        assert seen["uid"] != 0
        assert seen["network"].startswith("unreachable")


def test_a_child_past_its_address_space_fails_as_out_of_memory_and_the_parent_lives():
    with sandbox.Workspace.create() as workspace, pytest.raises(sandbox.SandboxFailed) as failed:
        sandbox.call("tests.unit.test_sandbox:allocate", {"mb": 4096}, LIMITS, workspace)
    assert failed.value.kind == "memory"
    assert "out of memory at 2048 MB" in failed.value.reason
    with sandbox.Workspace.create() as workspace:  # the parent goes on
        assert sandbox.call("tests.unit.test_sandbox:allocate", {"mb": 16}, LIMITS, workspace) == 16 << 20


def test_a_child_past_its_wall_clock_limit_is_killed_with_the_reason():
    started = time.monotonic()
    with sandbox.Workspace.create() as workspace, pytest.raises(sandbox.SandboxFailed) as failed:
        sandbox.call("tests.unit.test_sandbox:sleep", {"seconds": 60}, sandbox.SandboxLimits(wall_s=2), workspace)
    assert failed.value.kind == "time" and "timed out after 2 s" in failed.value.reason
    assert time.monotonic() - started < 20


def test_a_child_past_its_cpu_time_is_killed_with_the_reason():
    with sandbox.Workspace.create() as workspace, pytest.raises(sandbox.SandboxFailed) as failed:
        sandbox.call("tests.unit.test_sandbox:spin", {}, sandbox.SandboxLimits(wall_s=120, cpu_s=2), workspace)
    assert failed.value.kind == "cpu" and "CPU time limit of 2 s" in failed.value.reason


def test_the_parent_takes_back_no_link_the_child_planted():
    with sandbox.Workspace.create() as workspace:
        sandbox.call("tests.unit.test_sandbox:plant_link", {"target": "/etc/hostname"}, LIMITS, workspace)
        with pytest.raises(sandbox.SandboxFailed, match="left a link"):
            workspace.take("out.txt")


def test_the_childs_own_error_is_raised_as_the_callers_with_its_message():
    with sandbox.Workspace.create() as workspace, pytest.raises(KeyError) as failed:
        sandbox.call(
            "tests.unit.test_sandbox:raise_value_error",
            {},
            LIMITS,
            workspace,
            raise_as=KeyError,
            expected=("ValueError",),
        )
    assert failed.value.args[0] == "the model's own error"
