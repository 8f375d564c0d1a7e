"""A kernel started before nbgrader is even imported: it boots and imports torch while the
grading process imports nbgrader and prepares the workspace (about 2 s of a submit's wall time
on 2 cores). `autograder.preprocessors.GradingExecute` takes it instead of starting its own.
Light on purpose: importing this module must not import nbgrader.
"""
import os
from pathlib import Path

PRESTARTED = []


def kernel_env() -> dict:
    # Grading reads scores, not pictures: figures are drawn by no one (Agg, never shown), which
    # saves the inline backend's PNG rendering at the end of every plotting cell.
    return {**os.environ, "MPLBACKEND": "agg", "NBGRADER_EXECUTION": "autograde"}


# Plain tracebacks, as Python prints them (file, line, the line's code): IPython's default
# "Context" mode parses every file on the stack to show more lines around each frame, about
# 0.05 s per failing cell and more for the first, most of a stub notebook's grading time.
KERNEL_ARGUMENTS = ["--HistoryManager.hist_file=:memory:", "--InteractiveShell.xmode=Plain"]


def prestart_kernel(cwd, kernel_name: str = "python3"):
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    Path(cwd).mkdir(parents=True, exist_ok=True)
    # Local sockets in the grading workspace, not TCP ports on 127.0.0.1: nothing else on the
    # machine can reach them, and the kernel has no reason to warn about unencrypted TCP.
    km = AsyncKernelManager(kernel_name=kernel_name, transport="ipc", ip=str(Path(cwd) / "kernel-ipc"))
    try:  # `import torch` at boot, binding no name in the learner's namespace
        run_sync(km.start_kernel)(cwd=str(cwd), env=kernel_env(), extra_arguments=[
            *KERNEL_ARGUMENTS, "--IPKernelApp.exec_lines=__import__('torch') and None"])
    except Exception:  # GradingExecute starts its own, as nbgrader would
        return None
    PRESTARTED.append(km)
    return km


def discard_prestarted():
    """Stop a kernel that prestart_kernel started and no GradingExecute took (grading failed early)."""
    from jupyter_core.utils import run_sync

    while PRESTARTED:
        km = PRESTARTED.pop()
        try:
            run_sync(km.shutdown_kernel)(now=True)
        except Exception:
            pass
