"""`grade-all` on a class: a process pool, one workspace per submission, a gradebook in SQLite
and in a real PostgreSQL server (Debian's `postgresql`, started here in a temporary folder),
idempotent re-grading, resubmissions, the CSV and the per-learner feedback folder.

Without PostgreSQL the PostgreSQL tests are skipped with one line, except in CI (CI=true) unless
COURSE_MAY_SKIP names "postgresql".
Throughput (not part of make test, minutes):
    .venv/bin/python -m autograder.tests.test_batch 40      # 40 synthetic submissions, --jobs 1 and 2
"""
import contextlib
import csv
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
import pytest

from autograder import batch
from autograder.tests import must_run_in_ci
from autograder.notebooks import SOLUTIONS

STEM = "00_tokens_and_embeddings"
# Submissions of notebook 00 that a class sends: its exercise cells replaced (None: as in course/).
KINDS = {
    "right": {},
    "wrong": {"embed": "def embed(token_ids, weight):\n    return weight[token_ids] * 2\n"},
    "looping": {"embed": "def embed(token_ids, weight):\n    while True:\n        pass\n"},
    "crashing": {"embed": "def embed(token_ids, weight):\n    import os\n    os._exit(1)\n"},
    "flooding": {"embed": "def embed(token_ids, weight):\n    return weight[token_ids]\n\nprint('spam ' * 4_000_000)  # 20 MB\n"},
}


def submission(path: Path, kind: str):
    """Write a notebook 00 of the given kind at `path`."""
    cells = KINDS[kind]
    nb = nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in cells:
            cell.source = cells[gid]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def grade_all(submissions, out, *args, timeout=10, limit=1200):
    cmd = [sys.executable, "-m", "autograder", "grade-all", str(submissions), "--out", str(out),
           "--timeout", str(timeout), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd="/", timeout=limit)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def read_csv(path: Path) -> dict:
    with open(path, newline="") as f:
        return {(r["learner"], r["notebook"]): r for r in csv.DictReader(f)}


# --- a real PostgreSQL server --------------------------------------------------------------------

def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    initdb = Path(found[-1]) if found else (Path(shutil.which("initdb")) if shutil.which("initdb") else None)
    return initdb.parent if initdb else None


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL server of its own in a temporary folder, on a free loopback port:
    (URL of its `postgres` database, folder of its programs, port). Stopped and removed after."""
    bindir = pg_bin()
    # initdb refuses to run as root: as root, the server runs as the package's `postgres` user.
    user = next((u for u in ("postgres", "nobody") if _has_user(u)), None) if os.geteuid() == 0 else None
    home = Path(tempfile.mkdtemp(prefix="attention-pg-"))
    if user:
        os.chown(home, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = dict(user=user, capture_output=True, text=True, timeout=120, cwd=home)
    try:
        result = subprocess.run([bindir / "initdb", "-D", home / "data", "-U", "postgres", "--auth=trust",
                                 "-E", "UTF8", "--no-sync"], **run)
        assert result.returncode == 0, result.stderr
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {home} -c fsync=off"
        result = subprocess.run([bindir / "pg_ctl", "-D", home / "data", "-o", options, "-l", home / "log",
                                 "-w", "-t", "60", "start"], **run)
        assert result.returncode == 0, result.stderr + (home / "log").read_text()
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", bindir, port
        finally:
            subprocess.run([bindir / "pg_ctl", "-D", home / "data", "-m", "fast", "-w", "stop"], **run)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres():
    """The server, or None where there is none (outside CI only: in CI that is a failure)."""
    if pg_bin() is None:
        why = "no PostgreSQL server found (apt-get install postgresql)"
        if must_run_in_ci("postgresql"):
            pytest.fail(f"the gradebook tests need PostgreSQL in CI: {why}", pytrace=False)
        print(f"PostgreSQL parts skipped: {why}")
        yield None
        return
    with postgres_server() as server:
        yield server


def _has_user(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def fresh_database(postgres, name):
    url, bindir, port = postgres
    result = subprocess.run([bindir / "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", name],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return url.rsplit("/", 1)[0] + f"/{name}"


# --- tests ---------------------------------------------------------------------------------------

def _record_many(db_url, writer, count):
    cells = {"grade": {"test_encode": {"max_score": 1.0, "cell_type": "code", "score": 1.0},
                       "test_embed": {"max_score": 2.0, "cell_type": "code", "score": float(writer % 3)}},
             "solution": ["encode", "embed"]}
    for i in range(count):
        batch.record(db_url, STEM, f"w{writer}-s{i}", cells, "2026-01-01 00:00:00 UTC")
    return count


def _concurrent_writers(db_url, writers=3, each=4):
    batch.init_gradebook(db_url)
    with ProcessPoolExecutor(writers) as pool:
        assert sum(pool.map(_record_many, [db_url] * writers, range(writers), [each] * writers)) == writers * each
    rows = batch.rows(db_url)
    assert len(rows) == 2 * writers * each, "a gradebook row was lost"
    assert {r[0] for r in rows} == {f"w{w}-s{i}" for w in range(writers) for i in range(each)}
    return rows


def test_concurrent_writers_lose_no_row_in_sqlite(tmp_path):
    _concurrent_writers(f"sqlite:///{tmp_path / 'gradebook.db'}")


def test_concurrent_writers_lose_no_row_in_postgres(postgres):
    if postgres is None:
        pytest.skip("no PostgreSQL server (apt-get install postgresql)")
    _concurrent_writers(fresh_database(postgres, "writers"))


def test_grade_all_a_class_into_sqlite_and_postgres(tmp_path, postgres):
    """One learner per kind of submission, graded two at a time; a loop, a crash or a flood of
    output costs only that notebook. The same class into SQLite and into PostgreSQL gives the same
    rows; grading again gives the same rows and CSV, except for the learner who resubmitted."""
    kinds = [kind for kind in KINDS if kind != "wrong"]  # wrong answers: test_submit.py, test_wrong_solutions.py
    for kind in kinds:
        submission(tmp_path / "in" / kind / f"{STEM}.ipynb", kind)
    (tmp_path / "in" / "right" / "01_dot_product_attention.ipynb").write_text("{ truncated")
    result = grade_all(tmp_path / "in", tmp_path / "lite", "--jobs", "2")
    assert "100%" in result.stderr  # the progress bar

    lite = read_csv(tmp_path / "lite" / "grades.csv")
    assert set(lite) == {(kind, STEM) for kind in kinds} | {("right", "01_dot_product_attention")}
    assert lite.pop(("right", "01_dot_product_attention"))["status"].startswith("error: ")
    full = lite[("right", STEM)]["max_score"]
    assert lite[("right", STEM)]["score"] == full and float(full) > 0
    for kind in ("looping", "crashing"):  # encode still scores, embed does not
        assert 0 < float(lite[(kind, STEM)]["score"]) < float(full), (kind, lite[(kind, STEM)])
    assert lite[("flooding", STEM)]["score"] == full
    assert all(r["status"] == "graded" for r in lite.values())
    for kind in kinds:  # a feedback folder per learner, and the notebook as graded
        assert lite[(kind, STEM)]["feedback_html"] == f"feedback/{kind}/{STEM}.html"
        assert (tmp_path / "lite" / "feedback" / kind / f"{STEM}.html").exists()
        assert (tmp_path / "lite" / "autograded" / kind / f"{STEM}.ipynb").exists()

    # One gradebook row per graded cell of every submission (none lost), adding up to the CSV.
    db = f"sqlite:///{tmp_path / 'lite' / 'gradebook.db'}"
    rows, out = batch.rows(db), tmp_path / "lite"
    assert len(rows) == 4 * len(kinds)  # notebook 00: two exercises, a visible and a hidden test each
    for learner, notebook in lite:
        assert sum(r[3] for r in rows if r[:2] == (learner, notebook)) == float(lite[(learner, notebook)]["score"])
    if postgres is not None:
        db, out = fresh_database(postgres, "class"), tmp_path / "pg"
        grade_all(tmp_path / "in", out, "--jobs", "2", "--db", db)
        assert batch.rows(db) == rows
        strip = lambda rows: {k: (r["score"], r["max_score"], r["status"]) for k, r in rows.items()}  # noqa: E731
        assert strip(read_csv(out / "grades.csv")) == strip(read_csv(tmp_path / "lite" / "grades.csv"))

    # Grading again: the same rows and the same CSV, except for the learner who resubmitted.
    before_csv = (out / "grades.csv").read_text()
    submission(tmp_path / "in" / "looping" / f"{STEM}.ipynb", "right")
    grade_all(tmp_path / "in", out, "--jobs", "2", *(["--db", db] if postgres is not None else []))
    after = batch.rows(db)
    assert [r for r in after if r[0] != "looping"] == [r for r in rows if r[0] != "looping"]
    assert len(after) == len(rows) and sum(r[3] for r in after if r[0] == "looping") == float(full)
    after_csv = (out / "grades.csv").read_text()
    changed = [(a, b) for a, b in zip(before_csv.splitlines(), after_csv.splitlines()) if a != b]
    assert len(changed) == 1 and changed[0][1].startswith(f"looping,{STEM},{full},{full},graded"), changed


# --- throughput ----------------------------------------------------------------------------------

def throughput(n: int = 40, runs=((2, "sqlite"), (1, "sqlite"), (2, "postgresql")), timeout: int = 10):
    """Submissions per minute of grade-all on n synthetic submissions of notebook 00 (right, wrong,
    looping, crashing, flooding in turn) for each (--jobs, gradebook); no gradebook row lost."""
    kinds = list(KINDS)
    with tempfile.TemporaryDirectory(prefix="attention-throughput-") as tmp, contextlib.ExitStack() as stack:
        tmp = Path(tmp)
        for i in range(n):
            submission(tmp / "in" / f"learner{i:03d}" / f"{STEM}.ipynb", kinds[i % len(kinds)])
        print(f"{n} submissions ({', '.join(kinds)} in turn), --timeout {timeout}, {batch.default_jobs()} cores")
        print("| --jobs | gradebook | seconds | submissions per minute | CSV rows graded | gradebook rows (expected) |")
        print("|---|---|---|---|---|---|", flush=True)
        for jobs, kind in runs:
            out = tmp / f"out-{jobs}-{kind}"
            if kind == "postgresql":
                if pg_bin() is None:
                    print(f"| {jobs} | {kind} | no PostgreSQL server installed |")
                    continue
                db = fresh_database(stack.enter_context(postgres_server()), "throughput")
            else:
                db = f"sqlite:///{out / 'gradebook.db'}"
            start = time.perf_counter()
            grade_all(tmp / "in", out, "--jobs", str(jobs), "--db", db, timeout=timeout, limit=None)
            seconds = time.perf_counter() - start
            graded = sum(r["status"] == "graded" for r in read_csv(out / "grades.csv").values())
            print(f"| {jobs} | {kind} | {seconds:.0f} | {n / seconds * 60:.1f} | {graded} of {n} "
                  f"| {len(batch.rows(db))} ({4 * n}) |", flush=True)


if __name__ == "__main__":
    throughput(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
