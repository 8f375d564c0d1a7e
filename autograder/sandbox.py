"""Grading in a throwaway Unix account: a learner's code never runs as the instructor, nor as root,
and each grading starts clean and leaves nothing.

On the course's JupyterHub (hub/course_hub.py) the instructor's server grades, and nbgrader starts
each grading kernel as whoever grades: the learner's code could then read the hidden tests in the
course folder, the other learners' submissions and the gradebook. With `GradingExecute.run_as`
set to an account, the kernel starts through sudo as that account instead:

    sudo -n -u GRADER -- REPO/.venv/bin/python REPO/autograder/sandbox.py --memory-mb N -- -f CONNECTION_FILE ...

course_hub.py creates the account (no password, no login shell, no home it can write) and the one
sudoers rule that lets the instructor run exactly this command as it. This file is both ends:

    SandboxKernelManager (kernel_manager_class())   the instructor's side: writes the connection
        file into a fresh folder shared with the account's group only (on the course's hub, in
        a small tmpfs of the class: ATTENTION_GRADING_RUN), asks for Unix sockets (ipc) instead
        of TCP, and builds the command above
    main()                                          the account's side, before ipykernel starts:
        refuses to run as root; dies with sudo (PR_SET_PDEATHSIG: nbclient stops a kernel with
        SIGKILL, which sudo cannot relay); enters namespaces of its own (autograder/isolate.py: its
        own processes, a read-only file system with private /tmp and HOME, no network); sets the
        limits (memory, processes, file size); starts ipykernel as the first process of its PID
        namespace, so that nothing it starts outlives it, with /dev/null for its output (no
        descriptor of the grader's reaches it); once the kernel has ended, removes what the
        account left in the connection folder
    main(["--clean", FOLDER])                       the same, asked for by the instructor's side
        after a kernel (whose launcher dies unheard when the kernel is killed): run through
        the same sudo rule, as the account, on a connection folder only

Signals: sudo keeps the instructor's real uid, so the instructor may signal it. A cell over its
time gets SIGINT, which sudo relays to the launcher and the launcher to the kernel; SIGKILL kills
sudo, then the launcher and the kernel (PR_SET_PDEATHSIG), then all it started (the PID namespace).
What the account can still do while it runs: read what every account of the machine may read (the
course's runtime: the venv, utils/, autograder/; not the checkout, see hub/course_hub.py) and use
the CPU and memory within its limits. README "What grading guarantees" says so.
"""
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (by sudo): the course's root, not autograder/, on the path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
from autograder import isolate  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"  # the path the sudoers rule names
MAX_PROCESSES = 512  # processes and threads of the account (torch starts a thread per core)
MAX_FILE_MB = 256
PREFIX = "attention-grading-"  # of each kernel's connection folder


def command(run_as: str, memory_mb: int, kernel_arguments: list[str], cgroups=()) -> list[str]:
    """The sudo command that starts ipykernel with `kernel_arguments` (from -f on) as `run_as`, in the
    cgroups whose cgroup.procs files are `cgroups` (the hub's grading cgroup, delegated to the account)."""
    joined = [a for path in cgroups for a in ("--cgroup", str(path))]
    return ["sudo", "-n", "-u", run_as, "--", str(PYTHON), str(Path(__file__).resolve()),
            "--memory-mb", str(int(memory_mb)), *joined, "--", *kernel_arguments]


def clean_command(run_as: str, folder: str) -> list[str]:
    """The sudo command that removes, as `run_as`, what that account made in a connection folder."""
    return ["sudo", "-n", "-u", run_as, "--", str(PYTHON), str(Path(__file__).resolve()), "--clean", str(folder)]


def clean(folder: str) -> None:
    """Everything this account owns at the top of `folder` (a grading connection folder), however deep
    and however closed (chmod first, as the owner may; coreutils walk without recursion limits and
    follow no link)."""
    uid = os.geteuid()
    for entry in os.scandir(folder):
        if entry.stat(follow_symlinks=False).st_uid != uid:
            continue
        if entry.is_dir(follow_symlinks=False):
            subprocess.run(["chmod", "-R", "u+rwx", "--", entry.path], capture_output=True)
        subprocess.run(["rm", "-rf", "--one-file-system", "--", entry.path], capture_output=True)


def sudoers_rule(instructor: str, grader: str, root: Path = REPO) -> str:
    """The sudoers lines course_hub.py installs: this one command (of the course's copy at `root`), as
    `grader`, without a password or a pty (with a pty, sudo would put the kernel in a session of its
    own, out of reach of nbclient's signals)."""
    return (f"Defaults:{instructor} !use_pty\n"
            f"{instructor} ALL=({grader}) NOPASSWD: {root / '.venv' / 'bin' / 'python'} "
            f"{root / 'autograder' / 'sandbox.py'} *\n")


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
            # The course's JupyterHub names its grading cgroup in the instructor's environment (hub/limits.py).
            cgroups = [c for c in os.environ.get("ATTENTION_GRADING_CGROUPS", "").split(":") if c]
            return command(self.run_as, self.memory_limit_mb, cmd[cmd.index("-f"):], cgroups)

        def write_connection_file(self, **kwargs):
            # The connection file holds the key that signs every message: readable by the account's group only.
            gid = pwd.getpwnam(self.run_as).pw_gid
            if not getattr(self, "_shared", None):
                # The kernel binds its sockets here (ipc: it has no network): group-writable, setgid so
                # that they belong to the account's group, which the instructor is a member of. On the
                # course's JupyterHub, in a small tmpfs of the class's (ATTENTION_GRADING_RUN), never on a disk.
                self._shared = tempfile.mkdtemp(prefix=PREFIX, dir=os.environ.get("ATTENTION_GRADING_RUN") or None)
                os.chown(self._shared, -1, gid)
                os.chmod(self._shared, 0o2770)
                self.connection_file = os.path.join(self._shared, "kernel.json")
                self.transport, self.ip = "ipc", os.path.join(self._shared, "kernel")
            super().write_connection_file(**kwargs)
            os.chown(self.connection_file, -1, gid)
            os.chmod(self.connection_file, 0o640)

        async def _async_cleanup_resources(self, restart: bool = False):  # what shutdown_kernel awaits
            await super()._async_cleanup_resources(restart)
            if not restart and getattr(self, "_shared", None):
                # What the kernel's account made there (a folder it closed to others, say) is removed by
                # that account; the launcher does it too, but it dies unheard when its kernel is killed.
                subprocess.run(clean_command(self.run_as, self._shared), capture_output=True, timeout=60)
                shutil.rmtree(self._shared, ignore_errors=True)
                self._shared = None

    return SandboxKernelManager


def _limit(memory_mb: int):
    """Soft and hard limits, so the learner's code cannot raise them: memory (RLIMIT_DATA, the
    course's limit), processes and threads of the account, size of one file, no core dumps. Never
    above what the grader's own process was given (a hard limit cannot be raised)."""
    import resource
    wanted = [(resource.RLIMIT_NPROC, MAX_PROCESSES), (resource.RLIMIT_FSIZE, MAX_FILE_MB << 20), (resource.RLIMIT_CORE, 0)]
    if memory_mb > 0:
        wanted.append((resource.RLIMIT_DATA, memory_mb << 20))
    for limit, value in wanted:
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))


def _relay(child: int) -> int:
    """The launcher's part once the kernel runs: pass on sudo's signals (SIGINT: interrupt a cell),
    wait for the kernel, and end as it ended."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda number, _frame: os.kill(child, number))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            return os.waitstatus_to_exitcode(status)
        except InterruptedError:
            continue


def main(argv: list[str]) -> None:
    if argv[:1] == ["--clean"] and len(argv) == 2:  # after a kernel: its files in its connection folder
        if os.geteuid() == 0 or not os.path.basename(os.path.normpath(argv[1])).startswith(PREFIX):
            sys.exit("usage: sandbox.py --clean CONNECTION_FOLDER (as the grading account)")
        clean(argv[1])
        return
    if "--" not in argv:
        sys.exit("usage: sandbox.py --memory-mb N -- IPYKERNEL_ARGUMENTS")
    ours, kernel_arguments = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    memory_mb = int(ours[ours.index("--memory-mb") + 1]) if "--memory-mb" in ours else 0
    if os.geteuid() == 0:
        sys.exit("autograder/sandbox.py: refusing to run a learner's code as root")
    connection = kernel_arguments[kernel_arguments.index("-f") + 1] if "-f" in kernel_arguments else None
    isolate.die_with_parent()  # with sudo: nbclient stops a kernel with SIGKILL, which sudo cannot relay
    if os.getppid() == 1:  # sudo died before the line above
        sys.exit(1)
    for i, word in enumerate(ours):  # all that the kernel starts counts against the grading cgroup's limits
        if word == "--cgroup":
            try:
                with open(ours[i + 1], "w") as f:
                    f.write(str(os.getpid()))
            except OSError as e:
                sys.exit(f"autograder/sandbox.py: cannot join the grading cgroup {ours[i + 1]} ({e})")
    try:
        isolate.enter_namespaces()
    except OSError as e:
        sys.exit(f"autograder/sandbox.py: cannot isolate the grading kernel ({e}); refusing to run it unconfined")
    child = os.fork()
    if child:
        status = _relay(child)
        if connection:  # the kernel is gone: nothing it wrote in the connection folder outlives it
            clean(os.path.dirname(os.path.abspath(connection)))
        sys.exit(status)
    # The kernel: the PID namespace's first process, so every process it leaves dies with it.
    isolate.die_with_parent()
    isolate.seal_file_system(os.path.dirname(os.path.abspath(connection)) if connection else None, readable=[str(REPO)])
    _limit(memory_mb)
    home = "/tmp/home"
    os.makedirs(home, mode=0o700)
    os.umask(0o007)  # the kernel's sockets: its account and the grader's group (the folder is theirs only)
    os.chdir(home)
    env = {"HOME": home, "TMPDIR": "/tmp", "PATH": f"{PYTHON.parent}:/usr/bin:/bin", "PYTHONPATH": str(REPO),
           "MPLBACKEND": "agg", "NBGRADER_EXECUTION": "autograde", "LANG": "C.UTF-8"}
    # Nothing of the grader's reaches the kernel: not its log (what sudo passed on as stderr), not a pipe.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.execve(str(PYTHON), [str(PYTHON), "-m", "ipykernel_launcher", *kernel_arguments], env)


if __name__ == "__main__":
    main(sys.argv[1:])
