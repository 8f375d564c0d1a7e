"""A class on JupyterHub, end to end (hub/course_hub.py): the hub on loopback with one instructor and
three learners as real Unix accounts, nbgrader's exchange, the gradebook in PostgreSQL.

Through the hub's REST API and the servers' own interfaces (nbgrader's formgrader API for the
instructor, its assignment list and Validate handlers and Jupyter's contents API for the learners),
the instructor generates and releases notebook 01; learner1 solves it, learner2 gets softmax wrong,
learner3 leaves it untouched; each fetches, validates and submits; the instructor collects,
autogrades with the course's grader, generates and releases feedback; each learner fetches their
feedback. Then scores are checked in the gradebook and in each learner's feedback, and the
forbidden reads and writes are tried as the learners themselves, and from inside the grading
kernel, which runs as a throwaway account in namespaces of its own (autograder/sandbox.py), not as
the instructor. learner2 also makes the ten attacks of the issue "A class a learner cannot break"
(autograder/tests/hub_attacks.py lists them): each must fail.

Accounts, exchange and PostgreSQL are made under a name of the test's own and removed afterwards.
The learner's part in Chromium (Playwright), as in test_browser.py: log in, Assignments, fetch, type,
Validate, Submit, fetch feedback. Ten learners, timed: `.venv/bin/python -m autograder.tests.test_hub 10`.
Skipped with one line where the machine cannot run a class (not root, no configurable-http-proxy:
`make hub-proxy`, no PostgreSQL). Alone: `.venv/bin/python -m pytest -q autograder/tests/test_hub.py`.
"""
import contextlib
import json
import pwd
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
import urllib.error
import urllib.request
from urllib.parse import quote

import nbformat
import pytest

from autograder.notebooks import ROOT, SOLUTIONS
from autograder.prestart import DEFAULT_MEMORY_MB

sys.path.insert(0, str(ROOT))
from hub.course_hub import COURSE_ID, CourseHub, _pids_of, missing, pg_bin  # noqa: E402

WHY = missing()
if WHY:
    pytest.skip(f"JupyterHub test skipped: {WHY}", allow_module_level=True)

# Without Chromium: skipped with test_browser's one line (a failure in CI, as there).
from autograder.tests.test_browser import chromium_page, expect, type_into  # noqa: E402
from autograder.tests import hub_attacks as attack  # noqa: E402
from autograder.tests import hub_attacks_machine as machine  # noqa: E402
from autograder.tests import hub_attacks_pipeline as pipeline  # noqa: E402
from hub.limits import cgroup_version  # noqa: E402

pytestmark = pytest.mark.slow
STEM = "01_dot_product_attention"
NB = f"{STEM}/{STEM}.ipynb"
WRONG_SOFTMAX = ("def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:\n"
                 "    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n")


def probe_cell(hub) -> str:
    """A cell learner2 adds: under which account does it run, and can it read what the grader can?"""
    good = hub.learners[0]
    targets = [hub.course_root / "source" / NB, hub.course_root / "submitted" / good / NB,
               hub.exchange / COURSE_ID / "inbound", Path(home_of(good)) / NB, SOLUTIONS / f"{STEM}.ipynb",
               Path(home_of(hub.instructor)) / ".local" / "share" / "jupyter" / "runtime", ROOT / ".git"]
    return ("import os, pwd, resource\n"
            "print('running as', pwd.getpwuid(os.geteuid()).pw_name)\n"
            "print('memory limit MiB', resource.getrlimit(resource.RLIMIT_DATA)[1] >> 20)\n"
            f"for path in {[str(t) for t in targets]!r}:\n"
            "    try:\n"
            "        os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(1)\n"
            "        print('read', path)\n"
            "    except OSError as e:\n"
            "        print('refused', type(e).__name__, path)\n")


def python(hub) -> str:
    """The accounts' interpreter: the course's runtime (the checkout is closed to them, hub/runtime.py)."""
    return str(hub.runtime / ".venv" / "bin" / "python")


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


def home_of(name: str) -> str:
    return pwd.getpwnam(name).pw_dir


def as_user(hub, name, *cmd, cwd=None, env=None):
    return subprocess.run(["runuser", "-u", name, "--", "env", f"HOME={home_of(name)}", *(env or []), *cmd],
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
    result = as_user(hub, hub.instructor, python(hub), "-c", script, hub.gradebook, COURSE_ID, STEM, cwd="/")
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# Each learner's server: small enough that going over it is quick to try (hub/limits.py), as are its
# private tmpfs and the disks of the homes and the exchange (hub/private.py, hub/disks.py).
LIMITS = {"memory_mb": 2048, "cpus": 1.0, "processes": 256, "file_mb": 256, "private_mb": 256}
DISKS = {"learner": 256, "instructor": 1024, "exchange": 512}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    prefix = "t" + secrets.token_hex(3)  # a name of its own: two runs never meet
    state = Path("/srv") / f"attention-hub-{prefix}"  # not in /tmp: each server has a /tmp of its own
    state.parent.mkdir(exist_ok=True)
    course = CourseHub(state, prefix, learners=4, server_limits=LIMITS, disk_mb=DISKS)  # the fourth: the browser
    course.planted, course.ipc_keys = [], []
    try:
        started = time.perf_counter()
        course.start()
        print(f"test_hub: the class started in {time.perf_counter() - started:.0f} s", flush=True)
        course._lap = time.perf_counter()
        yield course
    finally:
        course.stop()
    left = [u.pw_name for u in pwd.getpwall() if u.pw_name.startswith(f"{prefix}-")]
    assert not left and not state.exists() and not course.sudoers.exists(), f"the class left {left or state}"
    assert not attack.gone(course.planted), f"10, W10: a learner's files survived the class: {attack.gone(course.planted)}"
    assert not machine.ipc_seen(course.ipc_keys), f"W10: IPC objects survived the class: {machine.ipc_seen(course.ipc_keys)}"
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(state) not in mounts and not any(f"/{prefix}-" in line for line in mounts.splitlines()), \
        "a disk or tmpfs of the class is still mounted"
    assert ROOT.stat().st_mode & 0o005 == 0o005, "the checkout was not opened again"


def call(hub, user, method, path, body=None):
    return hub.api(method, f"/user/{user}{path}", body)


def ok(answer, what):
    assert answer.get("success", True), f"{what} failed: {str(answer)[-2000:]}"
    return answer


EDITS = {"solved": {}, "wrong softmax": {"softmax": WRONG_SOFTMAX}, "untouched": None}


def release(hub):
    teacher = hub.instructor
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/assign"), "generate_assignment")
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/release"), "release_assignment")


def learners_work(hub, kinds: dict[str, str], validate: list[str]):
    """Each learner fetches, edits (kinds: learner -> a key of EDITS), validates (those in `validate`)
    and submits, through their own server."""
    body = {"course_id": COURSE_ID, "assignment_id": STEM}
    for learner, kind in kinds.items():
        listed = ok(call(hub, learner, "POST", "/assignments/fetch", body), "fetch")
        assert any(a["status"] == "fetched" for a in listed["value"]), listed
        if EDITS[kind] is not None:
            content = call(hub, learner, "GET", f"/api/contents/{NB}")
            nb = solved(nbformat.from_dict(content["content"]), EDITS[kind])
            if kind == "wrong softmax":  # tries, while graded, what the grader's account could read or leave (4),
                nb.cells.append(nbformat.v4.new_code_cell(probe_cell(hub)))  # and script in the formgrader (1)
                nb.cells.append(nbformat.v4.new_code_cell(attack.graded_probe(hub)))
                nb.cells.append(nbformat.v4.new_markdown_cell(attack.XSS_MARKDOWN))
                nb.cells.append(nbformat.v4.new_code_cell(attack.XSS_OUTPUT))
            call(hub, learner, "PUT", f"/api/contents/{NB}", {"type": "notebook", "format": "json", "content": nb})
        if learner in validate:
            validated = call(hub, learner, "POST", "/assignments/validate", {"path": NB})
            verdict = validated.get("value")
            verdict = json.loads(verdict) if isinstance(verdict, str) else verdict
            assert validated.get("success") and isinstance(verdict, dict), validated
            assert not any(verdict.get(k) for k in ("failed", "changed", "type_changed", "locked_cell_changed")), verdict
        ok(call(hub, learner, "POST", "/assignments/submit", body), "submit")


def grade(hub, learners, watch=None):
    """The instructor collects, autogrades each learner with the course's grader, and releases feedback;
    while `watch`'s submission is autograded, the instructor's server is asked for its status
    (hub_attacks_pipeline.responsive, kept as hub.watched)."""
    teacher = hub.instructor
    started = time.perf_counter()
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/collect"), "collect")
    hub.collect_s = time.perf_counter() - started
    for learner in learners:
        with pipeline.responsive(hub) if learner == watch else contextlib.nullcontext() as watched:
            ok(call(hub, teacher, "POST", f"/formgrader/api/submission/{STEM}/{learner}/autograde"), f"autograde {learner}")
        hub.watched = watched or getattr(hub, "watched", None)
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/generate_feedback"), "generate_feedback")
    ok(call(hub, teacher, "POST", f"/formgrader/api/assignment/{STEM}/release_feedback"), "release_feedback")


def check_grades(hub, kinds: dict[str, str]) -> dict:
    """Scores in the gradebook, and in each learner's fetched feedback, are what each kind deserves."""
    grades = gradebook_rows(hub)
    assert set(grades) == set(kinds), grades
    maximum = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
               for c in nbformat.read(SOLUTIONS / f"{STEM}.ipynb", as_version=4).cells
               if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    for learner, kind in kinds.items():
        got = grades[learner]
        if kind == "solved":
            assert got == maximum, (learner, got)
        elif kind == "wrong softmax":
            assert got["test_softmax"] == 0 and got["test_softmax_hidden"] == 0, (learner, got)
            assert got["test_attention_scores_hidden"] == maximum["test_attention_scores_hidden"], (learner, got)
        else:
            assert sum(got.values()) == 0, (learner, got)
    body = {"course_id": COURSE_ID, "assignment_id": STEM}
    for learner in kinds:
        ok(call(hub, learner, "POST", "/assignments/fetch_feedback", body), "fetch_feedback")
        folder = call(hub, learner, "GET", f"/api/contents/{STEM}/feedback")["content"]
        assert len(folder) == 1, folder
        page = call(hub, learner, "GET", f"/api/contents/{quote(folder[0]['path'])}/{STEM}.html")["content"]
        score = re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", page)
        assert score and float(score[1]) == sum(grades[learner].values()) and float(score[2]) == sum(maximum.values()), \
            (learner, score and score.group(0))
        assert "cdnjs" not in page, "feedback loads MathJax from a CDN"
    return grades


def page_status(hub, user, path) -> tuple[int, str]:
    request = hub.request(f"/user/{user}{path}", headers={"Authorization": f"token {hub.service_token}"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            hub.last_headers = answer.headers
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""


def lap(hub, what: str):
    """Seconds since the last lap, printed (pytest shows them with -s, and with a failure)."""
    now = time.perf_counter()
    print(f"test_hub: {what} {now - getattr(hub, '_lap', now):.0f} s", flush=True)
    hub._lap = now


def test_a_class_through_the_exchange(hub):
    teacher, (good, wrong, idle) = hub.instructor, hub.learners[:3]
    hub.spawn([teacher, good, wrong, idle])
    lap(hub, "four servers")
    # Each role its tools: the formgrader for the instructor only; Create Assignment off in a learner's lab.
    assert page_status(hub, teacher, "/formgrader/api/status")[0] == 200
    assert page_status(hub, good, "/formgrader/api/status")[0] == 404
    code, lab = page_status(hub, good, "/lab")
    assert code == 200 and '"@jupyter/nbgrader:create-assignment"' in lab.split("disabledExtensions", 1)[-1][:2000], \
        "a learner's JupyterLab still loads nbgrader's Create Assignment"
    # N9: what the learner's home says about their server (a page to serve, code to run at start) is ignored.
    wrong_now = machine.config_ignored(hub, wrong, machine.plant_server_config(hub, wrong))
    assert not wrong_now, wrong_now
    lap(hub, "N9: a learner's server restarted")

    refused = attack.succeeded(wrong, attack.exchange_attempts(hub, STEM))  # 8, before the release
    assert not refused, f"a learner could: {refused}"
    release(hub)
    kinds = {good: "solved", wrong: "wrong softmax", idle: "untouched"}
    learners_work(hub, kinds, validate=[good])

    # learner2 submits in learner1's name (nbgrader submit --student): it must not replace learner1's work.
    time.sleep(1.1)  # a later timestamp than learner1's own submission
    forged = as_user(hub, wrong, str(hub.runtime / "bin" / "nbgrader"), "submit", STEM, "--course", COURSE_ID,
                     f"--CourseDirectory.student_id={good}", cwd=home_of(wrong),
                     env=[f"JUPYTER_CONFIG_PATH={hub.runtime / 'hub' / 'roles' / 'learner'}",
                          f"ATTENTION_REPO={hub.runtime}", f"ATTENTION_EXCHANGE={hub.exchange}", f"PYTHONPATH={hub.runtime}"])
    inbound = hub.exchange / COURSE_ID / "inbound"
    assert forged.returncode == 0 and any(p.name.startswith(f"{good}+") and p.owner() == wrong
                                          for p in inbound.iterdir()), forged.stderr[-2000:]

    lap(hub, "release, fetch, edit, validate, submit")
    planted = attack.plant_in_inbound(hub, good, wrong, STEM)  # 3, 5, 9
    heavy = pipeline.plant_heavy(hub, wrong, STEM)  # N5, N3, N2, N10: later than the honest one
    lap(hub, "planted in inbound")
    grade(hub, kinds, watch=wrong)
    lap(hub, "collect, autograde, feedback")
    check_grades(hub, kinds)  # the learner's honest submission counts, and every other learner's
    attack.after_collect(hub, planted, good, wrong, STEM, "BEGIN HIDDEN TESTS")
    assert not pipeline.refused_all(hub, heavy), f"collect took these for submissions: {pipeline.refused_all(hub, heavy)}"
    assert hub.collect_s < 60, f"N5: collect took {hub.collect_s:.0f} s"
    assert pipeline.course_folder_mb(hub) < 50, f"N10: the course folder takes {pipeline.course_folder_mb(hub)} MiB"
    # N5: a step on a submission runs outside the instructor's server (in the class's grading cgroup).
    assert hub.watched.worst < 10, f"the instructor's server took {hub.watched.worst:.1f} s to answer during an autograde"
    assert hub.watched.confined or not hub.grading_cgroups, "no step of the instructor's ran in the grading cgroup"

    # The learner's code ran as the throwaway account, and none of the grader's files were open to it.
    graded = nbformat.read(hub.course_root / "autograded" / wrong / STEM / f"{STEM}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    assert f"running as {hub.grader}\n" in printed, printed[-800:]
    assert f"memory limit MiB {DEFAULT_MEMORY_MB}\n" in printed, printed[-800:]  # the course config's, kept through sudo
    assert printed.count("refused ") == 7 + 3 and "\nread " not in printed, printed[-1500:]
    assert not _pids_of(pwd.getpwnam(hub.grader).pw_uid, settle=5), "a grading kernel outlived its grading"
    # 4: graded again, the same notebook finds nothing that its first grading left (startup file, files, daemon);
    # N4, N1: nor in its connection folder (a small tmpfs, emptied), and it holds no file of the grader's.
    ok(call(hub, teacher, "POST", f"/formgrader/api/submission/{STEM}/{wrong}/autograde"), "autograde again")
    graded = nbformat.read(hub.course_root / "autograded" / wrong / STEM / f"{STEM}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    assert not attack.graded_probe_held(printed, hub), attack.graded_probe_held(printed, hub)
    assert not _pids_of(pwd.getpwnam(hub.grader).pw_uid, settle=5), "4: a daemon outlived its grading"

    # 1, W1, N8: the formgrader's page of that submission carries none of the learner's script, and is sent
    # with a policy that would stop any that got through (Chromium: browser_part).
    code, page = page_status(hub, teacher, f"/formgrader/submissions/{attack.submission_id(hub, call, STEM, wrong)}/?index=0")
    assert code == 200 and "xss-probe" in page and not attack.formgrader_page_has_no_script(page), \
        attack.formgrader_page_has_no_script(page)
    scripts = re.search(r"script-src[^;]*", hub.last_headers.get("Content-Security-Policy", ""))
    assert scripts and "'nonce-" in scripts[0] and "'unsafe-inline'" not in scripts[0], hub.last_headers

    lap(hub, "graded again, formgrader page")
    forbidden_attempts(hub, good, wrong)
    refused = attack.succeeded(wrong, attack.checkout_attempts(hub, ROOT, STEM))  # 2
    refused |= attack.succeeded(wrong, attack.state_attempts(hub))  # 6
    assert not refused, f"a learner could: {refused}"
    assert not attack.readable_state_files(hub), f"6: readable by all: {attack.readable_state_files(hub)}"
    # 7: through the learner's own server, a kernel goes over each limit of it.
    said = attack.run_in_kernel(hub, wrong, attack.limits_code(LIMITS))
    out = json.loads(said.strip().splitlines()[-1])
    assert not attack.limits_held(out, LIMITS, cgroup_version() > 0), (attack.limits_held(out, LIMITS, cgroup_version() > 0), out)
    lap(hub, "forbidden reads and writes, limits")
    machine_attempts(hub, good, wrong)
    lap(hub, "N1, N6, W7, W10 in kernels")
    # N2: one learner's feedback that cannot be released stops no one else's.
    isolated = pipeline.release_isolated(hub, call, STEM, idle, [good, wrong])
    assert not isolated, isolated
    hub.planted += attack.plant_tmp_files(hub, wrong)  # 10: checked after the class stops (the fixture)
    lap(hub, "N2 release isolated")
    browser_part(hub)
    lap(hub, "Chromium: learner, instructor")


def machine_attempts(hub, victim, intruder):
    """N1, N6, W7, W10: from the intruder's kernel and shell, each must fail; what is left for after
    the class is checked by the fixture."""
    wrong, planted, keys = machine.attempts(hub, victim, intruder, DISKS["learner"], LIMITS["private_mb"])
    hub.planted += planted
    hub.ipc_keys += keys
    assert not wrong, wrong


def forbidden_attempts(hub, victim, intruder):
    """Every attempt, made as `intruder` (a learner's Unix account), must fail."""
    home = Path(home_of(victim))
    course = hub.exchange / COURSE_ID
    feedback_file = next((home / STEM / "feedback").rglob("*.html"))
    submitted = next(p for p in (course / "inbound").iterdir()
                     if p.name.startswith(f"{victim}+") and not p.is_symlink() and p.owner() == victim)
    released = next(p for p in (course / "feedback").iterdir() if p.read_bytes() == feedback_file.read_bytes())
    attempts = {
        "read another learner's notebook": ["cat", str(home / NB)],
        "change another learner's notebook": ["sh", "-c", f"echo x >> {home / NB}"],
        "read another learner's feedback": ["cat", str(feedback_file)],
        "list the exchange's submissions": ["ls", str(course / "inbound")],
        "read another learner's submission": ["cat", str(submitted / f"{STEM}.ipynb")],
        "list the exchange's feedback": ["ls", str(course / "feedback")],
        "read another learner's released feedback by its name": ["cat", str(released)],
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
    assert as_user(hub, victim, "cat", str(released), cwd="/").returncode == 0


RIGHT = "return inputs @ query"  # attention_scores, typed in the browser


def browser_part(hub):
    """Debian's Chromium (Playwright): log in, open the assignment list, fetch, fill an exercise,
    Validate, Submit; after the instructor grades, fetch and see the feedback. Part of the test
    above (one hub: two tests could land on two pytest-xdist workers and each start one)."""
    learner = hub.learners[3]
    hub.spawn([hub.instructor, learner])
    listed = call(hub, learner, "GET", f"/assignments?course_id={COURSE_ID}")
    if not any(a["assignment_id"] == STEM for a in listed.get("value", [])):
        release(hub)
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.set_default_timeout(120_000)
        page.goto(f"{hub.url}/hub/login")
        page.locator("input[name=username]").fill(learner)
        page.locator("input[name=password]").fill(hub.passwords[learner])
        page.locator("input[type=submit], button[type=submit]").first.click()
        page.wait_for_url(f"**/user/{learner}/lab**")

        def assignments():
            page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
            menu = page.locator(".lm-Menu")
            expect(menu.get_by_text("Assignment List", exact=True)).to_be_visible()
            assert menu.get_by_text("Formgrader", exact=True).count() == 0, "a learner sees the formgrader"
            menu.get_by_text("Assignment List", exact=True).click()

        assignments()
        page.get_by_role("button", name="Fetch", exact=True).click()
        expect(page.get_by_role("button", name="Submit", exact=True)).to_be_visible()

        page.goto(f"http://{hub.host_of(learner)}/user/{learner}/lab/tree/{NB}")
        expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle")
        type_into(page, "attention_scores", RIGHT)
        page.keyboard.press("Control+s")
        # Seen once on a loaded machine (load 9 on 2 cores): JupyterLab asked whether to overwrite the
        # fetched file "changed on disk"; the learner keeps what they typed.
        changed = page.locator(".jp-Dialog").filter(has_text="changed on disk")
        try:
            changed.get_by_role("button", name="Overwrite").click(timeout=3000)
        except Exception:
            pass
        page.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("The following cell failed")  # softmax and the rest are not done
        dialog.get_by_role("button").last.click()
        expect(dialog).to_have_count(0)

        assignments()
        page.get_by_role("button", name="Submit", exact=True).click()
        expect(page.get_by_text("Fetch Feedback", exact=True)).to_be_visible()

        grade(hub, [learner])
        page.reload()
        assignments()
        page.get_by_text("Fetch Feedback", exact=True).click()
        expect(page.get_by_text("(view feedback)")).to_be_visible()
        # The feedback page (opened as a page of its own, as JupyterLab's "Open in New Browser Tab" does)
        # carries its own policy, and its formulas still render under it (MathJax 2).
        page.get_by_text("(view feedback)").first.click()
        folder = call(hub, learner, "GET", f"/api/contents/{STEM}/feedback")["content"]
        feedback = page
        feedback.goto(f"http://{hub.host_of(learner)}/user/{learner}/files/{quote(folder[0]['path'])}/{STEM}.html")
        assert feedback.locator('meta[http-equiv="Content-Security-Policy"]').count() == 1, "feedback without its policy"
        expect(feedback.locator(".MathJax, .MathJax_Display").first).to_be_attached()
        instructor_browser(hub, page)
    folder = call(hub, learner, "GET", f"/api/contents/{STEM}/feedback")["content"]
    page_html = call(hub, learner, "GET", f"/api/contents/{quote(folder[0]['path'])}/{STEM}.html")["content"]
    score = re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", page_html)
    assert score and float(score[1]) == 3.0, score and score.group(0)  # attention_scores' 1 + 2 points


def instructor_browser(hub, page):
    """1, W1, N8, N9 in the instructor's Chromium: the attacker's submission opened in the formgrader
    (its script would act as the instructor: the same origin, the _xsrf cookie), a link in it
    clicked; then a page in the attacker's origin tries to reach the instructor's server."""
    wrong = hub.learners[1]
    submission = attack.submission_id(hub, call, STEM, wrong)
    page.context.clear_cookies()
    page.goto(f"{hub.url}/hub/login")
    page.locator("input[name=username]").fill(hub.instructor)
    page.locator("input[name=password]").fill(hub.passwords[hub.instructor])
    page.locator("input[type=submit], button[type=submit]").first.click()
    page.wait_for_url(f"**/user/{hub.instructor}/lab**")
    teacher = f"http://{hub.host_of(hub.instructor)}/user/{hub.instructor}"
    page.goto(f"{teacher}/formgrader/submissions/{submission}/?index=0")
    expect(page.get_by_text("xss-probe").first).to_be_visible()
    page.wait_for_timeout(4000)  # an onerror fires once the broken image has failed to load; W1's PUT returns
    assert page.evaluate("document.body.getAttribute('data-pwned')") is None, "1, W1: a learner's script ran in the formgrader"
    proof = Path(home_of(hub.instructor)) / attack.PROOF
    assert not proof.exists(), "W1: a learner's script wrote into the instructor's home"
    # The formgrader's own scripts still run under the policy: they filled in each cell's score.
    expect(page.locator("input.score").first).to_have_attribute("placeholder", re.compile(r"\d"))
    page.get_by_text("click A").first.click()  # N8: the instructor clicks a link in the learner's markdown
    page.wait_for_timeout(1000)
    assert page.evaluate("document.body.getAttribute('data-pwned')") is None, "N8: a javascript: link ran"
    # N9: a page in the learner's origin (what they serve, or a script of theirs there) opens the
    # formgrader and reaches for the instructor's cookie and API.
    page.goto(f"http://{hub.host_of(wrong)}/user/{wrong}/static/plot.html")
    said = page.evaluate(attack.ORIGIN_PROBE, {"teacher": teacher, "proof": attack.ORIGIN_PROOF})
    assert not said["cookie"] and said["put"] != 201, f"N9: a page in a learner's origin reached the instructor's: {said}"
    assert not (Path(home_of(hub.instructor)) / attack.ORIGIN_PROOF).exists(), "N9: it wrote into the instructor's home"




def main(learners: int) -> int:
    """`python -m autograder.tests.test_hub N`: N learners (solved, wrong softmax, untouched in turn)
    through fetch, submit, collect, autograde and feedback, timed; every grade checked."""
    prefix = "time" + secrets.token_hex(2)
    hub = CourseHub(Path("/srv") / f"attention-hub-{prefix}", prefix, learners=learners)
    try:
        t0 = time.perf_counter()
        hub.start()
        hub.spawn([hub.instructor, *hub.learners], timeout=600)  # eleven servers at once: slow on a busy machine
        t1 = time.perf_counter()
        release(hub)
        kinds = {name: list(EDITS)[i % 3] for i, name in enumerate(hub.learners)}
        learners_work(hub, kinds, validate=[])
        t2 = time.perf_counter()
        grade(hub, kinds)
        t3 = time.perf_counter()
        check_grades(hub, kinds)
        t4 = time.perf_counter()
        print(f"{learners} learners: hub and {learners + 1} servers started in {t1 - t0:.0f} s; release, fetch, edit and "
              f"submit {t2 - t1:.0f} s; collect, autograde, feedback {t3 - t2:.0f} s; feedback fetched and every grade "
              f"checked {t4 - t3:.0f} s; fetch to feedback {t4 - t1:.0f} s in all")
        with open("/proc/loadavg") as f:
            print("load average (1, 5, 15 min):", " ".join(f.read().split()[:3]))
        return 0
    finally:
        hub.stop()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
