"""Grading in a throwaway Unix account: a learner's code never runs as the instructor, nor as root.

On the course's JupyterHub (hub/course_hub.py) the instructor's server grades, and nbgrader starts
each grading kernel as whoever grades: the learner's code could then read the hidden tests in the
course folder, the other learners' submissions and the gradebook. With `GradingExecute.run_as`
set to an account, the kernel starts through sudo as that account instead:

    sudo -n -u GRADER -- REPO/.venv/bin/python REPO/autograder/sandbox.py --memory-mb N -- -f CONNECTION_FILE ...

course_hub.py creates the account (no password, no login shell, a home of its own) and the one
sudoers rule that lets the instructor run exactly this command as it. This file is both ends:

    SandboxKernelManager (kernel_manager_class())   the instructor's side: writes the connection
        file into a folder shared with the account's group only, and builds the command above
    main()                                          the account's side, before ipykernel starts:
        refuses to run as root; dies with sudo (PR_SET_PDEATHSIG: nbclient stops a kernel with
        SIGKILL, which sudo cannot relay); sets the memory limit; works in a fresh folder of its
        own; runs ipykernel in this process

Signals: sudo keeps the instructor's real uid, so the instructor may signal it. A cell over its
time gets SIGINT, which sudo relays to the kernel; SIGKILL kills sudo, and the kernel with it.
What the account can still do: read what every account of the machine may read (the checkout but
solutions/, /tmp), and write in its own home and /tmp. README "What grading guarantees" says so.
"""
import os
import runpy
import shutil
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"  # the path the sudoers rule names
PR_SET_PDEATHSIG = 1


def command(run_as: str, memory_mb: int, kernel_arguments: list[str]) -> list[str]:
    """The sudo command that starts ipykernel with `kernel_arguments` (from -f on) as `run_as`."""
    return ["sudo", "-n", "-u", run_as, "--", str(PYTHON), str(Path(__file__).resolve()),
            "--memory-mb", str(int(memory_mb)), "--", *kernel_arguments]


def sudoers_rule(instructor: str, grader: str) -> str:
    """The sudoers lines course_hub.py installs: this one command, as `grader`, without a password or a pty
    (with a pty, sudo would put the kernel in a session of its own, out of reach of nbclient's signals)."""
    return (f"Defaults:{instructor} !use_pty\n"
            f"{instructor} ALL=({grader}) NOPASSWD: {PYTHON} {Path(__file__).resolve()} *\n")


def kernel_manager_class():
    """jupyter_client's AsyncKernelManager, starting its kernel as `run_as` (imported only when asked)."""
    import pwd
    import tempfile

    from jupyter_client.manager import AsyncKernelManager
    from traitlets import Integer, Unicode

    class SandboxKernelManager(AsyncKernelManager):
        run_as = Unicode("", help="the Unix account that runs the kernel").tag(config=True)
        memory_limit_mb = Integer(0, help="RLIMIT_DATA of the kernel in MiB (0: none)").tag(config=True)

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            return command(self.run_as, self.memory_limit_mb, cmd[cmd.index("-f"):])

        def write_connection_file(self, **kwargs):
            # The connection file holds the key that signs every message: readable by the account's group only.
            gid = pwd.getpwnam(self.run_as).pw_gid
            if not getattr(self, "_shared", None):
                self._shared = tempfile.mkdtemp(prefix="attention-grading-")
                os.chown(self._shared, -1, gid)
                os.chmod(self._shared, 0o750)
                self.connection_file = os.path.join(self._shared, "kernel.json")
            super().write_connection_file(**kwargs)
            os.chown(self.connection_file, -1, gid)
            os.chmod(self.connection_file, 0o640)

        async def _async_cleanup_resources(self, restart: bool = False):  # what shutdown_kernel awaits
            await super()._async_cleanup_resources(restart)
            if not restart and getattr(self, "_shared", None):
                shutil.rmtree(self._shared, ignore_errors=True)
                self._shared = None

    return SandboxKernelManager


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fresh_folder() -> Path:
    """HOME/grading/PID, after removing the folders of kernels that are gone (killed, so never cleaned)."""
    work = Path.home() / "grading"
    work.mkdir(mode=0o700, exist_ok=True)
    for old in work.iterdir():
        if not (old.name.isdigit() and _alive(int(old.name))):
            shutil.rmtree(old, ignore_errors=True)
    folder = work / str(os.getpid())
    folder.mkdir(mode=0o700)
    return folder


def main(argv: list[str]) -> None:
    if "--" not in argv:
        sys.exit("usage: sandbox.py --memory-mb N -- IPYKERNEL_ARGUMENTS")
    ours, kernel_arguments = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    memory_mb = int(ours[ours.index("--memory-mb") + 1]) if "--memory-mb" in ours else 0
    if os.geteuid() == 0:
        sys.exit("autograder/sandbox.py: refusing to run a learner's code as root")
    import ctypes
    import pwd
    import resource

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # sudo died before the line above
        sys.exit(1)
    if memory_mb > 0:  # soft and hard: the learner's code cannot raise it
        resource.setrlimit(resource.RLIMIT_DATA, (memory_mb << 20, memory_mb << 20))
    home = pwd.getpwuid(os.geteuid()).pw_dir
    # sudo cleared the environment; JPY_PARENT_PID makes ipykernel exit when sudo is gone, as under jupyter_client
    os.environ.update(HOME=home, PYTHONPATH=str(REPO), MPLBACKEND="agg", NBGRADER_EXECUTION="autograde",
                      JPY_PARENT_PID=str(os.getppid()))
    os.umask(0o077)
    os.chdir(_fresh_folder())
    sys.path[0] = str(REPO)  # not autograder/, where this file is
    sys.argv = ["ipykernel_launcher", *kernel_arguments]
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
