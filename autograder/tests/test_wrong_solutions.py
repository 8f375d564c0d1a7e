"""Tests of the tests: run the very code of each notebook's test cells, hidden ones included,
against every wrong solution (it must fail, with a message that names the mistake) and every
valid alternative (it must pass)."""
import importlib

import pytest

from autograder.notebooks import SOLUTIONS, course_notebooks, read_notebook, grading_cell_sources

ZOO = {stem: importlib.import_module(f"autograder.tests.zoo.nb{stem[:2]}") for stem in course_notebooks()}
SOURCES = {stem: grading_cell_sources(read_notebook(SOLUTIONS / f"{stem}.ipynb")) for stem in course_notebooks()}


def run_cell(source, exercise, candidate):
    """Execute one test cell with `candidate` bound to the exercise's name, as a fresh kernel would."""
    exec(compile(source, f"<{exercise} test cell>", "exec"), {exercise: candidate})


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
    with pytest.raises(AssertionError) as failure:  # the hidden tests catch it, whatever the visible one did
        run_cell(hidden, exercise, candidate)
    text = str(failure.value)
    if words:
        assert words in text, f"the failure message does not name the mistake: {text}"
    assert has_chinese(text), f"the message has no Chinese translation: {text}"


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
                    exec(source, {exercise: stub})
