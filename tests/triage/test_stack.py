"""The local stack (`manage.py demo`, `loadtest`) heals a killed child without stopping the others, and
leaves nothing running when it stops."""

import os
import signal
import sys
import time

from tools.stack import Stack

# A child that starts a grandchild in its session, as Celery's main process starts its pool.
PARENT = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); time.sleep(300)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def _session(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid and _alive(int(entry)):
                    pids.append(int(entry))
            except ProcessLookupError:
                continue
    return pids


def _wait(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.05)
    return predicate()


def test_a_killed_child_is_started_again_its_orphans_killed_and_the_others_left_running(tmp_path):
    stack = Stack(env=dict(os.environ), log_dir=tmp_path)
    try:
        celery = stack.start("celery", [sys.executable, "-c", PARENT])
        web = stack.start("web", [sys.executable, "-c", "import time; time.sleep(300)"])
        assert _wait(lambda: len(_session(celery.pid)) == 2)
        os.kill(celery.pid, signal.SIGKILL)  # the main only: its pool child lives on
        assert _wait(lambda: stack.dead() == ["celery"])
        assert stack.restart_dead() == ["celery"] and stack.restarts == {"celery": 1}
        # the orphaned pool is gone with its session (SIGKILL is delivered asynchronously: it never runs again)
        assert _wait(lambda: _session(celery.pid) == [])
        assert stack.processes["celery"].pid != celery.pid and stack.processes["web"] is web and web.poll() is None
    finally:
        groups = [p.pid for p in stack.processes.values()]
        stack.stop_all()
    assert all(_session(pgid) == [] for pgid in groups)
