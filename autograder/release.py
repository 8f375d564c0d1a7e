"""Make course/ from solutions/ with nbgrader, or check that course/ is what it would make.

    python -m autograder release          # rewrite course/
    python -m autograder release --check  # exit 1 if course/ differs from a fresh release
    python -m autograder release 07_kv_cache  # only the notebooks named
"""
import filecmp
import shutil
import tempfile
from pathlib import Path

from autograder.notebooks import COURSE, BadInput, course_notebooks
from autograder.workspace import Workspace


def release(dest: Path = COURSE, only=()) -> list[Path]:
    """Generate the notebooks of solutions/ (all, or `only`) into `dest`; remove notebooks no longer there."""
    dest.mkdir(parents=True, exist_ok=True)
    stems = course_notebooks()
    unknown = set(only) - set(stems)
    if unknown:
        raise BadInput(f"no such notebook in solutions/: {', '.join(sorted(unknown))}")
    written = []
    with tempfile.TemporaryDirectory(prefix="attention-release-") as tmp:
        ws = Workspace(tmp)
        for stem in only or stems:
            target = dest / f"{stem}.ipynb"
            shutil.copyfile(ws.generate(stem), target)
            written.append(target)
    for stale in dest.glob("[0-9][0-9]_*.ipynb"):
        if stale.stem not in stems:
            stale.unlink()
    return written


def check() -> list[str]:
    """Names of the course/ notebooks that differ from a fresh release (empty when in sync)."""
    with tempfile.TemporaryDirectory(prefix="attention-release-check-") as tmp:
        fresh = Path(tmp)
        release(fresh)
        names = sorted({p.name for p in fresh.glob("*.ipynb")} | {p.name for p in COURSE.glob("[0-9][0-9]_*.ipynb")})
        return [n for n in names if not ((COURSE / n).exists() and (fresh / n).exists()
                                         and filecmp.cmp(COURSE / n, fresh / n, shallow=False))]
