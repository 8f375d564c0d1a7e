"""The model answers of a notebook, in this process: for tests of the tests (the mutants command,
the oracle families) that need the instructor's solution as code objects, not as a graded file.

`namespace(stem)` executes the solution notebook's code cells in order, up to its last exercise,
test cells left out, with plots drawn on no screen; the exercises' names are then bound to the
model answers, as they are in a learner's kernel.
"""
import contextlib
import io
import os

from autograder.notebooks import SOLUTIONS, exercises, read_notebook

_CACHE: dict = {}


def _graded(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def _solution(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta.get("grade_id") if meta.get("solution") else None


def cells(stem: str) -> list[tuple[str | None, str]]:
    """(exercise or None, source) of the code cells that define the notebook's answers, in order:
    every code cell up to the last solution cell, test cells left out."""
    nb = read_notebook(SOLUTIONS / f"{stem}.ipynb")
    code = [c for c in nb.cells if c.cell_type == "code" and not _graded(c)]
    last = max((i for i, c in enumerate(code) if _solution(c)), default=-1)
    return [(_solution(c), c.source) for c in code[:last + 1]]


def namespace(stem: str) -> dict:
    """A fresh copy of the notebook's namespace after its answers are defined (computed once)."""
    if stem not in _CACHE:
        os.environ.setdefault("MPLBACKEND", "agg")
        space = {"__name__": f"answers_{stem[:2]}"}
        cwd = os.getcwd()
        try:
            os.chdir(SOLUTIONS)
            with contextlib.redirect_stdout(io.StringIO()):
                for _, source in cells(stem):
                    exec(compile(_plain(source), f"<{stem} cell>", "exec"), space)
        finally:
            os.chdir(cwd)
            _close_figures()
        _CACHE[stem] = space
    return dict(_CACHE[stem])


def _plain(source: str) -> str:
    """IPython's magics and shell lines are no Python: left out."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def _close_figures():
    import sys
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def exercise_names(stem: str) -> list[str]:
    return exercises(read_notebook(SOLUTIONS / f"{stem}.ipynb"))
