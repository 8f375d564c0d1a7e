"""`python -m autograder mutants [NN ...]`: tests of the tests. Each model answer is mutated
(autograder/checks/core/mutation.py); a mutant is run through its exercise's real hidden check,
first with the grading family (killed?), and, when it survives, with the oracle family
(`Family.oracle()`: the whole declared input space, two seeds), which tells whether any input the
contract allows can see the change at all. A mutant the oracle sees and grading does not is a
**survivor**: a hole in the grading family, printed with its change. A mutant the oracle cannot
see is **equivalent** (on the space): printed with the reason its notebook's families module gives
(`EQUIVALENT`), or "the oracle's inputs cannot tell it apart".

    python -m autograder mutants 04            # one notebook
    python -m autograder mutants 04 --exercise causal_mask --limit 20
    make mutants [NB="04 05"]

The last line reads: mutants: killed K of D distinguishable (P%), E equivalent, across X exercises.
Exit status 1 when a survivor is found.
"""
import contextlib
import importlib
import io
import signal
import sys
import time

from autograder import answers
from autograder.notebooks import SOLUTIONS, course_notebooks, grading_cell_sources, read_notebook

TIMEOUT_S = 60  # a mutant that loops: grading would stop its cell after 60 s and score it 0
ORACLE_TIMEOUT_S = 900  # the oracle is broad; past this, a mutant is said to be undecided, not seen


class _Timeout(BaseException):
    """Not an Exception: the learner's code and the checks catch those, and would take it for a crash."""


def _alarm(signum, frame):
    raise _Timeout()


def _fails(hidden: str, namespace: dict, oracle: bool) -> str | None:
    """Why the hidden check rejects what `namespace` holds (None: it passes; "timeout": it ran
    out of time)."""
    from autograder.checks.core import harness
    harness.ORACLE[0] = oracle
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ORACLE_TIMEOUT_S if oracle else TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(hidden, "<hidden test cell>", "exec"), dict(namespace))
        return None
    except _Timeout:
        return "timeout"
    except BaseException as e:  # noqa: BLE001: any failure of the check, or of the mutant, kills it
        if isinstance(e, KeyboardInterrupt):
            raise
        return f"{type(e).__name__}: {str(e)[:120]}"
    finally:
        signal.alarm(0)
        harness.ORACLE[0] = False


def _sizes(source: str, hidden: str, namespace: dict) -> dict:
    """The value each size site of the model answer had the first time the check ran it."""
    from autograder.checks.core import mutation
    text, count = mutation.instrumented(source)
    seen: dict = {}

    def __size__(i, value):
        seen.setdefault(i, value if isinstance(value, int) else None)
        return value
    space = dict(namespace, __size__=__size__)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(text, "<instrumented answer>", "exec"), space)
    _fails(hidden, space, oracle=False)
    return seen


def _equivalent_reasons(stem: str) -> dict:
    try:
        return getattr(importlib.import_module(f"autograder.checks.nb{stem[:2]}.contract"), "EQUIVALENT", {})
    except ImportError:
        return {}


def run_exercise(stem: str, exercise: str, source: str, hidden: str, base: dict, limit: int | None, out=print) -> dict:
    from autograder.checks.core import mutation
    found = mutation.mutants(source, _sizes(source, hidden, base))
    if limit and len(found) > limit:  # evenly spread over the cell, always the same ones
        step = len(found) / limit
        found = [found[int(i * step)] for i in range(limit)]
    stats = {"made": len(found), "killed": 0, "survivors": [], "equivalent": [], "undecided": []}
    reasons = _equivalent_reasons(stem).get(exercise, {})
    for description, text in found:
        space = dict(base)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(text, f"<mutant of {exercise}>", "exec"), space)
        except Exception:  # the mutant does not even define the exercise: grading would score it 0
            stats["killed"] += 1
            continue
        if _fails(hidden, space, oracle=False):
            stats["killed"] += 1
        elif (why := _fails(hidden, space, oracle=True)) == "timeout":
            stats["undecided"].append(description)
        elif why:
            stats["survivors"].append((description, why))
        else:
            stats["equivalent"].append((description, reasons.get(description, "the oracle's inputs cannot tell it apart")))
    distinguishable = stats["killed"] + len(stats["survivors"])
    out(f"{stem[:2]} {exercise}: {stats['made']} mutants, {distinguishable} distinguishable, {stats['killed']} killed, "
        f"{len(stats['equivalent'])} equivalent")
    for description, why in stats["survivors"]:
        out(f"    SURVIVOR {description}  (the oracle: {why})")
    for description, reason in stats["equivalent"]:
        out(f"    equivalent {description}: {reason}")
    for description in stats["undecided"]:
        out(f"    UNDECIDED {description}: the oracle ran past {ORACLE_TIMEOUT_S} s (the mutant may loop on some inputs)")
    return stats


def main(stems, exercise=None, limit=None) -> int:
    chosen = [s for s in course_notebooks() if not stems or s[:2] in stems or s in stems]
    killed = distinguishable = equivalent = undecided = exercises = 0
    start = time.time()
    for stem in chosen:
        base = answers.namespace(stem)
        cells = {name: source for name, source in answers.cells(stem) if name}
        for name, (_, hidden) in grading_cell_sources(read_notebook(SOLUTIONS / f"{stem}.ipynb")).items():
            if exercise and name != exercise:
                continue
            stats = run_exercise(stem, name, cells[name], hidden, base, limit)
            exercises += 1
            killed += stats["killed"]
            distinguishable += stats["killed"] + len(stats["survivors"])
            equivalent += len(stats["equivalent"])
            undecided += len(stats["undecided"])
        sys.stdout.flush()
    share = 100.0 * killed / distinguishable if distinguishable else 100.0
    print(f"({time.time() - start:.0f} s)")
    if undecided:
        print(f"{undecided} mutant(s) undecided: the oracle ran out of time on them")
    print(f"mutants: killed {killed} of {distinguishable} distinguishable ({share:.1f}%), {equivalent} equivalent, "
          f"across {exercises} exercises")
    return 0 if killed == distinguishable and not undecided else 1
