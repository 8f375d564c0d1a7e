"""The learner's flow in a real browser: JupyterLab started by `make lab`, a notebook typed into,
run, validated with nbgrader's Validate button, saved, and graded by `make submit`.

Playwright (PyPI) drives the system's Chromium (Debian's `chromium` package; no browser is
downloaded). Screenshots are kept in build/screenshots/. Without Chromium the test is skipped
with one line, except in CI (CI=true), where a missing browser is a failure unless COURSE_MAY_SKIP
names "browser" (the GitHub workflow's macOS runner).
Alone: `.venv/bin/python -m pytest -q autograder/tests/test_browser.py`.
"""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from autograder.notebooks import COURSE, ROOT
from autograder.tests import must_run_in_ci

STEM = "01_dot_product_attention"
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM") or next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
if not CHROMIUM:
    why = "no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/chrome)"
    if must_run_in_ci("browser"):
        pytest.fail(f"the browser test needs Chromium in CI: {why}", pytrace=False)
    pytest.skip(f"browser test skipped: {why}", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402


@contextlib.contextmanager
def chromium_page(**options):
    """A page of Debian's Chromium driven by Playwright; the browser closes when the block ends."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            yield browser.new_page(**options)
        finally:
            browser.close()

expect.set_options(timeout=120_000)  # a busy 2-core machine: kernel start, run all, validate

RIGHT = "return inputs @ query"  # attention_scores
WRONG = "return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)"  # softmax without the max shift


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """`make lab` on a copy of course/ (the repository's copy is never typed into)."""
    course = tmp_path / "course"
    shutil.copytree(COURSE, course, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    # The learner's own JupyterLab settings, fresh: every cell rendered, so the test can find them.
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port, token = free_port(), "browser-test-token"
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"))
    log = open(tmp_path / "lab.log", "w")
    args = (f"--ServerApp.ip=127.0.0.1 --ServerApp.port={port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={token}")
    server = subprocess.Popen(["make", "--no-print-directory", "-C", str(ROOT), "lab", f"LAB_DIR={course}",
                               f"LAB_ARGS={args}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 360  # minutes on a busy 2-core machine
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("make lab did not start: " + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield base, token, course
    finally:
        os.killpg(server.pid, 15)  # make, its shell and jupyter: the group started above
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()


def type_into(page, exercise: str, line: str):
    """Replace the exercise's `raise NotImplementedError()` line by typing `line`, as a learner does."""
    editor = page.locator(".jp-CodeCell .cm-content", has_text=f"def {exercise}(").first
    editor.scroll_into_view_if_needed()
    editor.locator(".cm-line", has_text="raise NotImplementedError()").click()
    page.keyboard.press("End")
    page.keyboard.press("Shift+Home")  # to the start of the text, after the indentation
    page.keyboard.type(line)
    expect(editor).to_contain_text(line)


def test_learner_types_runs_validates_and_submits(lab):
    base, token, course = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium_page(viewport={"width": 1400, "height": 1000}) as page:
        page.set_default_timeout(120_000)
        page.goto(f"{base}/lab/tree/{STEM}.ipynb?token={token}")
        # The course turns off JupyterLab's first-start news pop-up (autograder/labconfig).
        config = json.loads(page.locator("#jupyter-config-data").text_content())
        assert "@jupyterlab/apputils-extension:announcements" in config["disabledExtensions"]
        status = page.locator("#jp-main-statusbar")
        expect(status).to_contain_text("Python 3 (ipykernel) | Idle")

        type_into(page, "attention_scores", RIGHT)
        type_into(page, "softmax", WRONG)

        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_text("Run All Cells", exact=True).click()
        passed = page.locator(".jp-OutputArea-output", has_text="✓ attention_scores")
        failed = page.locator(".jp-OutputArea-output", has_text="subtract the maximum before exp")
        expect(passed).to_be_visible()
        expect(failed).to_be_visible()
        expect(status).to_contain_text("Python 3 (ipykernel) | Idle")
        failed.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"{STEM}-notebook.png"))
        assert page.get_by_text("official Jupyter news").count() == 0

        page.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("subtract the maximum before exp")
        text = dialog.inner_text()
        (SHOTS / f"{STEM}-validate.txt").write_text(text, encoding="utf-8")
        dialog.locator(".jp-Dialog-content").screenshot(path=str(SHOTS / f"{STEM}-validate.png"))
        dialog.get_by_role("button").last.click()
        expect(dialog).to_have_count(0)

    # One block per failing test cell: softmax (typed wrong) and the three exercises left untouched;
    # none for attention_scores (typed right).
    blocks = text.split("The following cell failed")[1:]
    failing = [next(line.strip() for line in b.splitlines() if line.strip().startswith("print(\"✓ ")) for b in blocks]
    assert failing == ['print("✓ softmax")', 'print("✓ context_vector")', 'print("✓ self_attention_weights")',
                       'print("✓ self_attention")'], text[:3000]
    assert "subtract the maximum before exp" in blocks[0] and "NotImplementedError" not in blocks[0]
    assert all("NotImplementedError" in b for b in blocks[1:])

    saved = course / f"{STEM}.ipynb"
    assert RIGHT in saved.read_text(encoding="utf-8") and WRONG in saved.read_text(encoding="utf-8")
    result = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "submit", f"NB={saved}", "JSON=1"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    exercises = {e["name"]: e for e in report["exercises"]}
    assert exercises["attention_scores"]["score"] == exercises["attention_scores"]["max_score"] > 0
    assert exercises["softmax"]["score"] == 0
    assert "subtract" in exercises["softmax"]["feedback"]
    assert report["score"] == exercises["attention_scores"]["max_score"]
