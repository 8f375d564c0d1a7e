"""Submissions that attack the grading path itself, graded through the real `submit` with the
course's real configuration (autograder/nbgrader_config.py): an infinite loop, a kernel that
dies, a notebook that patches the checks. Each still gets a verdict in words, within the bound,
and the learner's file is left as it was."""
import hashlib
import json
import subprocess
import sys
import time

import nbformat
from traitlets.config.loader import PyFileConfigLoader

from autograder.notebooks import SOLUTIONS
from autograder.workspace import CONFIG

STEM = "01_dot_product_attention"
CONFIG_VALUES = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
CELL_TIMEOUT = CONFIG_VALUES.Execute.timeout
NOTEBOOK_TIMEOUT = CONFIG_VALUES.GradingExecute.notebook_timeout
# generate_assignment, kernel start, generate_feedback and a busy machine, on top of the limit.
OVERHEAD = 60


def notebook_with(tmp_path, **sources):
    """A copy of notebook 01's solution with the cells of the given grade_ids replaced."""
    nb = nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in sources:
            cell.source = sources.pop(gid)
    assert not sources, f"no such cells: {list(sources)}"
    path = tmp_path / f"{STEM}.ipynb"
    nbformat.write(nb, path)
    return path


def graded(path, bound: float):
    """Submit through `python -m autograder submit --json`: exit 0, one JSON object, within
    `bound` seconds, the file untouched."""
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "autograder", "submit", str(path), "--json"],
                            capture_output=True, text=True, cwd="/", timeout=bound + 120)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "grading modified the learner's notebook"
    assert elapsed < bound, f"graded in {elapsed:.0f} s, the bound is {bound} s"
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, f"--json must print exactly one JSON object, got: {result.stdout[:500]}"
    report = json.loads(lines[0])
    assert set(report) == {"notebook", "score", "max_score", "exercises", "feedback_html"}
    return report, {e["name"]: e for e in report["exercises"]}, elapsed


def test_the_configured_bounds_are_minutes_not_quarter_hours():
    assert 30 <= CELL_TIMEOUT <= NOTEBOOK_TIMEOUT <= 300


def test_an_infinite_loop_is_bounded_for_the_whole_notebook(tmp_path):
    # Every later cell that calls softmax would loop too: about eight cells of 01. A sleeping
    # loop costs the same wall time as `while True: pass` without taking a core from the
    # other tests.
    path = notebook_with(tmp_path, softmax=(
        "import time\n\ndef softmax(x, dim=-1):\n    while True:\n        time.sleep(0.05)\n"))
    report, exercises, elapsed = graded(path, bound=NOTEBOOK_TIMEOUT + OVERHEAD)
    assert elapsed > CELL_TIMEOUT, "the loop should have cost at least one cell's timeout"
    assert exercises["attention_scores"]["score"] == exercises["attention_scores"]["max_score"]
    assert exercises["softmax"]["score"] == 0
    for name in ("context_vector", "self_attention_weights", "self_attention"):
        assert exercises[name]["score"] == 0, exercises[name]
    stopped = [e["feedback"] for e in exercises.values() if "Not run" in e["feedback"]]
    assert stopped, exercises
    assert f"time limit of {NOTEBOOK_TIMEOUT} s" in stopped[-1]
    assert "The first cell that ran out of time was the test cell `test_softmax`" in stopped[-1]
    assert "最先超时的是测试单元格 `test_softmax`" in stopped[-1]
    with open(report["feedback_html"], encoding="utf-8") as f:
        assert "test_softmax" in f.read()


def test_a_dead_kernel_still_gets_a_verdict(tmp_path):
    path = notebook_with(tmp_path, context_vector=(
        "import os\n\ndef context_vector(weights, inputs):\n    return weights @ inputs\n\nos._exit(1)\n"))
    report, exercises, _ = graded(path, bound=OVERHEAD + 30)
    assert exercises["attention_scores"]["score"] == exercises["attention_scores"]["max_score"]
    assert exercises["softmax"]["score"] == exercises["softmax"]["max_score"]
    for name in ("context_vector", "self_attention_weights", "self_attention"):
        assert exercises[name]["score"] == 0, exercises[name]
        assert "kernel died while running your cell `context_vector`" in exercises[name]["feedback"]
        assert "内核在运行你的单元格 `context_vector`时退出了" in exercises[name]["feedback"]
    assert report["score"] == 6


PATCH_THE_CHECKS = '''
def softmax(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)  # no max subtracted: wrong

import sys
import autograder.checks, autograder.checks.nb01, utils.attention

def _passes(*args, **kwargs):
    return None

for _name, _module in list(sys.modules.items()):
    if _name.split(".")[0] in ("autograder", "utils"):
        for _attr, _value in list(vars(_module).items()):
            if callable(_value) and _attr.startswith(("check", "assert", "expect")):
                setattr(_module, _attr, _passes)
autograder.checks.fail = _passes
utils.attention.softmax = softmax
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.all = lambda self, *args, **kwargs: torch.tensor(True)
get_ipython().input_transformers_post.append(
    lambda lines: ["pass\\n"] if any("check_" in line for line in lines) else lines)
'''


def test_patching_the_checks_buys_nothing(tmp_path):
    path = notebook_with(tmp_path, softmax=PATCH_THE_CHECKS)
    report, exercises, _ = graded(path, bound=OVERHEAD + 60)
    assert exercises["softmax"]["score"] == 0, exercises["softmax"]
    assert "subtract" in exercises["softmax"]["feedback"], exercises["softmax"]
    for name in ("attention_scores", "context_vector"):
        assert exercises[name]["score"] == exercises[name]["max_score"], exercises[name]
    # The later exercises call the wrong softmax: what they score depends on their checks, not on the patch.
    assert report["score"] < report["max_score"]
