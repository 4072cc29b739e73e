"""Confinement's arithmetic and its cgroup files, on a fake /proc and cgroup tree (the real
kernel is exercised in tests/integration/test_confinement.py)."""

import math
import subprocess
import sys
import textwrap
import time

import pytest

from core import measurement_lock
from measuring.confinement import ConfinementUnavailable, Limits, MeasurementGroup, find_hierarchy
from measuring.launcher import MeasureSpec
from schemas.lambda_limits import lambda_vcpus


def test_lambda_cpu_share_follows_memory():
    assert lambda_vcpus(1769) == 1.0
    assert lambda_vcpus(885) == pytest.approx(0.5, abs=1e-3)
    assert lambda_vcpus(10240) == pytest.approx(5.79, abs=0.01)  # "about 1 per 1,769 MB, up to 6"
    assert lambda_vcpus(20000) == 6.0
    assert Limits.for_memory(885).cpu_quota_us == round(885 / 1769 * 100_000)
    assert Limits.for_memory(128).cpu_quota_us == round(128 / 1769 * 100_000)
    assert Limits.for_memory(128).memory_bytes == 128 * 2**20


@pytest.mark.parametrize("memory, threads", [(128, 1), (885, 1), (1769, 1), (3000, 1), (3538, 2)])
def test_threads_follow_whole_vcpus(memory, threads, monkeypatch):
    monkeypatch.setattr("measuring.launcher.host_cores", lambda: 8)
    spec = MeasureSpec(
        optimizer="onnx", workload="image_classification", artifact_path=None, reference_path=None, memory_mb=memory
    )
    assert spec.threads == threads


def test_threads_never_exceed_the_machine(monkeypatch):
    monkeypatch.setattr("measuring.launcher.host_cores", lambda: 2)
    spec = MeasureSpec(
        optimizer="onnx", workload="image_classification", artifact_path=None, reference_path=None, memory_mb=10240
    )
    assert spec.threads == 2 and math.isclose(spec.vcpus, 10240 / 1769)


def fake_proc(tmp_path, mountinfo: str, cgroup: str):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(textwrap.dedent(mountinfo).replace("ROOT", str(tmp_path)))
    (proc / "cgroup").write_text(textwrap.dedent(cgroup))
    return proc


def test_v1_groups_nest_under_this_process_own_groups(tmp_path):
    proc = fake_proc(
        tmp_path,
        """\
        32 31 0:29 / ROOT/cg/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
        34 31 0:31 / ROOT/cg/cpuset rw,relatime - cgroup cgroup rw,cpuset
        35 31 0:32 / ROOT/cg/memory rw,relatime - cgroup cgroup rw,memory
        41 31 0:38 / ROOT/cg/unified rw,relatime - cgroup2 cgroup2 rw
        """,
        "4:memory:/jobs/42\n3:cpuset:/\n1:cpu,cpuacct:/\n0::/\n",
    )
    for d in ("cg/cpu,cpuacct", "cg/memory/jobs/42", "cg/unified"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "cg/unified/cgroup.controllers").write_text("hugetlb\n")  # v2 without cpu/memory: not usable
    hierarchy = find_hierarchy(proc)
    assert hierarchy.version == 1
    assert hierarchy.cpu_parent == tmp_path / "cg/cpu,cpuacct"
    assert hierarchy.memory_parent == tmp_path / "cg/memory/jobs/42"
    group = MeasurementGroup.create(Limits.for_memory(885), hierarchy)
    assert (group.cpu_dir / "cpu.cfs_quota_us").read_text() == "50028"
    assert (group.cpu_dir / "cpu.cfs_period_us").read_text() == "100000"
    assert (group.memory_dir / "memory.limit_in_bytes").read_text() == str(885 * 2**20)
    wrapped = group.wrap(["python", "-c", "pass"])
    assert wrapped[:2] == ["/bin/sh", "-c"] and wrapped[-3:] == ["python", "-c", "pass"]
    assert str(group.cpu_dir / "cgroup.procs") in wrapped and str(group.memory_dir / "cgroup.procs") in wrapped
    (group.memory_dir / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (group.memory_dir / "memory.max_usage_in_bytes").write_text(str(885 * 2**20))
    (group.cpu_dir / "cpu.stat").write_text("nr_periods 10\nnr_throttled 4\nthrottled_time 5\n")
    outcome = group.outcome()
    assert outcome.oom_killed and outcome.peak_mb == 885 and outcome.throttled_periods == 4
    for d in group.dirs:  # a fake tree's files keep rmdir from working: clear them first
        for f in d.iterdir():
            f.unlink()
    group.remove()
    assert not group.cpu_dir.exists() and not group.memory_dir.exists()


def test_v2_groups_go_beside_this_process_group(tmp_path):
    proc = fake_proc(
        tmp_path, "30 1 0:26 / ROOT/cg rw - cgroup2 cgroup2 rw,nsdelegate\n", "0::/user.slice/session-1.scope\n"
    )
    (tmp_path / "cg/user.slice/session-1.scope").mkdir(parents=True)
    (tmp_path / "cg/cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cg/user.slice/cgroup.subtree_control").write_text("memory pids\n")
    hierarchy = find_hierarchy(proc)
    assert (
        hierarchy.version == 2
        and hierarchy.cpu_parent == hierarchy.memory_parent == tmp_path / "cg/user.slice/ayci-measure"
    )
    (hierarchy.cpu_parent).mkdir()
    (hierarchy.cpu_parent / "cgroup.subtree_control").write_text("")
    group = MeasurementGroup.create(Limits.for_memory(3538), hierarchy)
    assert (group.cpu_dir / "cpu.max").read_text() == "200000 100000"
    assert (group.cpu_dir / "memory.max").read_text() == str(3538 * 2**20)
    # the controllers are handed down to the measurement groups (fake files keep the last write)
    assert (tmp_path / "cg/user.slice/cgroup.subtree_control").read_text() == "+cpu"
    assert (hierarchy.cpu_parent / "cgroup.subtree_control").read_text() == "+cpu +memory"
    assert group.dirs == [group.cpu_dir]
    (group.cpu_dir / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (group.cpu_dir / "memory.peak").write_text(str(3538 * 2**20))
    assert group.outcome().oom_killed


def test_no_controllers_is_a_reason(tmp_path):
    proc = fake_proc(tmp_path, "30 1 0:26 / ROOT/cg rw - cgroup2 cgroup2 rw\n", "0::/\n")
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg/cgroup.controllers").write_text("pids\n")
    with pytest.raises(ConfinementUnavailable, match="cpu and the memory controller"):
        find_hierarchy(proc)


def test_an_unwritable_hierarchy_is_a_reason(tmp_path):
    proc = fake_proc(
        tmp_path,
        "32 31 0:29 / ROOT/cpu rw - cgroup cgroup rw,cpu\n35 31 0:32 / ROOT/memory rw - cgroup cgroup rw,memory\n",
        "2:cpu:/\n1:memory:/\n",
    )
    hierarchy = find_hierarchy(proc)  # neither directory exists: creating a group fails
    with pytest.raises(ConfinementUnavailable, match="cannot set up cgroup v1"):
        MeasurementGroup.create(Limits.for_memory(1769), hierarchy)


def test_measurement_lock_excludes_conversion_and_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("AYCI_MEASUREMENT_LOCK", str(tmp_path / "lock"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from core import measurement_lock\n"
            "with measurement_lock.shared():\n    print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": "."},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with measurement_lock.shared(timeout_s=1) as waited:  # conversions share it
            assert waited < 1
        with pytest.raises(measurement_lock.LockTimeout), measurement_lock.exclusive(timeout_s=0.2):
            pass  # a measurement waits for them
    finally:
        holder.kill()
        holder.wait()
    with measurement_lock.exclusive(timeout_s=5):  # the kernel released the dead holder's lock
        pass


def test_a_waiting_measurement_goes_before_new_conversions(tmp_path, monkeypatch):
    """Conversions that keep arriving cannot starve a measurement: once it waits, new
    conversions wait behind it; it waits only for the conversion already running."""
    import threading

    monkeypatch.setenv("AYCI_MEASUREMENT_LOCK", str(tmp_path / "lock"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from core import measurement_lock\n"
            "with measurement_lock.shared():\n    print('held', flush=True); sys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": "."},
    )
    order = []
    try:
        assert holder.stdout.readline().strip() == "held"

        def measurement() -> None:
            with measurement_lock.exclusive(timeout_s=30):
                order.append("measured")

        waiting = threading.Thread(target=measurement)
        waiting.start()
        time.sleep(0.5)  # the measurement now waits for the running conversion
        with pytest.raises(measurement_lock.LockTimeout), measurement_lock.shared(timeout_s=0.5):
            pass  # a new conversion does not get in before it
        holder.stdin.write("done\n")
        holder.stdin.flush()
        waiting.join(timeout=30)
        assert order == ["measured"]
        with measurement_lock.shared(timeout_s=5):  # and after it, conversions go on
            order.append("converted")
        assert order == ["measured", "converted"]
    finally:
        holder.kill()
        holder.wait()


def test_inside_lambda_the_function_confines_to_its_own_size(monkeypatch):
    from measuring.launcher import _confinement_for

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048")
    spec = MeasureSpec(
        optimizer="onnx", workload="image_classification", artifact_path=None, reference_path=None, memory_mb=2048
    )
    assert _confinement_for(spec) == (None, True, "by the Lambda function itself (2048 MB)")
    spec.memory_mb = 1769
    group, confined, reason = _confinement_for(spec)
    assert group is None and not confined and "2048 MB, not 1769 MB" in reason


def test_groups_left_by_a_dead_launcher_are_removed(tmp_path):
    from measuring.confinement import Hierarchy

    (tmp_path / "cpu").mkdir()
    (tmp_path / "memory").mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = tmp_path / "memory" / f"m-{dead}-0"
    stale.mkdir()
    live = tmp_path / "memory" / f"m-{__import__('os').getpid()}-999"
    live.mkdir()
    group = MeasurementGroup.create(
        Limits.for_memory(1769), Hierarchy(version=1, cpu_parent=tmp_path / "cpu", memory_parent=tmp_path / "memory")
    )
    assert not stale.exists() and live.exists() and group.memory_dir.exists()


def test_other_work_disturbs_only_when_it_reaches_into_the_cores_needed(monkeypatch):
    from measuring.machine_load import LoadSample, load_report

    monkeypatch.setattr("measuring.machine_load.host_cores", lambda: 2)
    before = LoadSample(at=0.0, loadavg_1m=1.0, cpu_pressure_avg10=None, busy_cpu_s=100.0)
    after = LoadSample(at=10.0, loadavg_1m=1.0, cpu_pressure_avg10=None, busy_cpu_s=120.0)  # 2 cores busy for 10 s
    half = load_report(before, after, own_cpu_s=5.0, needed_cores=0.5)  # others: 1.5 cores, 1.5 free
    assert half["other_busy_cores"] == 1.5 and not half["disturbed"]
    two = load_report(before, after, own_cpu_s=15.0, needed_cores=2.0)  # others: 0.5 cores, none free
    assert two["other_busy_cores"] == 0.5 and two["disturbed"]
