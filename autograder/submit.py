"""Grade one learner notebook against the hidden tests, the way the instructor would.

    python -m autograder submit course/01_dot_product_attention.ipynb [--json]

The learner's file is only read: it is copied into a grading workspace of its own, where
nbgrader generates the assignment from solutions/, autogrades the copy (test cells are
restored from the original, hidden tests put back) and writes the HTML feedback, which is
then copied to feedback/<notebook>.html.
"""
import contextlib
import re
import shutil
import tempfile
import warnings
from pathlib import Path

from autograder.notebooks import ROOT, exercise_of, exercises, identify, read_notebook
from autograder.prestart import discard_prestarted, prestart_kernel
from autograder.workspace import Workspace

LEARNER = "learner"
# nbgrader's gradebook code trips SQLAlchemy's autoflush warnings; they say nothing to a learner.
warnings.filterwarnings("ignore", message=".*not in session.*")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def reason(cell, timeout: int) -> str:
    """One line that says why a test cell failed, from the error it left in its outputs."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors:
        return ""
    ename, evalue = errors[-1].get("ename", ""), _ANSI.sub("", errors[-1].get("evalue", ""))
    if ename in ("NotRun", "GradingGuard", "DeadKernelError", "MemoryLimit") or (ename == "CellTimeoutError" and evalue):
        return " ".join(evalue.split())  # written by autograder/preprocessors.py, in words
    if ename in ("CellTimeoutError", "KeyboardInterrupt") or "timeout" in evalue.lower():
        return (f"The tests did not finish within {timeout} s: look for an infinite loop or a very slow step. "
                f"测试未能在 {timeout} 秒内完成：检查是否有死循环或非常慢的步骤。")
    if ename == "NotImplementedError":
        return ("Not implemented yet: replace `raise NotImplementedError()` with your code. "
                "尚未实现：请用你的代码替换 `raise NotImplementedError()`。")
    if ename == "NameError":
        return (f"{evalue}: run your solution cell, and keep the name that the exercise asks for. "
                f"{evalue}：请运行你的答案单元格，并保持练习要求的名称。")
    if ename in ("CheckFailed", "Shortcut") and evalue:
        return " ".join(evalue.split())
    if ename == "AssertionError":  # not a check's sentence (those are CheckFailed): the learner's own assert
        said = " ".join(evalue.split())[:300] or "(an assert without a message)"
        return (f"Your code raised AssertionError: {said}. That is your own assert, not a check's: see which of your "
                f"conditions failed. 你的代码抛出了 AssertionError：{said}。这是你自己的 assert，不是检查给出的：请看你的哪个条件不成立。")
    first = " ".join(evalue.split())[:300]
    return f"{ename}: {first}" if first else ename


def grade(notebook, timeout: int | None = None, feedback_dir=None, workspace=None) -> dict:
    """Grade `notebook` and return the report that `--json` prints."""
    # The kernel boots and imports torch while the notebook is read, nbgrader imported and the
    # assignment prepared (`python -m autograder submit` may have started it already).
    prestart_kernel()
    try:
        return _grade(Path(notebook), timeout, feedback_dir, workspace)
    finally:
        discard_prestarted()


def _grade(notebook: Path, timeout, feedback_dir, workspace) -> dict:
    nb = read_notebook(notebook)
    stem = identify(notebook, nb)
    feedback_dir = Path(feedback_dir) if feedback_dir else ROOT / "feedback"
    # grade-all passes `workspace` (a folder kept afterwards) to read the per-cell grades there.
    with (contextlib.nullcontext(workspace) if workspace else tempfile.TemporaryDirectory(prefix="attention-grading-")) as tmp:
        ws = Workspace(tmp, timeout=timeout)
        released = ws.generate(stem)
        ws.submit(stem, LEARNER, notebook)
        autograded, feedback = ws.autograde(stem, LEARNER)
        grades = ws.grades(stem, LEARNER)
        graded_nb = read_notebook(autograded)
        limit = ws.api.coursedir.config.Execute.timeout
        reasons = {}
        for cell in graded_nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in grades and grades[gid][0] < grades[gid][1]:
                # Cells come visible first; the hidden tests' message is the more specific one.
                reasons[exercise_of(gid)] = reason(cell, limit) or "This test did not pass. 该测试未通过。"
        for gid, (score, max_score) in grades.items():
            if score < max_score and exercise_of(gid) not in reasons:  # nbgrader scores a deleted cell 0
                reasons[exercise_of(gid)] = (
                    "A test cell of this exercise is missing from your notebook: take a fresh copy from course/ and paste your code in. "
                    "你的笔记本缺少本练习的一个测试单元格：请从 course/ 取一份新的副本，再把你的代码粘贴进去。")
        feedback_dir.mkdir(parents=True, exist_ok=True)
        feedback_html = feedback_dir / f"{stem}.html"
        shutil.copyfile(feedback, feedback_html)
        names = exercises(read_notebook(released))

    report = {"notebook": str(notebook), "score": 0.0, "max_score": 0.0, "exercises": [],
              "feedback_html": str(feedback_html.resolve())}
    for name in names:
        cells = [v for gid, v in grades.items() if exercise_of(gid) == name]
        score, max_score = sum(s for s, _ in cells), sum(m for _, m in cells)
        report["exercises"].append({"name": name, "score": score, "max_score": max_score,
                                    "feedback": reasons.get(name, "")})
        report["score"] += score
        report["max_score"] += max_score
    return report


def format_table(report: dict) -> str:
    rows = [(e["name"], f"{e['score']:g}", f"{e['max_score']:g}", e["feedback"] or "passed / 通过")
            for e in report["exercises"]]
    width = max([len("exercise")] + [len(r[0]) for r in rows])
    lines = [f"{report['notebook']}: {report['score']:g} / {report['max_score']:g} points", "",
             f"{'exercise':<{width}}  points  max  feedback",
             f"{'-' * width}  ------  ---  --------"]
    lines += [f"{n:<{width}}  {s:>6}  {m:>3}  {f}" for n, s, m, f in rows]
    lines += ["", f"feedback (HTML): {report['feedback_html']}"]
    return "\n".join(lines)
