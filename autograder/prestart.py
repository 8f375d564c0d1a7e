"""A kernel started before nbgrader is even imported: it boots and imports torch (3 s on 2
cores) while the grading process imports nbgrader and prepares the workspace (2 s), so the
kernel's start is most of a submit's fixed cost, not the sum of both. `python -m autograder
submit` starts it before anything else; `autograder.preprocessors.GradingExecute` takes it instead
of starting its own. Light on purpose: importing this module must not import nbgrader.
"""
import os
import shutil
import signal
import tempfile
from pathlib import Path

PRESTARTED = []
_SOCKET_FOLDERS = []
# Memory of every grading kernel: at most this many MiB of data (RLIMIT_DATA: the heap and private
# mappings, where tensors and arrays live), so that one learner's notebook cannot take the machine
# while grade-all grades a class. nbgrader_config.py sets it (GradingExecute.memory_limit_mb, 0: no
# limit); the environment variable below, set by `grade-all --memory-mb`, overrides it.
MEMORY_ENV = "AUTOGRADER_MEMORY_LIMIT_MB"
DEFAULT_MEMORY_MB = 4096


def memory_limit_mb(configured: int | None = None) -> int:
    """The grading kernel's memory limit in MiB (0: none): the environment's, else `configured`,
    else the course config's."""
    if os.environ.get(MEMORY_ENV, "").strip():
        return int(os.environ[MEMORY_ENV])
    if configured is None:
        from autograder.workspace import load_config
        section = load_config(Path(".")).GradingExecute
        configured = section.memory_limit_mb if "memory_limit_mb" in section else DEFAULT_MEMORY_MB
    return int(configured)


def limit_memory(limit_mb: int):
    """A function that the kernel's process runs before Python starts (Popen's preexec_fn): the soft
    and the hard limit, so the learner's code cannot raise it (unless it runs as root). None on
    Windows, which has neither rlimits nor preexec_fn: a learner's own submit runs unlimited there."""
    if os.name != "posix":
        return None

    def apply():
        import resource
        if limit_mb > 0:
            resource.setrlimit(resource.RLIMIT_DATA, (limit_mb << 20, limit_mb << 20))
    return apply


def kernel_env() -> dict:
    # Grading reads scores, not pictures: figures are drawn by no one (Agg, never shown), which
    # saves the inline backend's PNG rendering at the end of every plotting cell.
    return {**os.environ, "MPLBACKEND": "agg", "NBGRADER_EXECUTION": "autograde"}


# Plain tracebacks, as Python prints them (file, line, the line's code): IPython's default
# "Context" mode parses every file on the stack to show more lines around each frame, about
# 0.05 s per failing cell and more for the first, most of a stub notebook's grading time.
KERNEL_ARGUMENTS = ["--HistoryManager.hist_file=:memory:", "--InteractiveShell.xmode=Plain"]


def _new_folder() -> str:
    folder = tempfile.mkdtemp(prefix="attention-kernel-")
    _SOCKET_FOLDERS.append(folder)
    return folder


def _local_sockets() -> dict:
    """Unix sockets in a new private folder (mode 0700), not TCP ports on 127.0.0.1: no other user
    of the machine can reach the kernel, and it has no reason to warn about unencrypted TCP. TCP
    where there are no Unix sockets, or where the temporary folder's path is too long for one
    (about 100 bytes)."""
    if os.name != "posix":
        return {}
    path = os.path.join(_new_folder(), "k")
    return {"transport": "ipc", "ip": path} if len(path) <= 90 else {}


def prestart_kernel(kernel_name: str | None = None):
    """Start the grading kernel now, unless one is waiting already; its working folder is its
    private socket folder (or a temporary one), removed by discard_prestarted."""
    if PRESTARTED:
        return PRESTARTED[-1]
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    sockets = _local_sockets()
    cwd = sockets["ip"].rpartition(os.sep)[0] if sockets else _new_folder()
    from autograder.workspace import load_config
    config = load_config(Path(cwd))  # the course's settings (load_config does not import nbgrader)
    if kernel_name is None:
        kernel_name = config.Execute.kernel_name
    section = config.GradingExecute
    limit = memory_limit_mb(section.memory_limit_mb if "memory_limit_mb" in section else DEFAULT_MEMORY_MB)
    km = AsyncKernelManager(kernel_name=kernel_name, **sockets)
    try:  # `import torch` at boot, binding no name in the learner's namespace
        # its temporary files go in its own folder, removed with it even when it is killed mid-import
        run_sync(km.start_kernel)(cwd=cwd, env={**kernel_env(), "TMPDIR": cwd}, preexec_fn=limit_memory(limit), extra_arguments=[
            *KERNEL_ARGUMENTS, "--IPKernelApp.exec_lines=__import__('torch') and None"])
    except Exception:  # GradingExecute starts its own, as nbgrader would
        return None
    PRESTARTED.append(km)
    return km


def discard_prestarted():
    """Stop a kernel that prestart_kernel started and no GradingExecute took (grading failed early),
    and remove the socket folders."""
    from jupyter_core.utils import run_sync

    while PRESTARTED:
        km = PRESTARTED.pop()
        try:  # SIGKILL first: shutdown_kernel interrupts before it kills, and a kernel interrupted
            # while it imports torch prints a traceback (Windows has no SIGKILL: TerminateProcess)
            run_sync(km.signal_kernel)(getattr(signal, "SIGKILL", signal.SIGTERM))
        except Exception:
            pass
        try:
            run_sync(km.shutdown_kernel)(now=True)  # reaps the process, removes its connection file
        except Exception:
            pass
    while _SOCKET_FOLDERS:
        shutil.rmtree(_SOCKET_FOLDERS.pop(), ignore_errors=True)
