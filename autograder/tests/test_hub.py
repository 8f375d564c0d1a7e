"""A class on JupyterHub, end to end (hub/course_hub.py): the hub on loopback with one instructor and
three learners as real Unix accounts, nbgrader's exchange, the gradebook in PostgreSQL.

Through the hub's REST API and the servers' own interfaces (nbgrader's formgrader API for the
instructor, its assignment list and Validate handlers and Jupyter's contents API for the learners),
the instructor generates and releases notebook 01; learner1 solves it, learner2 gets softmax wrong,
learner3 leaves it untouched; each fetches, validates and submits; the instructor collects,
autogrades with the course's grader, generates and releases feedback; each learner fetches their
feedback. Then scores are checked in the gradebook and in each learner's feedback, and the
forbidden reads and writes are tried as the learners themselves.

Accounts, exchange and PostgreSQL are made under a name of the test's own and removed afterwards.
Skipped with one line where the machine cannot run a class (not root, no configurable-http-proxy:
`make hub-proxy`, no PostgreSQL). Alone: `.venv/bin/python -m pytest -q autograder/tests/test_hub.py`.
"""
import json
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest

from autograder.notebooks import ROOT, SOLUTIONS

sys.path.insert(0, str(ROOT))
from hub.course_hub import COURSE_ID, CourseHub, missing, pg_bin  # noqa: E402

WHY = missing()
if WHY:
    pytest.skip(f"JupyterHub test skipped: {WHY}", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hub")]
STEM = "01_dot_product_attention"
NB = f"{STEM}/{STEM}.ipynb"
WRONG_SOFTMAX = ("def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:\n"
                 "    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n")
UID_CELL = "import os\nprint('grading uid', os.geteuid())"
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def solved(nb, wrong: dict[str, str] | None = None):
    """`nb` (as fetched) with the solutions' exercise cells, and any in `wrong` replaced."""
    reference = {c.metadata["nbgrader"]["grade_id"]: c.source
                 for c in nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4).cells
                 if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in reference:
            cell.source = (wrong or {}).get(gid, reference[gid])
    return nb


def as_user(hub, name, *cmd, cwd=None, env=None):
    home = f"/home/{name}"
    return subprocess.run(["runuser", "-u", name, "--", "env", f"HOME={home}", *(env or []), *cmd],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def gradebook_rows(hub) -> dict[str, dict[str, float]]:
    """learner -> {grade cell: score}, read from the PostgreSQL gradebook as the instructor."""
    script = ("import json, sys; from nbgrader.api import Gradebook\n"
              "with Gradebook(sys.argv[1], course_id=sys.argv[2]) as gb:\n"
              "    out = {}\n"
              "    for s in gb.students:\n"
              "        try: nb = gb.find_submission_notebook(sys.argv[3], sys.argv[3], s.id)\n"
              "        except Exception: continue\n"
              "        out[s.id] = {g.name: float(g.score or 0) for g in nb.grades}\n"
              "    print(json.dumps(out))")
    result = as_user(hub, hub.instructor, PYTHON, "-c", script, hub.gradebook, COURSE_ID, STEM, cwd="/")
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    prefix = "t" + secrets.token_hex(3)  # a name of its own: two runs never meet
    state = Path("/tmp") / f"attention-hub-{prefix}"
    course = CourseHub(state, prefix, learners=3)
    try:
        course.start()
        yield course
    finally:
        course.stop()


def call(hub, user, method, path, body=None):
    return hub.api(method, f"/user/{user}{path}", body)


def ok(answer, what):
    assert answer.get("success", True), f"{what} failed: {str(answer)[-2000:]}"
    return answer


def test_a_class_through_the_exchange(hub):
    teacher, (good, wrong, idle) = hub.instructor, hub.learners
    hub.spawn([teacher, good, wrong, idle])
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/assign"), "generate_assignment")
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/release"), "release_assignment")

    body = {"course_id": COURSE_ID, "assignment_id": STEM}
    for learner in (good, wrong, idle):
        listed = ok(call(hub, learner, "POST", "/assignments/fetch", body), "fetch")
        assert any(a["status"] == "fetched" for a in listed["value"]), listed
    for learner, edit in ((good, {}), (wrong, {"softmax": WRONG_SOFTMAX})):
        content = call(hub, learner, "GET", f"/api/contents/{NB}")
        nb = solved(nbformat.from_dict(content["content"]), edit)
        if learner == wrong:  # shows under which account grading runs this learner's code
            nb.cells.append(nbformat.v4.new_code_cell(UID_CELL))
        call(hub, learner, "PUT", f"/api/contents/{NB}", {"type": "notebook", "format": "json", "content": nb})
    validated = call(hub, good, "POST", "/assignments/validate", {"path": NB})
    verdict = validated.get("value")
    verdict = json.loads(verdict) if isinstance(verdict, str) else verdict
    assert validated.get("success") and isinstance(verdict, dict), validated
    assert not any(verdict.get(k) for k in ("failed", "changed", "type_changed", "locked_cell_changed")), verdict
    for learner in (good, wrong, idle):
        ok(call(hub, learner, "POST", "/assignments/submit", body), "submit")

    # learner2 submits in learner1's name (nbgrader submit --student): it must not replace learner1's work.
    time.sleep(1.1)  # a later timestamp than learner1's own submission
    forged = as_user(hub, wrong, str(ROOT / ".venv" / "bin" / "nbgrader"), "submit", STEM, "--course", COURSE_ID,
                     f"--CourseDirectory.student_id={good}", cwd=f"/home/{wrong}",
                     env=[f"JUPYTER_CONFIG_PATH={ROOT / 'hub' / 'roles' / 'learner'}",
                          f"ATTENTION_REPO={ROOT}", f"ATTENTION_EXCHANGE={hub.exchange}", f"PYTHONPATH={ROOT}"])
    inbound = hub.exchange / COURSE_ID / "inbound"
    assert forged.returncode == 0 and any(p.name.startswith(f"{good}+") and p.owner() == wrong
                                          for p in inbound.iterdir()), forged.stderr[-2000:]

    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/collect"), "collect")
    for learner in (good, wrong, idle):
        ok(call(hub, teacher, "POST", f"/formgrader/api/submission/{STEM}/{learner}/autograde"), f"autograde {learner}")
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/generate_feedback"), "generate_feedback")
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/release_feedback"), "release_feedback")

    grades = gradebook_rows(hub)
    assert set(grades) == {good, wrong, idle}, grades
    maximum = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
               for c in nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4).cells
               if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    assert grades[good] == maximum, grades[good]
    assert grades[wrong]["test_softmax"] == 0 and grades[wrong]["test_softmax_hidden"] == 0, grades[wrong]
    assert grades[wrong]["test_attention_scores_hidden"] == maximum["test_attention_scores_hidden"], grades[wrong]
    assert sum(grades[idle].values()) == 0, grades[idle]

    for learner in (good, wrong, idle):
        ok(call(hub, learner, "POST", "/assignments/fetch_feedback", body), "fetch_feedback")
        folder = call(hub, learner, "GET", f"/api/contents/{STEM}/feedback")["content"]
        assert len(folder) == 1, folder
        page = call(hub, learner, "GET", f"/api/contents/{quote(folder[0]['path'])}/{STEM}.html")["content"]
        score = re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", page)
        assert score and float(score[1]) == sum(grades[learner].values()) and float(score[2]) == sum(maximum.values()), \
            (learner, score and score.group(0))
        assert "cdnjs" not in page, "feedback loads MathJax from a CDN"

    graded = nbformat.read(hub.course_root / "autograded" / wrong / STEM / f"{STEM}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    uid = re.search(r"grading uid (\d+)", printed)
    assert uid and int(uid[1]) == Path(hub.course_root).stat().st_uid != 0, printed[-500:]

    forbidden_attempts(hub, good, wrong)


def forbidden_attempts(hub, victim, intruder):
    """Every attempt, made as `intruder` (a learner's Unix account), must fail."""
    home = Path(f"/home/{victim}")
    course = hub.exchange / COURSE_ID
    feedback_file = next((home / STEM / "feedback").rglob("*.html"))
    submitted = next(p for p in (course / "inbound").iterdir() if p.name.startswith(f"{victim}+") and p.owner() == victim)
    attempts = {
        "read another learner's notebook": ["cat", str(home / NB)],
        "change another learner's notebook": ["sh", "-c", f"echo x >> {home / NB}"],
        "read another learner's feedback": ["cat", str(feedback_file)],
        "list the exchange's submissions": ["ls", str(course / "inbound")],
        "read another learner's submission": ["cat", str(submitted / f"{STEM}.ipynb")],
        "list the exchange's feedback": ["ls", str(course / "feedback")],
        "change the released notebook": ["sh", "-c", f"echo x >> {course / 'outbound' / NB}"],
        "add to the released assignment": ["touch", str(course / "outbound" / STEM / "extra.ipynb")],
        "read solutions/": ["cat", str(SOLUTIONS / f"{STEM}.ipynb")],
        "read the instructor's source": ["cat", str(hub.course_root / "source" / NB)],
        "read the autograded notebooks": ["ls", str(hub.course_root / "autograded")],
        "connect to the gradebook as the instructor": [
            str(pg_bin() / "psql"), "-h", str(hub.state / "pg-run"), "-p", str(hub.pg_port), "-U", hub.instructor,
            "-d", "attention", "-c", "UPDATE grade SET auto_score = 99"],
    }
    allowed = {what: as_user(hub, intruder, *cmd, cwd="/").stdout[:200] for what, cmd in attempts.items()
               if as_user(hub, intruder, *cmd, cwd="/").returncode == 0}
    assert not allowed, f"a learner could: {allowed}"
    # The same commands work for their owner: the attempts failed for want of permission, not of a file.
    assert as_user(hub, victim, "cat", str(feedback_file), cwd="/").returncode == 0
