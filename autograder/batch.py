"""The instructor's batch grading: a folder of submissions in, a gradebook and a CSV out.

    python -m autograder grade-all SUBMISSIONS [--out grading]

SUBMISSIONS holds one folder per learner with that learner's notebooks inside (any depth):
    SUBMISSIONS/alice/01_dot_product_attention.ipynb
    SUBMISSIONS/bob/01_dot_product_attention.ipynb
The output folder is an ordinary nbgrader course directory (gradebook.db, autograded/,
feedback/), so formgrader and `nbgrader export` work on it too, plus grades.csv with one
row per learner and notebook.
"""
import csv
import re
from pathlib import Path

from autograder.notebooks import BadInput, identify, read_notebook
from autograder.workspace import GradingError, Workspace

FIELDS = ["learner", "notebook", "score", "max_score", "status", "feedback_html"]


def grade_all(submissions, out, timeout: int | None = None, log=print) -> Path:
    submissions, out = Path(submissions), Path(out)
    if not submissions.is_dir():
        raise BadInput(f"no such folder of submissions: {submissions}")
    learners = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not learners:
        raise BadInput(f"{submissions} has no learner folders (expected SUBMISSIONS/<learner>/<notebook>.ipynb)")
    ws = Workspace(out, timeout=timeout)
    generated, rows = set(), []
    for learner_dir in learners:
        learner = re.sub(r"[^A-Za-z0-9_.-]", "_", learner_dir.name)
        for path in sorted(learner_dir.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            row = {"learner": learner, "notebook": path.stem, "score": "", "max_score": "",
                   "status": "graded", "feedback_html": ""}
            try:
                stem = identify(path, read_notebook(path))
                row["notebook"] = stem
                if stem not in generated:
                    ws.generate(stem)
                    generated.add(stem)
                ws.submit(stem, learner, path)
                _, feedback = ws.autograde(stem, learner)
                grades = ws.grades(stem, learner).values()
                row.update(score=f"{sum(s for s, _ in grades):g}", max_score=f"{sum(m for _, m in grades):g}",
                           feedback_html=str(feedback))
            except (BadInput, GradingError) as e:
                row["status"] = f"error: {e}".splitlines()[0]
            log(f"{learner:>16}  {row['notebook']:<32} {row['score'] or '-':>5} / {row['max_score'] or '-':<5} {row['status']}")
            rows.append(row)
    csv_path = out / "grades.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return csv_path
