"""`python -m autograder properties [NN ...]`: per exercise, what its grading observes in general
(GRADING.md explains the columns). Every cell is derived from what the checks declare or run:

- reference watched: the utils objects named like the exercise (shortcuts.utils_twins) and how
  many code objects of theirs the execution watch refuses while the learner's code runs
  (executes.code_objects), plus the helpers declared in shortcuts.OWN_HELPERS;
- inputs unchanged: every call() compares its tensor arguments with a copy, except the
  parameters its contract may change (rules.py); "the check's own sentence" where the exercise's
  check compares them itself (call(..., inputs_named=True) in its source);
- device: every call() with tensor inputs runs its first calls with inputs that report a GPU
  (elsewhere.py), for every exercise alike;
- family: the axes of the exercise's declared input family (FAMILIES in checks/nbNN/contract.py) and what
  the harness compares on every member (harness.py); "-" where none is declared yet; with a
  declared input space, its axes, how many probes the covering array adds to the pinned ones,
  and the oracle's size;
- rules: the exercise's declared contract (checks/rules.py), as its Rules block says it.
"""
import importlib
import inspect

from autograder.notebooks import SOLUTIONS, course_notebooks, grading_cell_sources, read_notebook


def _reference(exercise: str) -> str:
    from autograder.checks.core.executes import code_objects
    from autograder.checks.core.shortcuts import OWN_HELPERS, unwrap, utils_twins
    objects = {id(o): o for m, a in utils_twins(exercise) for o in [unwrap(getattr(m, a))] if hasattr(o, "__qualname__")}
    names = [f"{o.__module__}.{o.__qualname__} ({len(code_objects(o, unwrap))} code)" for o in objects.values()]
    helpers = [f"helper {h}" for h in OWN_HELPERS.get(exercise, ())]
    return ", ".join(names + helpers) or "- (no utils twin)"


def _inputs(stem: str, exercise: str) -> str:
    from autograder.checks.core.inputs import MAY_CHANGE
    try:
        source = inspect.getsource(getattr(importlib.import_module(f"autograder.checks.nb{stem[:2]}"), f"check_{exercise}"))
    except (AttributeError, ImportError, OSError, TypeError):
        source = ""
    from autograder.checks.core import rules
    words = "compared after each checks.call"
    contract = rules.load(stem[:2]).get(exercise)
    named = list(contract.may_change) if contract else sorted(a for a in MAY_CHANGE.get(exercise, ()) if isinstance(a, str))
    if named:
        words += f"; may change {', '.join(named)} (its contract, whatever its name)"
    if "inputs_named=True" in source:
        words = "compared by the check, in the exercise's own sentence"
    return words


def _family(stem: str, exercise: str) -> str:
    try:
        families = getattr(importlib.import_module(f"autograder.checks.nb{stem[:2]}"), "FAMILIES", {})
    except ImportError:
        return "-"
    family = families.get(exercise)
    if family is None:
        return "-"
    words = f"{', '.join(family.axes())} ({len(family.probes)} probes); compares {', '.join(family.compares)}"
    if family.space is not None:
        generated = len(family.probes) - len(family.pinned)
        words += (f"; space {', '.join(family.space.axes)}: {len(family.pinned)} pinned + {generated} covering, "
                  f"oracle {len(family.space.oracle_points()) * len(family.space.seeds)}")
    return words


def _rules(stem: str, exercise: str) -> str:
    from autograder.checks.core import rules
    contract = rules.load(stem[:2]).get(exercise)
    if contract is None:
        return "- (no contract yet)"
    return " ".join(en for en, _ in rules.lines(contract)) or "the course-wide rules only"


def table(stems=None) -> list[tuple]:
    try:  # notebook 15's references are guarded only once Triton is imported, as they are in its grading
        import utils.flash_triton  # noqa: F401  (first: it chooses the interpreter before triton is imported)
    except ImportError:
        pass
    rows = []
    for stem in course_notebooks():
        if stems and stem[:2] not in stems and stem not in stems:
            continue
        for exercise in grading_cell_sources(read_notebook(SOLUTIONS / f"{stem}.ipynb")):
            rows.append((stem[:2], exercise, _reference(exercise), _inputs(stem, exercise), _family(stem, exercise),
                         _rules(stem, exercise)))
    return rows


def main(stems) -> int:
    rows = table(stems)
    if not rows:
        print(f"no notebook matches {' '.join(stems)}")
        return 2
    head = ("NN", "exercise", "reference watched (execution)", "inputs unchanged", "family (harness.py)", "rules (rules.py)")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(2)]
    print("Every call of learner code also runs with inputs that report a GPU (GRADING.md, \"Outputs follow their inputs' device\").")
    for row in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:2], widths)) + "  " + "  |  ".join(row[2:]))
    return 0
