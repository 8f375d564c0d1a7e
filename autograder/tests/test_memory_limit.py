"""The grading kernel's memory limit (autograder/prestart.py, GradingExecute.memory_limit_mb):
a notebook that asks for more memory than grading gives it fails with a verdict that names the
limit, and `grade-all --jobs 2` grades the rest of the class as usual."""
import re

import nbformat
import pytest

from autograder.tests.test_batch import KINDS, STEM, grade_all, read_csv, submission

pytestmark = pytest.mark.slow

LIMIT_MB = 1024
# Right answers, plus a 2 GiB tensor built by embed: twice the limit given below.
HOG = "def embed(token_ids, weight):\n    waste = torch.ones(2 << 30, dtype=torch.uint8)\n    return weight[token_ids]\n"


def test_memory_hog_gets_a_verdict_and_the_class_is_graded(tmp_path, monkeypatch):
    monkeypatch.setitem(KINDS, "hog", {"embed": HOG})
    submission(tmp_path / "subs" / "hog" / f"{STEM}.ipynb", "hog")
    submission(tmp_path / "subs" / "fine" / f"{STEM}.ipynb", "right")
    grade_all(tmp_path / "subs", tmp_path / "out", "--jobs", "2", "--memory-mb", str(LIMIT_MB), timeout=30)
    rows = read_csv(tmp_path / "out" / "grades.csv")
    fine, hog = rows["fine", STEM], rows["hog", STEM]
    assert fine["status"] == "graded" and fine["score"] == fine["max_score"], fine
    assert hog["status"] == "graded" and float(hog["score"]) < float(hog["max_score"]), hog
    graded = nbformat.read(tmp_path / "out" / "autograded" / "hog" / f"{STEM}.ipynb", as_version=4)
    verdicts = [o["evalue"] for c in graded.cells for o in c.get("outputs", [])
                if o.get("output_type") == "error" and o.get("ename") == "MemoryLimit"]
    assert verdicts and f"at most {LIMIT_MB} MiB" in verdicts[0] and "内存不足" in verdicts[0], verdicts
    feedback = (tmp_path / "out" / hog["feedback_html"]).read_text()
    assert re.search(rf"at most {LIMIT_MB} MiB", feedback), "the learner's feedback does not name the memory limit"
