"""The course's notebooks as the autograder sees them: where they are, which exercises they
hold, and how a learner's file is read and recognised.

Cell naming (nbgrader grade_id), the same in every notebook:
    <exercise>               the learner's solution cell, e.g. "softmax"
    test_<exercise>          its visible test cell (points)
    test_<exercise>_hidden   its hidden test cell (points), run only when grading
"""
import json
import sys
from pathlib import Path

# jsonschema (under nbformat) imports the optional rfc3987_syntax when it is installed (jupyter's
# extras bring it), and that builds a parser at import time: about 3.5 s of CPU, for IRI formats
# that no notebook schema uses. Grading processes do without it.
sys.modules.setdefault("rfc3987_syntax", None)

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
COURSE = ROOT / "course"


class BadInput(Exception):
    """A file that cannot be graded; its message is one line for the learner."""


def course_notebooks() -> list[str]:
    """Stems of the course's notebooks, e.g. "01_dot_product_attention", in course order."""
    return sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))


def read_notebook(path) -> "nbformat.NotebookNode":
    import nbformat  # here, not at the top: `submit` starts its kernel before paying for it

    path = Path(path)
    if not path.exists():
        raise BadInput(f"no such file: {path}")
    if path.is_dir():
        raise BadInput(f"{path} is a folder, not a notebook")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not a notebook: it is not text")
    except json.JSONDecodeError as e:
        raise BadInput(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}): "
                       "was it saved completely? Re-download it or restore it from a checkpoint")
    if not isinstance(data, dict) or "cells" not in data or "nbformat" not in data:
        raise BadInput(f"{path} is JSON but not a Jupyter notebook (no cells)")
    try:
        return nbformat.reads(json.dumps(data), as_version=4)
    except Exception as e:
        raise BadInput(f"{path} is not a valid notebook: {e}".splitlines()[0])


def grade_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")]


def exercises(nb) -> list[str]:
    """Exercise names in notebook order, read from the test cells' grade_ids."""
    return list(dict.fromkeys(exercise_of(gid) for gid in grade_ids(nb) if gid.startswith("test_")))


def exercise_of(grade_id: str) -> str:
    return grade_id[len("test_"):].removesuffix("_hidden")


def grading_cell_sources(nb) -> dict[str, list[str]]:
    """Exercise name -> source of its test cells (visible first, hidden included)."""
    sources = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and meta.get("grade_id", "").startswith("test_"):
            sources.setdefault(exercise_of(meta["grade_id"]), []).append(cell.source)
    return sources


def solution_names(nb) -> dict[str, list[str]]:
    """Exercise name -> the names its solution cell defines at top level (a Triton kernel's cell
    defines the kernel and its launcher), in the cell's order."""
    import ast
    names = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            tree = ast.parse(cell.source)
            names[meta["grade_id"]] = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return names


def identify(path, nb) -> str:
    """Which course notebook a learner's file is: by its name, else by its graded cells."""
    known = course_notebooks()
    stem = Path(path).stem
    if stem in known:
        return stem
    ids = set(grade_ids(nb))
    for candidate in known:
        theirs = set(grade_ids(read_notebook(SOLUTIONS / f"{candidate}.ipynb")))
        if ids and ids <= theirs and len(ids) >= len(theirs) // 2:
            return candidate
    raise BadInput(f"{path} is not a notebook of this course (known: {', '.join(known)})")
