"""Running the arm (aarch64) runtime path on an x86 machine, under qemu user-mode emulation.

For correctness only, never for timing (emulated ONNX Runtime runs 350-750x slower than native,
TVM kernels 7-10x). The aarch64 root is built by `scripts/arm-sysroot.sh`: a Debian arm64
userland with Python 3.11 and, in `opt/site`, aarch64 wheels of numpy, onnxruntime, the TVM
runtime and pydantic (`engines/__init__.py` imports the schemas). The project's own modules are
imported from the repository itself (pure Python), so the runtime code under test is the same
code the x86 workers run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
QEMU = "qemu-aarch64-static"
QEMU_CPU = "neoverse-n1"  # Graviton2; qemu's default `max` CPU would add SVE


def default_sysroot() -> Path:
    """`$AYCI_ARM_SYSROOT`, or `.arm-sysroot` in the repository (where the script builds it)."""
    return Path(os.environ.get("AYCI_ARM_SYSROOT") or REPO_ROOT / ".arm-sysroot")


def arm_environment(sysroot: Path | str | None = None) -> dict[str, str]:
    """The variables an emulated Python needs: its wheels and the repository on `PYTHONPATH`,
    the emulated CPU, and TVM's runtime-only mode."""
    root = Path(sysroot or default_sysroot())
    return {
        "PYTHONPATH": f"{root / 'opt' / 'site'}:{REPO_ROOT}",
        "QEMU_CPU": QEMU_CPU,
        "QEMU_LD_PREFIX": str(root),
        "TVM_USE_RUNTIME_LIB": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",  # keep aarch64 runs from writing into the repository
    }


def arm_python_command(sysroot: Path | str | None = None) -> list[str]:
    """The argv prefix that runs the aarch64 Python: append a script (or `-c CODE`) and its args.

    Self-contained: it starts with `env VAR=VALUE ...` (see `arm_environment`), so it works with
    any `subprocess` call without extra environment handling."""
    root = Path(sysroot or default_sysroot())
    qemu = shutil.which(QEMU) or QEMU
    variables = [f"{name}={value}" for name, value in arm_environment(root).items()]
    return [
        "env",
        "-u",
        "PYTHONHOME",
        "-u",
        "VIRTUAL_ENV",
        *variables,
        qemu,
        "-L",
        str(root),
        str(root / "usr" / "bin" / "python3"),
    ]


def arm_available(sysroot: Path | str | None = None) -> tuple[bool, str]:
    """Whether the emulated aarch64 Python can run here; if not, the reason (what to install)."""
    root = Path(sysroot or default_sysroot())
    if shutil.which(QEMU) is None:
        return False, f"{QEMU} is not installed (run scripts/arm-sysroot.sh)"
    if not (root / "usr" / "bin" / "python3").exists():
        return False, f"no aarch64 root at {root} (run scripts/arm-sysroot.sh)"
    if not (root / "opt" / "site" / "numpy").is_dir():
        return False, f"the aarch64 root at {root} has no wheels in opt/site (run scripts/arm-sysroot.sh)"
    if not (root / "proc" / "cpuinfo").is_file():
        return (
            False,
            f"the aarch64 root at {root} has no proc/cpuinfo (ONNX Runtime would crash; run scripts/arm-sysroot.sh)",
        )
    try:
        probe = subprocess.run(
            [*arm_python_command(root), "-c", "import platform, numpy; print(platform.machine())"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"the emulated Python did not start: {exc}"
    if probe.returncode != 0 or probe.stdout.strip() != "aarch64":
        return False, f"the emulated Python failed: {(probe.stderr or probe.stdout).strip()[-300:]}"
    return True, "ok"


def run_arm_python(
    args: list[str], sysroot: Path | str | None = None, timeout: float = 1800, cwd: Path | str | None = None
) -> subprocess.CompletedProcess:
    """Run the emulated Python with `args` (a script and its arguments); output captured as text."""
    return subprocess.run(
        [*arm_python_command(sysroot), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
