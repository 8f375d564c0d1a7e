"""The learner's real grading path: `python -m autograder submit`, with nbgrader generating,
autograding and writing feedback for real (grade-all: test_batch.py)."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import nbformat
import pytest

from autograder.checks.core import rules
from autograder.notebooks import COURSE, ROOT, SOLUTIONS, course_notebooks
from autograder.tests.outputs import differences

STEMS = course_notebooks()


def submit(path, *extra, timeout=None, env=None):
    """Run a submit with a temporary folder of its own, and check that it leaves nothing there
    (the grading workspace, the kernel's socket folder)."""
    cmd = [sys.executable, "-m", "autograder", "submit", str(path), "--json", *extra]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    with tempfile.TemporaryDirectory(prefix="submit-tmp-") as tmp:
        result = subprocess.run(cmd, capture_output=True, text=True, cwd="/", timeout=600,
                                env={**os.environ, "TMPDIR": tmp, **(env or {})})
        assert not os.listdir(tmp), f"grading left {os.listdir(tmp)} in the temporary folder"
    return result


def graded(path, *extra, timeout=None, env=None):
    """Submit `path`, check the JSON contract and that the file was left untouched."""
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = submit(path, *extra, timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not result.stderr.strip(), f"a successful submit prints nothing on stderr: {result.stderr[-1000:]}"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "grading modified the learner's notebook"
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, f"--json must print exactly one JSON object, got: {result.stdout[:500]}"
    report = json.loads(lines[0])
    assert set(report) == {"notebook", "score", "max_score", "exercises", "feedback_html"}
    for exercise in report["exercises"]:
        assert set(exercise) == {"name", "score", "max_score", "feedback"}
    assert report["score"] == pytest.approx(sum(e["score"] for e in report["exercises"]))
    with open(report["feedback_html"], encoding="utf-8") as f:
        assert "<html" in f.read(4000).lower()
    return report, {e["name"]: e for e in report["exercises"]}


def with_cells(stem, tmp_path, source_dir=SOLUTIONS, name=None, **sources):
    """A copy of a notebook with the cells of the given grade_ids replaced."""
    nb = nbformat.read(source_dir / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in sources:
            cell.source = sources.pop(gid)
    assert not sources, f"no such cells: {list(sources)}"
    path = tmp_path / (name or f"{stem}.ipynb")
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("stem", STEMS)
def test_solution_scores_full_marks_and_reproduces_its_outputs(stem, tmp_path):
    """The one execution of each solution in make test: full marks through the real submit path,
    and the outputs stored in solutions/ are what it prints (nbval's rules, figures aside); and
    the rules its checks enforced are the ones its contracts declare (rules.py), both ways."""
    log = tmp_path / "rules.jsonl"
    report, _ = graded(SOLUTIONS / f"{stem}.ipynb", "--workspace", str(tmp_path / "ws"), env={rules.LOG_ENV: str(log)})
    assert report["max_score"] > 0
    assert report["score"] == report["max_score"], report
    contracts = rules.load(stem[:2])
    if contracts:
        drift = rules.drift(contracts, rules.read_log(log) if log.exists() else {})
        assert not drift, "the checks and the contracts disagree:\n" + "\n".join(drift)
    executed = tmp_path / "ws" / "autograded" / "learner" / stem / f"{stem}.ipynb"
    stale = differences(SOLUTIONS / f"{stem}.ipynb", executed)
    assert not stale, f"stored outputs of solutions/{stem}.ipynb are stale (make sync NB={stem}): " + "; ".join(stale)


@pytest.mark.parametrize("stem", STEMS)
def test_untouched_course_notebook_scores_zero(stem):
    report, exercises = graded(COURSE / f"{stem}.ipynb")
    assert report["score"] == 0 and report["max_score"] > 0
    assert all("not implemented yet" in e["feedback"].lower()
               for e in exercises.values()), exercises


def test_infinite_loop_costs_only_its_exercise(tmp_path):
    path = with_cells("00_tokens_and_embeddings", tmp_path,
                      embed="def embed(token_ids, weight):\n    while True:\n        pass\n")
    report, exercises = graded(path, timeout=8)  # margin for `import torch` on a busy machine
    assert exercises["embed"]["score"] == 0
    assert "did not finish within 8 s" in exercises["embed"]["feedback"]
    assert exercises["encode"]["score"] == exercises["encode"]["max_score"]


def test_wrong_exponent_costs_only_its_exercise(tmp_path):
    """Issue 29, point 8: a wrong exponent in rope_inverse_frequencies costs marks there only;
    apply_rope and RoPEMultiHeadAttention, which call it, are graded with the course's version."""
    wrong = ("def rope_inverse_frequencies(head_dim, theta=10000.0):\n"
             "    return theta ** (-torch.arange(0, head_dim // 2, dtype=torch.float32) / head_dim)\n")
    path = with_cells("08_positions_and_rope", tmp_path, rope_inverse_frequencies=wrong)
    _, exercises = graded(path)
    assert exercises["rope_inverse_frequencies"]["score"] == 0
    assert "theta^(-i/d)" in exercises["rope_inverse_frequencies"]["feedback"]
    for later in ("apply_rope", "RoPEMultiHeadAttention"):
        assert exercises[later]["score"] == exercises[later]["max_score"], exercises[later]["feedback"]


WRONG_EARLIER = {  # issue 29, point 8: a wrong earlier exercise costs marks there only, in every notebook where later ones call it
    "06_multi_head_attention": ("split_heads", "def split_heads(x, num_heads):\n"
                                "    B, T, D = x.shape\n"
                                "    return x.reshape(B, num_heads, T, D // num_heads)  # mixes tokens into heads\n",
                                ("MultiHeadAttention",)),
    "12_capstone_mini_deepseek": ("RMSNorm", "import torch\nfrom torch import nn\n"
                                  "class RMSNorm(nn.Module):\n"
                                  "    def __init__(self, dim, eps=1e-6):\n"
                                  "        super().__init__()\n"
                                  "        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))\n"
                                  "    def forward(self, x):  # the mean of |x|, not the root mean square\n"
                                  "        return x / (x.abs().mean(-1, keepdim=True) + self.eps) * self.weight\n",
                                  ("Block", "MiniDeepSeek")),
    "13_sparse_attention": ("topk_key_mask", "import torch\n"
                            "def topk_key_mask(index_scores, topk):  # keeps the lowest scores\n"
                            "    chosen = index_scores.topk(min(topk, index_scores.shape[-1]), dim=-1, largest=False).indices\n"
                            "    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True)\n"
                            "    return ~(keep & torch.isfinite(index_scores))\n",
                            ("SparseMLA",)),
    "16_linear_attention": ("gated_delta_step", "def gated_delta_step(state, q, k, v, g, beta):  # decays after the write\n"
                            "    predicted = (k[..., None, :] @ state).squeeze(-2)\n"
                            "    state = state + k[..., :, None] * (beta[..., None] * (v - predicted))[..., None, :]\n"
                            "    state = state * g.exp()[..., None, None]\n"
                            "    return (q[..., None, :] @ state).squeeze(-2), state\n",
                            ("recurrent_gated_delta_rule", "chunk_gated_delta_rule")),
}


@pytest.mark.parametrize("stem", WRONG_EARLIER)
def test_a_wrong_earlier_exercise_costs_only_its_own_marks(stem, tmp_path):
    exercise, source, later = WRONG_EARLIER[stem]
    _, exercises = graded(with_cells(stem, tmp_path, **{exercise: source}))
    assert exercises[exercise]["score"] < exercises[exercise]["max_score"]
    for name in later:
        assert exercises[name]["score"] == exercises[name]["max_score"], (name, exercises[name]["feedback"])


def test_edited_test_cell_is_graded_with_the_original(tmp_path):
    path = with_cells("00_tokens_and_embeddings", tmp_path, source_dir=COURSE,
                      test_encode="print('all tests passed')", test_encode_hidden="pass")
    _, exercises = graded(path)
    assert exercises["encode"]["score"] == 0
    assert "not implemented yet" in exercises["encode"]["feedback"].lower()


def test_deleted_test_cell_scores_zero_with_a_reason(tmp_path):
    stem = "00_tokens_and_embeddings"
    nb = nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_encode_hidden"]
    nbformat.write(nb, tmp_path / f"{stem}.ipynb")
    _, exercises = graded(tmp_path / f"{stem}.ipynb")
    assert exercises["encode"]["score"] < exercises["encode"]["max_score"]
    assert "missing from your notebook" in exercises["encode"]["feedback"]
    assert exercises["embed"]["score"] == exercises["embed"]["max_score"]


def test_wrong_solution_gets_a_reason_in_words(tmp_path):
    naive = ("def softmax(x, dim=-1):\n"
             "    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n")
    # A renamed download is still recognised by its graded cells.
    path = with_cells("01_dot_product_attention", tmp_path, softmax=naive,
                      name="01_dot_product_attention (1).ipynb")
    report, exercises = graded(path)
    assert report["notebook"].endswith("(1).ipynb")
    assert exercises["softmax"]["score"] == 0
    assert "subtract each slice's own maximum" in exercises["softmax"]["feedback"]
    assert exercises["attention_scores"]["score"] == exercises["attention_scores"]["max_score"]


@pytest.mark.parametrize("content, words", [
    (None, "no such file"),
    ('{"cells": [', "not valid JSON"),
    ('{"name": "not a notebook"}', "not a Jupyter notebook"),
    (json.dumps(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])), "not a notebook of this course"),
])
def test_bad_input_is_one_clear_line(tmp_path, content, words):
    path = tmp_path / "99_mystery.ipynb"
    if content is not None:
        path.write_text(content)
    result = submit(path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and words in result.stderr, result.stderr


def test_course_is_generated_from_solutions():
    result = subprocess.run([sys.executable, "-m", "autograder", "release", "--check"],
                            capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr


def test_timing_command_reports_each_notebook():
    """`make timing` runs: the headless run and both submits of a notebook, with their scores.
    Whether the goals are met depends on the machine, so the exit code is not asserted here."""
    stem = "05_attention_dropout"
    result = subprocess.run([sys.executable, "-m", "autograder", "timing", stem, "--json"],
                            capture_output=True, text=True, cwd="/", timeout=600)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    report = json.loads(result.stdout)
    (row,) = report["rows"]
    assert 0 < report["import_torch_before_s"] < row["solution_s"] and report["import_torch_after_s"] > 0  # the yardstick
    assert row["notebook"] == stem and row["headless_s"] > 0
    assert row["solution_score"] == "6/6" and row["stub_score"] == "0/6"
    assert row["goals_met"] == (max(row["solution_s"], row["stub_s"]) <= min(10.0, row["headless_s"] + 3.0))
    assert "| notebook | headless |" in result.stderr
