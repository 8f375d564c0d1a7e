"""The broad oracle family (a covering array of strength 3 of each exercise's declared input
space: harness.Family.oracle(broad=True); the whole space is `python -m autograder mutants`'s)
accepts every correct solution: the zoo's valid alternatives and the model answers. Grading runs
a covering array of that space; a correct solution that some other point of the space rejects
would be a false rejection waiting for a learner (a tolerance too tight for bfloat16, a layout the
reference itself mishandles, a precondition the space forgot). The other half, wrong solutions
the grading family misses while the oracle catches them, is test_wrong_solutions' (it names the
oracle's probe) and `python -m autograder mutants`'s."""
import pytest

from autograder import answers
from autograder.checks.core import harness
from autograder.notebooks import SOLUTIONS, grading_cell_sources, read_notebook
from autograder.tests.test_wrong_solutions import SOURCES, ZOO, cases, run_cell

pytestmark = pytest.mark.slow


def _with_spaces(stem) -> bool:
    import importlib
    families = getattr(importlib.import_module(f"autograder.checks.nb{stem[:2]}.contract"), "FAMILIES", {})
    return any(getattr(f, "space", None) is not None for f in families.values())


@pytest.fixture
def oracle():
    harness.ORACLE[0] = "broad"  # every triple of levels; the whole space is the mutants command's
    yield
    harness.ORACLE[0] = False


@pytest.mark.parametrize("stem, exercise, entry", [c for c in cases("RIGHT") if _with_spaces(c.values[0])])
def test_the_oracle_accepts_every_valid_alternative(stem, exercise, entry, oracle):
    run_cell(SOURCES[stem][exercise][1], exercise, entry)


@pytest.mark.parametrize("stem", [s for s in ZOO if _with_spaces(s)])
def test_the_oracle_accepts_the_model_answers(stem, oracle):
    namespace = answers.namespace(stem)
    for exercise, (_, hidden) in grading_cell_sources(read_notebook(SOLUTIONS / f"{stem}.ipynb")).items():
        exec(compile(hidden, f"<{exercise} hidden test cell>", "exec"), dict(namespace))
