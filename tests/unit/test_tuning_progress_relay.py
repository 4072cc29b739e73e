"""Tuning runs in the conversion's sandbox; its progress reaches the converter's process as lines,
and the converter logs them as `tvm.tuning.progress`, the event the CLI's tuning bar follows."""

import structlog
from structlog.testing import capture_logs

from services.converter.handlers import TUNING_PROGRESS, _progress


class CountingLease:
    def __init__(self) -> None:
        self.renewals = 0

    def renew(self) -> bool:
        self.renewals += 1
        return True


def test_tuning_lines_from_the_sandbox_become_progress_events_and_renew_the_lease():
    lease = CountingLease()
    bound = structlog.get_logger()
    with capture_logs() as logs:
        _progress(lease, bound, "tvm: tuned 64/600 trials", "intel/tvm/b1")
        _progress(lease, bound, "tvm: tuned 128/600 trials, best 23.281 ms", "intel/tvm/b1")
        _progress(lease, bound, "onnx: optimized", "intel/tvm/b1")
    events = [e for e in logs if e["event"] == TUNING_PROGRESS]
    assert [(e["trials_done"], e["trials_total"], e["best_ms"]) for e in events] == [
        (64, 600, None),
        (128, 600, 23.281),
    ]
    assert {e["label"] for e in events} == {"intel/tvm/b1"}
    assert [e["message"] for e in logs if e["event"] == "conversion_progress"] == ["onnx: optimized"]
    assert lease.renewals == 3
