"""The instructor's batch grading: a folder of a class's submissions in, a gradebook, a CSV and
a feedback folder per learner out.

    python -m autograder grade-all SUBMISSIONS [--out grading] [--jobs N] [--db URL] [--timeout S] [--memory-mb M]

SUBMISSIONS holds one folder per learner with that learner's notebooks inside (any depth):
    SUBMISSIONS/alice/01_dot_product_attention.ipynb
    SUBMISSIONS/bob/01_dot_product_attention (1).ipynb      (recognised by its graded cells)
Out come:
    OUT/grades.csv                      one row per learner and notebook
    OUT/feedback/<learner>/<nb>.html    nbgrader's HTML feedback, a folder to hand to each learner
    OUT/autograded/<learner>/<nb>.ipynb the notebook as graded, outputs included
    OUT/gradebook.db                    nbgrader's gradebook (SQLite), unless --db names another:
                                        postgresql+psycopg://user@host:port/db for a shared server

Each submission is graded by `python -m autograder submit`'s own code (autograder.submit.grade)
in a process of its own with a workspace of its own; `--jobs` of them run at once (default: the
number of cores). A learner's infinite loop, crash or flood of output therefore costs that
learner's notebook and nothing else, and a process that outlives `--job-timeout` is killed. Each
grading kernel gets at most `--memory-mb` MiB (default: nbgrader_config.py's 4096); a notebook
that goes over it scores 0 on the tests that did, with a verdict that names the limit.
Every process writes its grades into the one gradebook inside a lock (a file lock for SQLite,
an advisory lock for PostgreSQL), so several processes, or grade-all on several machines sharing
one PostgreSQL database, lose no row. Re-grading updates the same rows (grades of an unchanged
file come out the same, and so does the CSV); a resubmitted file gets the new grade.
"""
import argparse
import contextlib
import csv
import datetime
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from autograder.notebooks import BadInput, identify, read_notebook
from autograder.prestart import MEMORY_ENV

FIELDS = ["learner", "notebook", "score", "max_score", "status", "feedback_html"]
JOB_TIMEOUT = 900  # s; the notebook-wide limit of grading (nbgrader_config.py) comes well before
_LOCK_KEY = 7_270_012  # pg_advisory_lock key of this course's gradebook writers


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def course_id() -> str:
    from autograder.workspace import load_config
    return load_config(Path(".")).CourseDirectory.course_id


@contextlib.contextmanager
def gradebook_lock(db_url: str):
    """One writer at a time: a file lock next to a SQLite file, an advisory lock on a server."""
    if db_url.startswith("sqlite"):
        path = Path(db_url.split(":///", 1)[1] + ".lock")
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
    else:
        from sqlalchemy import create_engine, text
        engine = create_engine(db_url, future=True)
        try:
            with engine.connect() as conn:
                conn.execute(text(f"SELECT pg_advisory_lock({_LOCK_KEY})"))
                try:
                    yield
                finally:
                    conn.execute(text(f"SELECT pg_advisory_unlock({_LOCK_KEY})"))
        finally:
            engine.dispose()


def open_gradebook(db_url: str):
    """The course's gradebook at db_url, created (schema and course) when it is new."""
    from nbgrader.api import Gradebook
    _alembic_on_path()
    return Gradebook(db_url, course_id=course_id())


def _alembic_on_path():
    """A new gradebook runs the `alembic` program: the one next to this Python."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def init_gradebook(db_url: str):
    _alembic_on_path()
    if db_url.startswith("sqlite"):
        path = Path(db_url.split(":///", 1)[1])
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():  # a copy of the cached empty gradebook: no seconds of `alembic`
            from autograder.workspace import empty_gradebook
            shutil.copyfile(empty_gradebook(), path)
    with gradebook_lock(db_url):
        open_gradebook(db_url).close()


def record(db_url: str, stem: str, learner: str, cells: dict, timestamp: str):
    """Write one graded notebook into the gradebook: the assignment's cells, the learner, the
    submission and one grade per graded cell, updated in place when they are already there."""
    from nbgrader.api import MissingEntry
    with gradebook_lock(db_url), open_gradebook(db_url) as gb:
        gb.update_or_create_assignment(stem)
        gb.update_or_create_notebook(stem, stem)
        for name, cell in cells["grade"].items():
            gb.update_or_create_grade_cell(name, stem, stem, max_score=cell["max_score"], cell_type=cell["cell_type"])
        for name in cells["solution"]:
            gb.update_or_create_solution_cell(name, stem, stem)
        gb.update_or_create_student(learner)
        try:
            gb.update_or_create_submission(stem, learner, timestamp=timestamp)
            grades = {name: gb.find_grade(name, stem, stem, learner) for name in cells["grade"]}
        except MissingEntry:  # the assignment gained a cell since this submission was recorded
            gb.remove_submission(stem, learner)
            gb.add_submission(stem, learner, timestamp=timestamp)
            grades = {name: gb.find_grade(name, stem, stem, learner) for name in cells["grade"]}
        for name, grade in grades.items():
            grade.auto_score = cells["grade"][name]["score"]
            grade.needs_manual_grade = False
        gb.db.commit()


def rows(db_url: str) -> list[tuple]:
    """(learner, notebook, grade cell, score, max score) of every grade in the gradebook, sorted."""
    from nbgrader.api import Grade, GradeCell, Notebook, Student, SubmittedAssignment, SubmittedNotebook
    with open_gradebook(db_url) as gb:
        query = (gb.db.query(Student.id, Notebook.name, GradeCell.name, Grade.score, GradeCell.max_score)
                 .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
                 .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
                 .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                 .join(Student, SubmittedAssignment.student_id == Student.id)
                 .join(GradeCell, Grade.cell_id == GradeCell.id))
        return sorted((a, b, c, float(d or 0), float(e)) for a, b, c, d, e in query.all())


def grade_one(path: Path, learner: str, out: Path, db_url: str, work: Path, timeout: int | None) -> dict:
    """Grade one submission with autograder.submit.grade in `work`, and record it (runs in a worker)."""
    from nbgrader.api import Gradebook

    from autograder.submit import LEARNER, grade

    stem = identify(path, read_notebook(path))
    report = grade(path, timeout=timeout, feedback_dir=out / "feedback" / learner, workspace=work)
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        notebook = gb.find_notebook(stem, stem)
        submitted = gb.find_submission_notebook(stem, stem, LEARNER)
        cells = {"grade": {c.name: {"max_score": float(c.max_score), "cell_type": c.cell_type} for c in notebook.grade_cells},
                 "solution": sorted(c.name for c in notebook.solution_cells)}
        for g in submitted.grades:
            cells["grade"][g.name]["score"] = float(g.score or 0.0)
    autograded = out / "autograded" / learner / f"{stem}.ipynb"
    autograded.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work / "autograded" / LEARNER / stem / f"{stem}.ipynb", autograded)
    mtime = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc)
    record(db_url, stem, learner, cells, mtime.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    return {"learner": learner, "notebook": stem, "score": f"{report['score']:g}",
            "max_score": f"{report['max_score']:g}", "status": "graded",
            "feedback_html": str(Path(report["feedback_html"]).relative_to(out.resolve()))}


def learner_id(folder: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", folder)


def collect(submissions: Path) -> tuple[list[tuple[str, str, Path]], list[dict]]:
    """(learner, notebook, file) to grade, newest file when a learner sent one notebook twice,
    and the rows of files that cannot be graded (unreadable, not a notebook of the course)."""
    learners = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not learners:
        raise BadInput(f"{submissions} has no learner folders (expected SUBMISSIONS/<learner>/<notebook>.ipynb)")
    jobs, errors = {}, []
    for folder in learners:
        learner = learner_id(folder.name)
        for path in sorted(folder.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            try:
                stem = identify(path, read_notebook(path))
            except BadInput as e:
                errors.append({"learner": learner, "notebook": path.stem, "score": "", "max_score": "",
                               "status": f"error: {e}".splitlines()[0], "feedback_html": ""})
                continue
            if (learner, stem) not in jobs or path.stat().st_mtime > jobs[learner, stem].stat().st_mtime:
                jobs[learner, stem] = path
    return [(learner, stem, path) for (learner, stem), path in sorted(jobs.items())], errors


def _run_job(learner, stem, path, out, db_url, timeout, job_timeout, scratch, memory_mb=None) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"{learner}-{stem}-", dir=scratch))
    spec = {"path": str(path.resolve()), "learner": learner, "out": str(out.resolve()), "db": db_url,
            "work": str(work / "ws"), "timeout": timeout, "result": str(work / "result.json")}
    row = {"learner": learner, "notebook": stem, "score": "", "max_score": "", "feedback_html": ""}
    log = work / "grading.log"
    with open(log, "w") as f:
        env = {**os.environ, **({MEMORY_ENV: str(memory_mb)} if memory_mb is not None else {})}
        proc = subprocess.Popen([sys.executable, "-m", "autograder.batch", "--one", json.dumps(spec)],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        try:
            proc.wait(timeout=job_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the worker, its kernel and anything the learner's code started
            proc.wait()
            row["status"] = f"error: grading took longer than {job_timeout} s and was stopped"
    try:
        if "status" not in row:
            result = work / "result.json"
            if result.exists():
                row.update(json.loads(result.read_text()))
            else:
                last = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
                row["status"] = f"error: {(last or ['the grading process died'])[0][:300]}"
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def grade_all(submissions, out, jobs: int | None = None, db_url: str | None = None,
              timeout: int | None = None, job_timeout: int = JOB_TIMEOUT, log=print, progress=True,
              memory_mb: int | None = None) -> Path:
    """Grade every learner's notebooks in `submissions` into `out`; return the path of the CSV.
    `memory_mb`: each grading kernel's memory limit in MiB (default: the course config's)."""
    from tqdm.auto import tqdm

    submissions, out = Path(submissions), Path(out)
    if not submissions.is_dir():
        raise BadInput(f"no such folder of submissions: {submissions}")
    todo, results = collect(submissions)
    out.mkdir(parents=True, exist_ok=True)
    db_url = db_url or f"sqlite:///{(out / 'gradebook.db').resolve()}"
    init_gradebook(db_url)
    jobs = max(1, jobs or default_jobs())
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="attention-grade-all-") as scratch, \
            ThreadPoolExecutor(max_workers=jobs) as pool, \
            tqdm(total=len(todo), unit="notebook", desc=f"grading ({jobs} at once)", disable=not progress,
                 file=sys.stderr) as bar:
        futures = [pool.submit(_run_job, learner, stem, path, out, db_url, timeout, job_timeout, scratch, memory_mb)
                   for learner, stem, path in todo]
        for future in as_completed(futures):
            row = future.result()
            with lock:
                results.append(row)
                (bar.write if progress else log)(
                    f"{row['learner']:>16}  {row['notebook']:<32} {row['score'] or '-':>5} / "
                    f"{row['max_score'] or '-':<5} {row['status']}")
                bar.update()
    results.sort(key=lambda r: (r["learner"], r["notebook"]))
    csv_path = out / "grades.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(results)
    return csv_path


def _worker(spec: dict) -> int:
    """`python -m autograder.batch --one SPEC`: one submission, in a process of its own."""
    import warnings
    warnings.filterwarnings("ignore")
    from autograder.workspace import GradingError
    try:
        row = grade_one(Path(spec["path"]), spec["learner"], Path(spec["out"]), spec["db"], Path(spec["work"]),
                        spec["timeout"])
    except (BadInput, GradingError) as e:
        print(f"{type(e).__name__}: {e}".splitlines()[0][:300], file=sys.stderr)
        row = {"status": f"error: {e}".splitlines()[0][:300]}
    Path(spec["result"]).write_text(json.dumps(row))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m autograder.batch")
    parser.add_argument("--one", required=True, help="internal: the JSON spec of one grading job")
    sys.exit(_worker(json.loads(parser.parse_args().one)))
