"""A worker process: `python -m serving.worker SOCKET SPEC.json`.

Started (and confined to its combination's memory size) by `processes.py`. It connects to the
endpoint, loads the artifact with its engine's `load()` (the engine's runtime only, as a
measuring process does), runs the reference inputs once (a measured cold start ends with the
first answer too), says it is ready, then answers one request at a time: `.npz` inputs in the
model's order, `.npz` outputs (`output:{i}`) back, or the model's error.
"""

import time

_STARTED = time.time()

import json  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import engines  # noqa: E402


def main(address: str, spec_path: str) -> None:
    from serving import wire

    spec = json.loads(Path(spec_path).read_text())
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    connected = time.time()
    artifact = Path(spec["artifact_path"])
    engine = engines.module(spec["optimizer"])
    engine.import_runtime(artifact)
    imported = time.time()
    settings = spec.get("settings")
    run = (
        engine.load(artifact, int(spec["threads"]), settings=settings)
        if settings
        else engine.load(artifact, int(spec["threads"]))
    )
    loaded = time.time()
    if spec.get("reference_path"):
        from measuring.measure import read_reference

        run(read_reference(spec["reference_path"])[0])
    ready = time.time()
    steps = {  # ms: this module's start to connected, the runtime's import, the load and the first answer
        "connect": (connected - _STARTED) * 1000,
        "import": (imported - connected) * 1000,
        "load": (loaded - imported) * 1000,
        "first_answer": (ready - loaded) * 1000,
    }
    wire.send(sock, wire.READY, json.dumps({"load_ms": (ready - _STARTED) * 1000, "steps": steps}).encode())
    while True:
        try:
            kind, body = wire.receive(sock)
        except ConnectionError:
            return  # the endpoint closed it: stop
        try:
            outputs = run(wire.unpack(body))
            reply = wire.pack({f"output:{i}": o for i, o in enumerate(outputs)})
        except Exception as exc:  # the model's own error: answered, the worker lives on
            wire.send(sock, wire.ERROR, f"{type(exc).__name__}: {exc}".encode()[:4000])
            continue
        wire.send(sock, wire.OUTPUT, reply)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
