"""The text source of every solution notebook: solutions/NN_name.py (jupytext py:percent).

    python -m autograder sync [STEM ...]           # .py -> .ipynb, then execute (fresh outputs)
    python -m autograder sync --check              # exit 1 when a pair is out of sync

Maintainers edit the .py (it reads well in a diff); the .ipynb beside it is what nbgrader,
nbval and the learner's course/ are made from, so the two must say the same thing: same cells,
same sources, same nbgrader metadata. Only nbgrader's cell metadata is kept in the text
(solutions/jupytext.toml), so execution metadata never shows up in a diff.
"""
import re
from pathlib import Path

import jupytext
import nbformat
from jupytext.combine import combine_inputs_with_outputs

from autograder.notebooks import SOLUTIONS

FORMAT = "py:percent"


def stems() -> list[str]:
    names = {p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.py")} | {p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb")}
    return sorted(names)


# The Rules blocks: generated from the exercises' contracts (autograder/checks/core/rules.py) into the
# text source, between these markers, so the text a learner reads and the checks cannot disagree.
_RULES = re.compile(r"^(?P<prefix># |)<!-- rules: (?P<name>\w+) -->\n.*?^(?P=prefix)<!-- /rules -->$", re.M | re.S)


def rules_markdown(name: str, notebook: str | None) -> str:
    """The generated block for `name` ("general": the course-wide rules)."""
    from autograder.checks.core import rules
    if name == "general":
        return rules.general_block()
    contracts = rules.load(notebook) if notebook else {}
    if name not in contracts:
        raise KeyError(f"no contract declares {name} (autograder/checks/nb{notebook}/contract.py CONTRACTS)")
    return rules.rules_block(contracts[name])


def with_rules(text: str, notebook: str | None) -> str:
    """`text` with every Rules block regenerated, commented as its marker is (jupytext markdown: "# ")."""
    def block(m):
        prefix = m.group("prefix")
        body = rules_markdown(m.group("name"), notebook)
        inner = "\n".join((prefix + line).rstrip() if line else prefix.rstrip() for line in body.split("\n"))
        return f"{prefix}<!-- rules: {m.group('name')} -->\n{inner}\n{prefix}<!-- /rules -->"
    return _RULES.sub(block, text)


def rules_markers(text: str) -> list[str]:
    return [m.group("name") for m in _RULES.finditer(text)]


def stale_rules(stem: str) -> str:
    """'' when solutions/<stem>.py's Rules blocks say what the contracts generate."""
    py = SOLUTIONS / f"{stem}.py"
    text = py.read_text(encoding="utf-8") if py.exists() else ""
    return "" if with_rules(text, stem[:2]) == text else f"{py.name}: a Rules block differs from its contract (make sync rewrites it)"


def write_rules(path: Path, notebook: str | None) -> bool:
    text = path.read_text(encoding="utf-8")
    new = with_rules(text, notebook)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


GRADING = SOLUTIONS.parent / "GRADING.md"  # its course-wide rules are notebook 00's block


def _cells(nb) -> list[tuple]:
    return [(c.cell_type, c.source.strip(), c.get("metadata", {}).get("nbgrader")) for c in nb.cells]


def differences(stem: str) -> str:
    """'' when solutions/<stem>.py and .ipynb hold the same cells, else what differs first."""
    py, ipynb = SOLUTIONS / f"{stem}.py", SOLUTIONS / f"{stem}.ipynb"
    if not py.exists():
        return f"{ipynb.name} has no text source {py.name} (jupytext --to py:percent)"
    if stale := stale_rules(stem):
        return stale
    if not ipynb.exists():
        return f"{py.name} has no notebook {ipynb.name} (python -m autograder sync {stem})"
    text, notebook = _cells(jupytext.read(py)), _cells(nbformat.read(ipynb, as_version=4))
    for i, (a, b) in enumerate(zip(text, notebook)):
        if a != b:
            if a[0] != b[0] or a[2] != b[2]:
                return f"cell {i} differs ({'type' if a[0] != b[0] else 'nbgrader metadata'}): {a[1][:60]!r}"
            at = next((j for j, (x, y) in enumerate(zip(a[1], b[1])) if x != y), min(len(a[1]), len(b[1])))
            return (f"cell {i} differs from character {at}: {a[1][max(0, at - 20):at + 40]!r} in .py, "
                    f"{b[1][max(0, at - 20):at + 40]!r} in .ipynb")
    if len(text) != len(notebook):
        return f"{len(text)} cells in {py.name}, {len(notebook)} in {ipynb.name}"
    return ""


def out_of_sync() -> dict[str, str]:
    stale = {stem: d for stem in stems() if (d := differences(stem))}
    if GRADING.exists() and with_rules(text := GRADING.read_text(encoding="utf-8"), None) != text:
        stale["GRADING.md"] = "its course-wide rules differ from autograder/checks/core/rules.py (make sync rewrites them)"
    return stale


def sync(stem: str, execute: bool = True, timeout: int = 600) -> Path:
    """Write solutions/<stem>.ipynb from its .py (outputs kept where a cell is unchanged), then
    execute it in solutions/ so its stored outputs are fresh for nbval."""
    py, ipynb = SOLUTIONS / f"{stem}.py", SOLUTIONS / f"{stem}.ipynb"
    write_rules(py, stem[:2])  # the Rules blocks first: the notebook is made from the text they are in
    nb = jupytext.read(py)
    if ipynb.exists():
        nb = combine_inputs_with_outputs(nb, nbformat.read(ipynb, as_version=4), fmt=FORMAT)
    nb.metadata.pop("jupytext", None)  # the pairing lives in solutions/jupytext.toml, not in every notebook
    if execute:
        from nbconvert.preprocessors import ExecutePreprocessor
        ExecutePreprocessor(timeout=timeout, kernel_name="python3").preprocess(nb, {"metadata": {"path": str(SOLUTIONS)}})
    nbformat.write(nb, ipynb)
    return ipynb
