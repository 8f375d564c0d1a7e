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
