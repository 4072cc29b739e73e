"""engines.tvm.logs: what TVM writes while it converts goes to the run's log file (no TVM needed)."""

from __future__ import annotations

import os
import warnings

from engines.tvm import logs


def test_stderr_and_python_warnings_go_to_the_run_log_while_tvm_converts(tmp_path, capfd):
    run_log, default = tmp_path / "run.log", tmp_path / "work" / "tvm.log"
    logs.send_output_to(run_log)
    try:
        with logs.captured(default) as used:
            os.write(2, b"[12:00:00] transform.h:1: Warning: as TVM's C++ code writes it\n")
            warnings.warn("a library's warning", UserWarning, stacklevel=1)
    finally:
        logs.send_output_to(None)
    os.write(2, b"after the conversion\n")
    _, err = capfd.readouterr()
    assert used == run_log and not default.exists()
    assert "C++" not in err and "library's warning" not in err and "after the conversion" in err
    logged = run_log.read_text()
    assert "as TVM's C++ code writes it" in logged and "a library's warning" in logged


def test_without_a_run_log_warnings_go_to_the_work_dir_and_stderr_is_left_alone(tmp_path, capfd):
    default = tmp_path / "work" / "tvm.log"
    with logs.captured(default) as used:
        os.write(2, b"a service's own log line\n")
        warnings.warn("a library's warning", UserWarning, stacklevel=1)
    _, err = capfd.readouterr()
    assert used == default and "a service's own log line" in err and "library's warning" not in err
    assert "a library's warning" in default.read_text()
