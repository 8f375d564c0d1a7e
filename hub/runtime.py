"""What the class's accounts may read of the course, and nothing else: a folder laid out like the
checkout but holding only what the servers and kernels run (hub/course_hub.py builds it at start).

    RUNTIME/.venv         the checkout's venv, bound read-only (a bind mount: no copy of its GBs)
    RUNTIME/bin           the venv's scripts with their first line pointing at RUNTIME/.venv
    RUNTIME/utils, autograder, hub, checkpoints
                          copies of what notebooks import and the servers load (no tests/)

While the class runs, the checkout itself is closed to every account but root (mode 0700 on its
folder): not solutions/, not .git (whose history holds every solution), not build/ or feedback/
(generated notebooks and feedback pages with solutions in them). This is a local stand-in for what
a deployment does with an image: the learners' image holds the runtime and never the repository.
The interpreter the venv points at (e.g. pyenv's under /root) keeps its folders traversable (o+x,
not listable): course_hub.py opens them, as before."""
import contextlib
import re
import shutil
import subprocess
from pathlib import Path

SOURCES = ("utils", "autograder", "hub", "checkpoints")
LEFT_OUT = shutil.ignore_patterns("tests", "__pycache__", "*.pyc")


def build(repo: Path, runtime: Path) -> None:
    """RUNTIME as above; every file root's, readable by all, writable by none but root."""
    runtime.mkdir(mode=0o755)
    for name in SOURCES:
        if (repo / name).exists():
            shutil.copytree(repo / name, runtime / name, ignore=LEFT_OUT)
    venv = runtime / ".venv"
    venv.mkdir()
    subprocess.run(["mount", "--bind", str(repo / ".venv"), str(venv)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(venv)], check=True, capture_output=True)
    (runtime / "bin").mkdir()
    # pip writes the interpreter it ran as: .venv/bin/python, python3 or python3.11 (how the venv was made)
    shebang = re.compile(rb"#!" + re.escape(str(repo / ".venv" / "bin").encode()) + rb"/(python[0-9.]*)\n")
    for script in (repo / ".venv" / "bin").iterdir():
        with contextlib.suppress(OSError):
            head = script.read_bytes()
            found = script.is_file() and shebang.match(head)
            if found:
                (runtime / "bin" / script.name).write_bytes(f"#!{venv / 'bin'}/".encode() + found[1] + head[found.end() - 1:])
                (runtime / "bin" / script.name).chmod(0o755)
    # The roles' folders are also the servers' user configuration folders (JUPYTER_CONFIG_DIR, read-only:
    # hub/jupyterhub_config.py); jupyter_core's marker that there is nothing of IPython's to migrate there.
    for role in (runtime / "hub" / "roles").glob("*"):
        (role / "migrated").write_text("")
    # Compiled once by root, so that no account needs (or gets) a writable __pycache__.
    subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", *(str(runtime / n) for n in SOURCES)],
                   capture_output=True)
    subprocess.run(["chmod", "-R", "go-w,a+rX", *(str(runtime / n) for n in (*SOURCES, "bin") if (runtime / n).exists())],
                   check=True)


def mounted(path: Path) -> bool:
    """Whether `path` is a mount point (os.path.ismount misses a bind mount within one file system)."""
    points = {line.split()[4].replace("\\040", " ") for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    return str(path) in points


def unmount(runtime: Path) -> bool:
    """Take the venv's bind mount away; True when nothing is mounted under RUNTIME any more."""
    venv = runtime / ".venv"
    for how in (["umount"], ["umount", "--lazy"]):
        if mounted(venv):
            subprocess.run([*how, str(venv)], capture_output=True)
    return not mounted(venv)
