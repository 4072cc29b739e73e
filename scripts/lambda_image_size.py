"""Estimate the AYCI Lambda container image's size from what is installed here.

This machine has no Docker engine, so the image (`infra/lambda.Dockerfile`) cannot be built
here. What it adds to the base image is, almost all of it, the wheels of `requirements.txt`
and their dependencies: this sums the installed files of that closure (each distribution's
RECORD) in this Python (x86_64; the arm64 image installs the same versions' aarch64 wheels,
whose sizes differ a little), and AYCI's own code. The base image and the compiler the
converter links TVM libraries with are not installed here: their sizes are stated, not measured.

    .venv/bin/python scripts/lambda_image_size.py [--json]
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("adapters", "ayci", "core", "data", "engines", "measuring", "report", "schemas", "services", "workloads")
LAMBDA_IMAGE_LIMIT_MB = 10240  # Lambda's limit on a container image, uncompressed
# Not measurable here (no Docker, no pull): public.ecr.aws/lambda/python:3.12 (Amazon Linux 2023,
# Python 3.12, the runtime interface client, boto3) is about half a gigabyte uncompressed, and
# gcc + gcc-c++ from Amazon Linux 2's repositories (TVM links its libraries with them) about 0.2 GB.
STATED_MB = {
    "base image public.ecr.aws/lambda/python:3.12 (stated, not measured)": 550,
    "gcc, gcc-c++ for TVM's linking (stated, not measured)": 200,
}


def _name(requirement: str) -> str | None:
    requirement = requirement.split("#", 1)[0].strip()
    if not requirement or requirement.startswith("-"):
        return None
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: Path) -> dict[str, metadata.Distribution]:
    """The installed distributions `requirements` needs, with their dependencies (extras and
    markers that do not apply here are left out)."""
    wanted = [n for n in (_name(line) for line in requirements.read_text().splitlines()) if n]
    found: dict[str, metadata.Distribution] = {}
    while wanted:
        name = _canonical(wanted.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = dist
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            marker = requirement.split(";", 1)[1] if ";" in requirement else ""
            if marker:
                from packaging.markers import Marker

                if not Marker(marker).evaluate():
                    continue
            dependency = _name(requirement)
            if dependency:
                wanted.append(dependency)
    return found


def installed_mb(dist: metadata.Distribution) -> float:
    total = 0
    for file in dist.files or []:
        path = Path(dist.locate_file(file))
        if path.is_file():
            total += path.stat().st_size
    return total / (1 << 20)


def estimate() -> dict:
    dists = closure(ROOT / "requirements.txt")
    packages = sorted(((name, installed_mb(dist)) for name, dist in dists.items()), key=lambda item: -item[1])
    code = sum(
        p.stat().st_size
        for d in CODE_DIRS
        for p in (ROOT / d).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ) / (1 << 20)
    wheels = sum(size for _, size in packages)
    total = wheels + code + sum(STATED_MB.values())
    return {
        "python": sys.version.split()[0],
        "distributions": len(packages),
        "largest_mb": {name: round(size) for name, size in packages[:8]},
        "wheels_mb": round(wheels),
        "ayci_code_mb": round(code, 1),
        "stated_mb": STATED_MB,
        "estimated_image_mb": round(total),
        "lambda_limit_mb": LAMBDA_IMAGE_LIMIT_MB,
    }


def main(argv: list[str]) -> None:
    figures = estimate()
    if "--json" in argv:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"requirements.txt installs {figures['distributions']} distributions: {figures['wheels_mb']:,} MB (measured "
        f"here, Python {figures['python']}, x86_64)"
    )
    for name, size in figures["largest_mb"].items():
        print(f"  {name:<24} {size:>6,} MB")
    print(f"AYCI's code: {figures['ayci_code_mb']} MB")
    for what, size in figures["stated_mb"].items():
        print(f"{what}: ~{size} MB")
    print(
        f"estimated image: ~{figures['estimated_image_mb']:,} MB uncompressed per architecture (Lambda allows "
        f"{figures['lambda_limit_mb']:,} MB)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
