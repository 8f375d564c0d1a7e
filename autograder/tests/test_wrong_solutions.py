"""Tests of the tests: run the very code of each notebook's test cells, hidden ones included,
against every wrong solution (it must fail, with a message that names the mistake) and every
valid alternative (it must pass)."""
import functools
import importlib
import subprocess
import sys

import pytest
from torch import nn

from autograder.checks import Shortcut, utils_twins
from autograder.notebooks import ROOT, SOLUTIONS, course_notebooks, read_notebook, grading_cell_sources, solution_names

ZOO = {stem: importlib.import_module(f"autograder.tests.zoo.nb{stem[:2]}") for stem in course_notebooks()}
SOURCES = {stem: grading_cell_sources(read_notebook(SOLUTIONS / f"{stem}.ipynb")) for stem in course_notebooks()}
NAMES = {stem: solution_names(read_notebook(SOLUTIONS / f"{stem}.ipynb")) for stem in course_notebooks()}


def run_cell(source, exercise, candidate):
    """Execute one test cell with `candidate` bound to the exercise's name, as a fresh kernel would;
    a dict binds several names (a Triton kernel and its launcher, defined in one solution cell)."""
    namespace = dict(candidate) if isinstance(candidate, dict) else {exercise: candidate}
    exec(compile(source, f"<{exercise} test cell>", "exec"), namespace)


def cell_names(stem, exercise):
    """The names the exercise's solution cell defines: the exercise, and a kernel's launcher."""
    return NAMES[stem].get(exercise) or [exercise]


def run_test_cells(stem, exercise, candidate):
    for source in SOURCES[stem][exercise]:
        run_cell(source, exercise, candidate)


def has_chinese(text):
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def cases(kind):
    return [pytest.param(stem, exercise, entry, id=f"{stem[:2]}-{exercise}-{label}")
            for stem, zoo in ZOO.items()
            for exercise, entries in getattr(zoo, kind).items()
            for label, entry in entries.items()]


@pytest.mark.parametrize("stem, exercise, entry", cases("WRONG"))
def test_wrong_solution_is_caught(stem, exercise, entry):
    candidate, words = entry
    visible, hidden = SOURCES[stem][exercise]
    try:
        run_cell(visible, exercise, candidate)
    except AssertionError as e:
        assert has_chinese(str(e)), f"the visible test's message has no Chinese translation: {e}"
    except Exception:
        pass  # the learner's code crashed inside the visible test: the traceback shows where
    try:  # the hidden tests catch it, whatever the visible one did
        run_cell(hidden, exercise, candidate)
    except AssertionError as caught:
        text = str(caught)
    else:
        pytest.fail(f"grading misses this wrong solution of {exercise}; {oracle_says(hidden, exercise, candidate)}")
    if words:
        assert words in text, f"the failure message does not name the mistake: {text}"
    assert has_chinese(text), f"the message has no Chinese translation: {text}"


def oracle_says(hidden, exercise, candidate) -> str:
    """What the oracle family (the exercise's whole declared input space) says of a candidate: the
    probe that catches it, which the grading family lacks, or that the space itself is too narrow."""
    from autograder.checks.core import harness
    harness.ORACLE[0] = True
    try:
        run_cell(hidden, exercise, candidate)
    except AssertionError as caught:
        return f"the oracle family catches it, so the grading family lacks this probe: {str(caught)[:600]}"
    finally:
        harness.ORACLE[0] = False
    return "the oracle family misses it too: its input space lacks the axis or level that shows this mistake"


def _defined(source, name, namespace):
    exec(source, namespace)
    return namespace[name]


def shortcuts(exercise):
    """Ways to hand in the course's own reference for `exercise` instead of one's own work."""
    twins = utils_twins(exercise)
    if not twins:
        return {}
    module, attr = twins[0]
    original = getattr(module, attr)
    found = {"the utils object itself": original, "functools.partial of it": functools.partial(original),
             "a closure over it": _defined("def wrap(reference):\n"
                                           "    def inner(*args, **kwargs):\n"
                                           "        return reference(*args, **kwargs)\n"
                                           "    return inner\n", "wrap", {})(original)}
    if isinstance(original, type):
        found["a subclass"] = type(exercise, (original,), {})
        found["an aliased import inside a class"] = _defined(
            f"class {exercise}(nn.Module):\n"
            "    def __init__(self, *args, **kwargs):\n"
            "        super().__init__()\n"
            "        self.inner = _reference(*args, **kwargs)\n"
            "    def forward(self, *args, **kwargs):\n"
            "        return self.inner(*args, **kwargs)\n", exercise, {"_reference": original, "nn": nn})
    else:
        call = "(*args, **kwargs):\n    return {}(*args, **kwargs)\n"
        found["an aliased import"] = _defined(f"def {exercise}" + call.format("_reference"), exercise, {"_reference": original})
        found["the utils module's attribute"] = _defined(f"def {exercise}" + call.format(f"_module.{attr}"), exercise,
                                                         {"_module": module})
        found["a helper bound to the exercise's name"] = _defined("def helper" + call.format("_reference"), "helper",
                                                                  {"_reference": original})
    return found


def with_companions(stem, exercise, candidate):
    """The other names of the exercise's cell (a kernel's launcher) bound to their utils twins too:
    the whole reference handed in."""
    others = [n for n in cell_names(stem, exercise) if n != exercise]
    return {exercise: candidate, **{n: getattr(*utils_twins(n)[0]) for n in others}} if others else candidate


SHORTCUTS = [pytest.param(stem, exercise, with_companions(stem, exercise, candidate), id=f"{stem[:2]}-{exercise}-{label}")
             for stem in ZOO for exercise in SOURCES[stem] for label, candidate in shortcuts(exercise).items()]


@pytest.mark.parametrize("stem, exercise, candidate", SHORTCUTS)
def test_the_course_reference_is_no_solution(stem, exercise, candidate):
    """Every exercise with a utils twin: the twin itself, an alias, a partial, a closure over it, or a subclass fails as a shortcut."""
    _, hidden = SOURCES[stem][exercise]
    with pytest.raises(Shortcut) as failure:
        run_cell(hidden, exercise, candidate)
    text = str(failure.value)
    assert "utils" in text and has_chinese(text), f"the shortcut message must name utils, in both languages: {text}"


def test_every_exercise_with_a_utils_twin_is_guarded():
    """The shortcut cases above cover every such exercise (a renamed utils function would drop it silently)."""
    covered = {(stem, exercise) for stem, exercise, _ in (p.values for p in SHORTCUTS)}
    twins = {(stem, exercise) for stem in ZOO for exercise in SOURCES[stem] if utils_twins(exercise)}
    assert covered == twins


@pytest.mark.parametrize("stem, exercise, entry", cases("RIGHT"))
def test_valid_alternative_passes(stem, exercise, entry):
    run_test_cells(stem, exercise, entry)


def test_every_exercise_has_wrong_and_right_solutions():
    for stem, zoo in ZOO.items():
        for exercise, sources in SOURCES[stem].items():
            assert len(sources) == 2 and "BEGIN HIDDEN TESTS" in sources[1], \
                f"{stem}: {exercise} needs a visible test cell and a hidden one"
        assert set(zoo.WRONG) == set(SOURCES[stem]), f"{stem}: wrong solutions missing for some exercises"
        assert set(zoo.RIGHT) == set(SOURCES[stem]), f"{stem}: valid alternatives missing for some exercises"


def test_stubs_fail_every_test_cell():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    for stem, exercises in SOURCES.items():
        for exercise, sources in exercises.items():
            for source in sources:
                with pytest.raises((NotImplementedError, AssertionError)):
                    exec(source, {name: stub for name in cell_names(stem, exercise)})


def test_checks_import_nothing_heavy():
    """Every notebook's test cells, hidden ones included, run on a right solution in a fresh
    process, import none of these: each costs a second or more of every submit that reaches it
    (torch imports them on first use of, e.g., a TorchDispatchMode, torch.broadcast_shapes,
    torch.testing.assert_close or an optimizer)."""
    heavy = ("torch._dynamo", "sympy", "torch.distributed.tensor", "torch._inductor")
    script = (
        "import sys, torch\n"
        "from autograder.tests.test_wrong_solutions import ZOO, run_test_cells\n"
        "for stem, zoo in ZOO.items():\n"
        "    for exercise, entries in zoo.RIGHT.items():\n"
        "        run_test_cells(stem, exercise, next(iter(entries.values())))\n"
        "        for name in %r:\n"
        "            if name in sys.modules:\n"
        "                sys.exit(f'{stem} {exercise}: the checks imported {name}')\n" % (heavy,))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
