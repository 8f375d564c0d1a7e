"""The exercise contract holds: the exercises found in solutions/ are the ones CURRICULUM.md and
the README's table name, and every check_* of autograder/checks is called by exactly one hidden
test cell, the one of its own exercise.

CURRICULUM.md is the repository's copy of the contract; where the planning folder's original
(../shared/curriculum.md beside the clone) exists, the copy must say the same about exercises.
"""
import importlib
import inspect
import re

import pytest

from autograder.notebooks import ROOT, SOLUTIONS, course_notebooks, exercises, grading_cell_sources, read_notebook

CONTRACT = ROOT / "CURRICULUM.md"
SHARED = ROOT.parent / "shared" / "curriculum.md"


def contract_lines(text: str, references: bool = False) -> dict[str, list[str]]:
    """Notebook number -> the contract's exercise lines ("- `name(...)` ..." under "### NN ..."); with
    `references`, the lines of the reference files it fixes instead ("- `utils/linear_attention.py`:"
    and the indented lines under it, 16's external parity check calls those names)."""
    sections, current, in_reference = {}, None, False
    for line in text.splitlines():
        heading = re.match(r"### (\d\d) ", line)
        if heading:
            current, in_reference = sections.setdefault(heading.group(1), []), False
        elif line.startswith("## "):
            current = None
        elif current is not None and line.startswith("- `"):
            in_reference = line.startswith("- `utils/")
            if in_reference == references:
                current.append(line)
        elif current is not None and references and in_reference and line.startswith("  "):
            current.append(line)
        elif not line.startswith("  "):
            in_reference = False
    return sections


def contract_exercises(text: str) -> dict[str, list[str]]:
    return {nn: [re.match(r"- `(?:class )?(\w+)", line).group(1) for line in lines]
            for nn, lines in contract_lines(text).items()}


def readme_exercises() -> dict[str, list[str]]:
    table = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| (\d\d) \|[^|]*\|([^|]*)\|", line)
        if row:
            table[row.group(1)] = re.findall(r"`(\w+)`", row.group(2))
    return table


NOTEBOOKS = course_notebooks()


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_exercises_match_the_contract_and_the_readme(stem):
    found = sorted(exercises(read_notebook(SOLUTIONS / f"{stem}.ipynb")))  # the contract fixes names, not their order
    number = stem[:2]
    contract = sorted(contract_exercises(CONTRACT.read_text(encoding="utf-8")).get(number, []))
    readme = sorted(readme_exercises().get(number, []))
    assert found == contract, f"{stem}: exercises {found}, CURRICULUM.md section {number} names {contract}"
    assert found == readme, f"{stem}: exercises {found}, the README's table row {number} names {readme}"


@pytest.mark.skipif(not SHARED.exists(), reason="no ../shared/curriculum.md beside this clone")
def test_the_copy_of_the_contract_matches_the_shared_one():
    """Every exercise line and every reference line of the shared contract, in the copy. Where the
    shared contract leaves the exercise names to the notebook (16), the copy records them."""
    ours, shared = (contract_lines(f.read_text(encoding="utf-8")) for f in (CONTRACT, SHARED))
    named = {nn: lines for nn, lines in shared.items() if lines}
    assert {nn: ours.get(nn) for nn in named} == named and set(ours) >= set(shared), \
        "CURRICULUM.md's exercise lines differ from ../shared/curriculum.md: copy the new contract in"
    assert contract_lines(CONTRACT.read_text(encoding="utf-8"), references=True) == \
        contract_lines(SHARED.read_text(encoding="utf-8"), references=True), \
        "CURRICULUM.md's reference names (utils/...) differ from ../shared/curriculum.md: copy them in"


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_every_check_is_called_by_exactly_one_hidden_cell(stem):
    number = stem[:2]
    module = importlib.import_module(f"autograder.checks.nb{number}")
    checks = {name for name, fn in inspect.getmembers(module, inspect.isfunction)
              if name.startswith("check_") and fn.__module__ == module.__name__}
    calls = {}
    for exercise, sources in grading_cell_sources(read_notebook(SOLUTIONS / f"{stem}.ipynb")).items():
        hidden = [s for s in sources if "BEGIN HIDDEN TESTS" in s]
        for source in hidden:
            for name in re.findall(rf"\bnb{number}\.(check_\w+)\(", source):
                calls.setdefault(name, []).append(exercise)
        assert any(re.search(rf"\bnb{number}\.check_{exercise}\({exercise}[,)]", s) for s in hidden), \
            f"{stem}: the hidden cell of {exercise} must call nb{number}.check_{exercise}({exercise}) (a kernel's: ({exercise}, launcher))"
    assert set(calls) == checks, f"{stem}: checks never called {sorted(checks - set(calls))}, " \
                                 f"called but missing {sorted(set(calls) - checks)}"
    twice = {name: where for name, where in calls.items() if len(where) != 1}
    assert not twice, f"{stem}: checks called by more than one hidden cell: {twice}"


def test_the_contract_parser_reads_every_notebook():
    sections = contract_exercises(CONTRACT.read_text(encoding="utf-8"))
    assert sorted(sections) == [f"{n:02d}" for n in range(17)]
    assert "utils" not in sections["16"] and sections["16"][0] == "linear_attention_recurrent"
    references = contract_lines(CONTRACT.read_text(encoding="utf-8"), references=True)["16"]
    assert references[0].startswith("- `utils/linear_attention.py`") and any("chunk_kda" in line for line in references)
    assert sections["01"][1] == "softmax" and sections["11"][-2] == "Int8WeightOnlyLinear"
