"""Every rule that can cost a mark is declared once and readable where the learner reads:

- every exercise has a contract (autograder/checks/core/rules.py), and its text ends with the Rules
  block the contract generates, as it is now (`make sync` rewrites it);
- notebook 00 and GRADING.md show the course-wide rules as rules.py says them;
- the checks take their rules from the contracts only: no check module lists a forbidden call,
  a helper, an own-earlier exercise or an argument that may change in place itself;
- each exercise's input space declares every axis its signature and kind make applicable.

Whether the checks really enforce what the contracts declare, both ways, is asserted where each
model answer is graded for real (test_submit.py, through the AUTOGRADER_RULES_LOG record).
"""
import ast
import importlib
import inspect
import re

import pytest
import torch
from torch import nn

from autograder import sources
from autograder.checks.core import rules
from autograder.checks.core.harness import _is_steps
from autograder.checks.core.shortcuts import utils_twins
from autograder.notebooks import ROOT, SOLUTIONS, course_notebooks, exercises, read_notebook

STEMS = course_notebooks()
EXERCISES = [(stem, name) for stem in STEMS for name in exercises(read_notebook(SOLUTIONS / f"{stem}.ipynb"))]
# Notebooks whose exercises are not declared yet (issue 35): this set only shrinks.
PENDING: set = set()


def _contracts(stem):
    return rules.load(stem[:2])


@pytest.mark.parametrize("stem, name", EXERCISES, ids=[f"{s[:2]}-{n}" for s, n in EXERCISES])
def test_every_exercise_has_a_contract_and_shows_its_rules(stem, name):
    if stem[:2] in PENDING:
        pytest.skip(f"notebook {stem[:2]}'s contracts are not declared yet")
    contract = _contracts(stem).get(name)
    assert contract is not None, f"{name} has no Contract in autograder/checks/nb{stem[:2]}/contract.py CONTRACTS"
    text = (SOLUTIONS / f"{stem}.py").read_text(encoding="utf-8")
    cell = next((c for c in re.split(r"(?m)^(?=# %%)", text) if re.search(rf"^# ### Exercise \w+ · `{name}`", c, re.M)), "")
    assert f"<!-- rules: {name} -->" in cell, f"the text of exercise {name} has no Rules block (<!-- rules: {name} --> ... <!-- /rules -->)"


@pytest.mark.parametrize("stem", STEMS)
def test_the_rules_blocks_say_what_the_contracts_generate(stem):
    assert not sources.stale_rules(stem), f"{sources.stale_rules(stem)}: run make sync NB={stem}"
    names = sources.rules_markers((SOLUTIONS / f"{stem}.py").read_text(encoding="utf-8"))
    assert len(names) == len(set(names)), f"a Rules block appears twice in {stem}: {names}"


def test_the_course_wide_rules_are_said_once_in_notebook_00_and_grading_md():
    for path, notebook in ((SOLUTIONS / f"{STEMS[0]}.py", STEMS[0][:2]), (ROOT / "GRADING.md", None)):
        text = path.read_text(encoding="utf-8")
        assert "<!-- rules: general -->" in text, f"{path.name} does not show the course-wide rules"
        assert sources.with_rules(text, notebook) == text, f"{path.name}'s course-wide rules are stale: run make sync"
    for en, zh in rules.GENERAL_RULES:
        assert en and zh and any("\u4e00" <= ch <= "\u9fff" for ch in zh)


def _check_module_source(stem) -> str:
    return (ROOT / "autograder" / "checks" / f"nb{stem[:2]}" / "__init__.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("stem", STEMS)
def test_checks_take_their_rules_from_the_contracts(stem):
    """A rule written into a check, outside its contract, would cost marks unstated."""
    if stem[:2] in PENDING:
        pytest.skip(f"notebook {stem[:2]}'s contracts are not declared yet")
    from autograder.checks.core.inputs import MAY_CHANGE
    from autograder.checks.core.shortcuts import OWN_HELPERS
    tree = ast.parse(_check_module_source(stem))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            keywords = {k.arg for k in node.keywords}
            assert "extra" not in keywords, f"nb{stem[:2]}/__init__.py line {node.lineno}: a forbidden call listed in a check (declare it in the contract)"
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            assert name != "forbid", f"nb{stem[:2]}/__init__.py line {node.lineno}: forbid() called by a check (declare it in the contract)"
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "OWN_EARLIER" for t in node.targets):
            pytest.fail(f"nb{stem[:2]}/__init__.py declares OWN_EARLIER: say earlier='own' in the contract")
    for name in _contracts(stem):
        assert name not in MAY_CHANGE and name not in OWN_HELPERS, f"{name}: MAY_CHANGE/OWN_HELPERS hold what its contract says"


# Axis coverage --------------------------------------------------------------------------------
def _reference(name):
    twins = utils_twins(name)
    return getattr(*twins[0]) if twins else None


def _first_inputs(family):
    built = family.probes[0].build()
    if _is_steps(built):
        return [a for _, args, kwargs in built.calls for a in [*args, *kwargs.values()]]
    args, kwargs = built
    return [*args, *kwargs.values()]


def _flat(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        elif isinstance(v, dict):
            yield from _flat(list(v.values()))
        else:
            yield v


def _signatures(stem, name) -> list:
    """The model answer's own signatures (the exercise's contract, not the course's utils, whose
    extra options are the course's): a function's, or a class's __init__, forward and methods."""
    from autograder import answers
    source = dict(answers.cells(stem)).get(name) or ""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return [node.args]
        if isinstance(node, ast.ClassDef) and node.name == name:
            return [f.args for f in node.body if isinstance(f, ast.FunctionDef) and (f.name == "__init__" or not f.name.startswith("_"))]
    return []


def _instance_methods(stem, name) -> int:
    """A class's public methods called on an instance, forward included: a classmethod or
    staticmethod (Int8WeightOnlyLinear.from_linear) builds an object, it is no step of a sequence."""
    from autograder import answers
    source = dict(answers.cells(stem)).get(name) or ""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return sum(1 for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
                       and not any(isinstance(d, ast.Name) and d.id in ("classmethod", "staticmethod") for d in f.decorator_list))
    return 0


def applicable_axes(stem, name, family) -> set:
    """The axis kinds an exercise's signature and kind make applicable."""
    reference = _reference(name)
    inputs = list(_flat(_first_inputs(family)))
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    module = isinstance(reference, type) and issubclass(reference, nn.Module)
    wanted = {"shape"}
    if tensors or module:
        wanted |= {"values", "dtype"}
    if any(t.dim() >= 2 for t in tensors):
        wanted.add("layout")
    for args in _signatures(stem, name):
        named = args.args[len(args.args) - len(args.defaults):] if args.defaults else []
        for arg, default in [*zip(named, args.defaults), *zip(args.kwonlyargs, args.kw_defaults)]:
            if isinstance(default, ast.Constant) and isinstance(default.value, bool):
                wanted.add(f"flag:{arg.arg}")
        for arg in [*args.args, *args.kwonlyargs]:
            if re.search(r"block|chunk", arg.arg):
                wanted.add("blocks")
    if isinstance(reference, type) and _instance_methods(stem, name) > 1:  # a stateful object: update, reset, ...
        wanted.add("sequence")
    return wanted


@pytest.mark.parametrize("stem, name", EXERCISES, ids=[f"{s[:2]}-{n}" for s, n in EXERCISES])
def test_each_input_space_declares_every_applicable_axis(stem, name):
    if stem[:2] in PENDING:
        pytest.skip(f"notebook {stem[:2]}'s input spaces are not declared yet")
    family = importlib.import_module(f"autograder.checks.nb{stem[:2]}.contract").FAMILIES.get(name)
    assert family is not None and family.space is not None, f"{name} has no declared input space"
    declared = set(family.space.axes)
    kinds = {a.split(":")[0] for a in declared}
    missing = sorted(a for a in applicable_axes(stem, name, family) if a not in declared and a not in kinds)
    assert not missing, f"{name}'s input space lacks the axes {missing} (its signature and kind make them applicable)"
    if "dtype" in declared:
        assert set(family.space.axes["dtype"]) == set(rules.load(stem[:2])[name].dtypes), \
            f"{name}: the dtype axis must be its contract's dtypes"
