"""autograder/sandbox.py without a hub (the hub's end-to-end test grades through it as a throwaway
account: test_hub.py): the command, the sudoers rule, and the launcher's refusals."""
import os
import subprocess
import sys

import pytest

from autograder import sandbox


def test_command_runs_the_launcher_through_sudo_as_the_account_with_the_kernel_arguments():
    cmd = sandbox.command("g1", 1536, ["-f", "/tmp/x/kernel.json", "--HistoryManager.hist_file=:memory:"])
    assert cmd[:5] == ["sudo", "-n", "-u", "g1", "--"]
    assert cmd[5:7] == [str(sandbox.PYTHON), str(sandbox.REPO / "autograder" / "sandbox.py")]
    assert cmd[7:] == ["--memory-mb", "1536", "--", "-f", "/tmp/x/kernel.json", "--HistoryManager.hist_file=:memory:"]


def test_sudoers_rule_allows_that_command_only_and_no_pty():
    rule = sandbox.sudoers_rule("t1", "g1").splitlines()
    assert rule == ["Defaults:t1 !use_pty",
                    f"t1 ALL=(g1) NOPASSWD: {sandbox.PYTHON} {sandbox.REPO / 'autograder' / 'sandbox.py'} *"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="the refusal is of root")
def test_launcher_refuses_to_run_as_root():
    result = subprocess.run([sys.executable, str(sandbox.REPO / "autograder" / "sandbox.py"), "--memory-mb", "0", "--",
                             "-f", "/nonexistent.json"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "refusing to run a learner's code as root" in result.stderr


def test_launcher_needs_its_separator():
    result = subprocess.run([sys.executable, str(sandbox.REPO / "autograder" / "sandbox.py"), "-f", "x.json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "usage" in result.stderr


def test_grading_execute_with_run_as_builds_the_sandbox_manager(monkeypatch):
    from autograder.preprocessors import GradingExecute
    monkeypatch.delenv("AUTOGRADER_MEMORY_LIMIT_MB", raising=False)
    ex = GradingExecute(run_as="g1", memory_limit_mb=1234)
    ex.kernel_name = "python3"
    km = ex.create_kernel_manager()
    assert type(km).__name__ == "SandboxKernelManager" and km.run_as == "g1" and km.memory_limit_mb == 1234
    assert km.format_kernel_cmd()[:5] == ["sudo", "-n", "-u", "g1", "--"]
    plain = GradingExecute()
    plain.kernel_name = "python3"
    assert type(plain.create_kernel_manager()).__name__ != "SandboxKernelManager"


KERNEL_RUN = """
import json, sys
import nbformat
from nbformat.v4 import new_code_cell, new_notebook
from autograder.preprocessors import GradingExecute

nb = new_notebook(cells=[
    new_code_cell("import os, pwd, resource\\nprint(pwd.getpwuid(os.geteuid()).pw_name, resource.getrlimit(resource.RLIMIT_DATA)[1] >> 20)"),
    new_code_cell("while True:\\n    pass"),
    new_code_cell("print('still here')")])
ex = GradingExecute(run_as=sys.argv[1], memory_limit_mb=1024, timeout=3, notebook_timeout=90, guard=False)
ex.preprocess(nb, {"metadata": {"path": "/"}})
print(json.dumps([[o.get("text") or o.get("ename") for o in c.outputs] for c in nb.cells]))
"""


def _class_machine() -> str | None:
    import shutil
    if os.name != "posix" or os.geteuid() != 0:
        return "not root (accounts are created)"
    missing = [t for t in ("useradd", "userdel", "runuser", "sudo", "visudo") if not shutil.which(t)]
    return f"no {', '.join(missing)}" if missing else None


@pytest.mark.skipif(_class_machine() is not None, reason=f"a kernel as another account needs {_class_machine()}")
def test_kernel_as_another_account_is_interrupted_and_killed_through_sudo(tmp_path):
    """As an unprivileged grader would: GradingExecute with run_as starts the kernel through sudo as a
    throwaway account; a cell over its time is interrupted (SIGINT relayed by sudo) and the next cell
    runs; the memory limit holds; shutting down (SIGKILL to sudo) leaves no process of the account."""
    import fcntl
    import pwd
    import secrets

    sys.path.insert(0, str(sandbox.REPO))
    from hub.course_hub import LOCK, CourseHub, _pids_of

    hub = CourseHub(tmp_path / "state", "s" + secrets.token_hex(3), learners=0)
    lock = open(LOCK, "a")
    fcntl.flock(lock, fcntl.LOCK_EX)  # never beside a running class: both open the path to the checkout
    try:
        hub.state.mkdir(mode=0o711)
        hub._open_path_to_repo()
        hub._add_user(hub.instructor)
        hub._add_grader()
        result = subprocess.run(["runuser", "-u", hub.instructor, "--", "env", f"HOME={pwd.getpwnam(hub.instructor).pw_dir}",
                                 f"PYTHONPATH={sandbox.REPO}", f"PATH={sandbox.PYTHON.parent}:/usr/bin:/bin",
                                 str(sandbox.PYTHON), "-c", KERNEL_RUN, hub.grader],
                                capture_output=True, text=True, timeout=180, cwd="/")
        assert result.returncode == 0, result.stderr[-3000:]
        outputs = __import__("json").loads(result.stdout.strip().splitlines()[-1])
        assert outputs[0] == [f"{hub.grader} 1024\n"], outputs
        assert outputs[1] and "KeyboardInterrupt" in " ".join(map(str, outputs[1])), outputs
        assert outputs[2] == ["still here\n"], outputs
        assert not _pids_of(pwd.getpwnam(hub.grader).pw_uid, settle=5), "the kernel outlived its grading"
    finally:
        hub.stop()
        lock.close()
