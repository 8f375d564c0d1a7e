"""A kernel started before nbgrader is even imported: it boots and imports torch (3 s on 2
cores) while the grading process imports nbgrader and prepares the workspace (2 s), so the
kernel's start is most of a submit's fixed cost, not the sum of both. `python -m autograder
submit` starts it before anything else; `autograder.preprocessors.GradingExecute` takes it instead
of starting its own. Light on purpose: importing this module must not import nbgrader.
"""
import os
import shutil
import tempfile
from pathlib import Path

PRESTARTED = []
_SOCKET_FOLDERS = []


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
    if kernel_name is None:  # the course's Execute.kernel_name (load_config does not import nbgrader)
        from autograder.workspace import load_config
        kernel_name = load_config(Path(cwd)).Execute.kernel_name
    km = AsyncKernelManager(kernel_name=kernel_name, **sockets)
    try:  # `import torch` at boot, binding no name in the learner's namespace
        run_sync(km.start_kernel)(cwd=cwd, env=kernel_env(), extra_arguments=[
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
        try:
            run_sync(km.shutdown_kernel)(now=True)
        except Exception:
            pass
    while _SOCKET_FOLDERS:
        shutil.rmtree(_SOCKET_FOLDERS.pop(), ignore_errors=True)
