"""A learner's HTML feedback renders its formulas offline (autograder/feedback.py): opened from
disk, and served by a Jupyter server under /files/ as on JupyterHub, with every request that
leaves the machine refused. Debian's Chromium driven by Playwright, as in test_browser.py."""
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from autograder.notebooks import COURSE

pytestmark = pytest.mark.slow
STEM = "01_dot_product_attention"
# Without Chromium: skipped with test_browser's one line (a failure in CI, as there).
from autograder.tests.test_browser import chromium_page  # noqa: E402

RENDERED = "() => window.MathJax && MathJax.Hub && document.querySelectorAll('.MathJax, .MathJax_Display').length > 0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def feedback(tmp_path_factory):
    """The feedback of notebook 01 as released (the stub: a fast grading, the same page)."""
    folder = tmp_path_factory.mktemp("feedback")
    subprocess.run([sys.executable, "-m", "autograder", "submit", str(COURSE / f"{STEM}.ipynb"), "--json",
                    "--feedback-dir", str(folder)], check=True, capture_output=True, timeout=300)
    page = folder / f"{STEM}.html"
    html = page.read_text()
    assert "cdnjs" not in html and "jupyter_server_mathjax" in html, "the feedback still loads MathJax from a CDN"
    return page


@pytest.fixture(scope="module")
def server(feedback):
    """A Jupyter server of the environment with the feedback's folder as its root, on loopback."""
    port, token = free_port(), "mathjax-test-token"
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_server", f"--ServerApp.root_dir={feedback.parent}",
                             "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                             f"--IdentityProvider.token={token}", "--no-browser", "--allow-root"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the Jupyter server did not answer on {base} within 90 s")
                time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def rendered_offline(url: str) -> list[str]:
    """Open `url` with every request off the machine refused; return the refused addresses."""
    refused = []

    def only_local(route):
        if route.request.url.startswith(("file://", "http://127.0.0.1", "data:")):
            return route.continue_()
        refused.append(route.request.url)
        return route.abort()

    with chromium_page() as page:
        page.route("**/*", only_local)
        page.goto(url)
        page.wait_for_function(RENDERED, timeout=90_000)
    return refused


def test_feedback_renders_formulas_from_disk_offline(feedback):
    assert rendered_offline(feedback.as_uri()) == []


def test_feedback_renders_formulas_served_by_jupyter_offline(server, feedback):
    base, token = server
    assert rendered_offline(f"{base}/files/{feedback.name}?token={token}") == []
