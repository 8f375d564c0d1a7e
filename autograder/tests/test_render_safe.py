"""A learner's notebook rendered for the instructor (hub/render_safe.py), and the pieces of the
class's pipeline that need no hub (hub/safe_copy.py's bounds, hub/pipeline.py's is_ignored): every
route for script that the second probe of the hub found (review hub-probe-2.md W1, N8) and the
neighbours of each, through nbgrader's own templates. test_hub.py tries the same in a live class,
in Chromium; this runs in a second, without root."""
import base64
import os
import re
import subprocess
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell
from nbconvert.preprocessors import Preprocessor
from traitlets.config import Config

from hub import safe_copy
from hub.pipeline import is_ignored
from hub.render_safe import SafeFeedbackExporter, SafeFormgradeExporter, seal

PWN = "document.body.setAttribute('data-pwned','x')"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
RESOURCES = {"base_url": "/user/t", "assignment_id": "a", "notebook_id": "n", "submission_id": "s", "index": 0,
             "total": 1, "student": "s", "last_name": None, "first_name": None, "notebook_path": "n.ipynb"}


def hostile() -> nbformat.NotebookNode:
    """Every way into the page the probes tried or that lies next to one, and a few honest outputs."""
    bad = "1 onerror=eval(atob(this.alt))"
    outputs = [
        new_output("display_data", {"image/png": PNG, "text/plain": "w"}, metadata={"image/png": {"width": bad, "alt": "x"}}),
        new_output("display_data", {"image/png": PNG}, metadata={"image/png": {"height": bad}}),
        new_output("display_data", {"image/jpeg": PNG}, metadata={"image/jpeg": {"width": bad}, "width": bad}),
        new_output("display_data", {"image/png": f'{PNG}" onerror="{PWN}'}),
        new_output("display_data", {"image/png": PNG}, metadata={"filenames": {"image/png": f'x" onerror="{PWN}'}}),
        new_output("display_data", {"text/html": f'<a href="javascript:{PWN}">h</a><script>{PWN}</script>'
                                                 f'<img src=x onerror="{PWN}">'}),
        new_output("display_data", {"text/markdown": f"[m](javascript:{PWN}) ![i](javascript:{PWN})"}),
        new_output("display_data", {"application/javascript": PWN, "image/svg+xml": f"<svg onload=\"{PWN}\"/>",
                                    "application/vnd.jupyter.widget-view+json": {"model_id": "x"}}),
        new_output("display_data", {"text/latex": f"$x$ <img src=x onerror=\"{PWN}\">"}),
        new_output("display_data", {"image/png": PNG, "text/plain": "honest"}, metadata={"image/png": {"width": 300}}),
    ]
    code = new_code_cell("x = 1", outputs=outputs, execution_count=1)
    code.metadata.nbgrader = {"grade_id": f'"><img src=x onerror="{PWN}">', "solution": True, "grade": True,
                              "points": 1}
    markdown = new_markdown_cell(f"xss-probe [click A](javascript:{PWN}) [b](JaVaScRiPt:{PWN}) "
                                 f"[c]( javascript:{PWN}) <a href='javascript:{PWN}'>d</a> "
                                 f"![e](attachment:e.svg) ![f](attachment:f.png) $x^2$ [web](https://example.org)")
    markdown.attachments = {"e.svg": {"image/svg+xml": base64.b64encode(f"<svg onload=\"{PWN}\"/>".encode()).decode()},
                            "f.png": {"image/png": PNG}}
    raw = new_raw_cell(f"<script>{PWN}</script><img src=x onerror=\"{PWN}\">")
    raw.metadata.raw_mimetype = "text/html"
    nb = new_notebook(cells=[markdown, code, raw])
    nb.metadata.widgets = {"application/vnd.jupyter.widget-state+json": {"state": {}, "x": f"</script><script>{PWN}"}}
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    return nb


class Grades(Preprocessor):
    """What nbgrader's GetGrades adds before the feedback template (it runs after the allow-list)."""

    def preprocess(self, nb, resources):
        resources["nbgrader"] = {"notebook": "n", "score": 1.0, "max_score": 1.0, "late_penalty": 0.0}
        for cell in nb.cells:
            if "nbgrader" in cell.metadata:
                cell.metadata.nbgrader.update(score=1.0, comment=None)
        return nb, resources


def config(template: str) -> Config:
    c = Config()
    c.HTMLExporter.preprocessors = ["hub.render_safe.AllowList", "nbconvert.preprocessors.sanitize.SanitizeHTML",
                                    "hub.render_safe.Boundary", Grades]
    c.HTMLExporter.template_name = template  # nbgrader's own formgrade and feedback templates
    from nbgrader.server_extensions.formgrader import handlers
    c.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    c.HTMLExporter.extra_template_paths = [os.path.join(handlers.static_path, "node_modules", "bootstrap", "dist", "css")]
    return c


def live_script(page: str, nonce: str, boundary_free=True) -> list[str]:
    """What could run in `page` under its policy: handlers, javascript: URLs, scripts without the nonce."""
    found = re.findall(r"<[a-z]+[^>]*\son[a-z]+\s*=[^>]*>", page, flags=re.I)
    found += re.findall(r"<[a-z]+[^>]*(?:href|src)\s*=\s*[\"']?\s*javascript:[^>]*>", page, flags=re.I)
    found += [s for s in re.findall(r"<script\b[^>]*>", page, flags=re.I) if f'nonce="{nonce}"' not in s]
    return found


@pytest.mark.parametrize("exporter, template", [(SafeFormgradeExporter, "formgrade"), (SafeFeedbackExporter, "feedback")])
def test_no_route_for_script_survives_the_rendering(exporter, template):
    page, resources = exporter(config=config(template)).from_notebook_node(hostile(), resources=dict(RESOURCES))
    nonce = resources["csp_nonce"]
    assert nonce and "xss-probe" in page
    assert not live_script(page, nonce), live_script(page, nonce)
    assert "attention-boundary-" not in page  # the markers are gone once the page is sealed
    notebook = page[page.index("xss-probe"):]
    assert nonce not in notebook.split("</body>")[0], "the nonce reached the learner's part of the page"
    # What a learner may show still shows: an honest PNG keeps its width, a web link its href, inline math.
    assert re.search(r'<img[^>]*src="data:image/png;base64,[^"]*"[^>]*width="?300', page)
    assert '<a href="https://example.org">web</a>' in page and "$x^2$" in page
    assert f"data:image/png;base64,{PNG}" in page and "image/svg+xml" not in page
    if template == "feedback":  # the page carries its policy wherever it is opened
        assert re.search(r"<meta http-equiv=\"Content-Security-Policy\" content=\"[^\"]*'nonce-" + re.escape(nonce), page)
        assert "'unsafe-inline'" not in re.search(r"script-src[^;]*", page)[0]


def test_a_page_without_its_boundaries_gets_no_nonce():
    page = "<html><head><script>ok()</script></head><body>x</body></html>"
    sealed, nonce = seal(page, "attention-boundary-0123")
    assert nonce is None and sealed == page
    sealed, nonce = seal(page.replace("x", "attention-boundary-0123 x attention-boundary-0123"), "attention-boundary-0123")
    assert nonce and f'<script nonce="{nonce}">ok()' in sealed


def test_is_ignored_lists_no_folder_and_agrees_with_nbgrader(tmp_path):
    import nbgrader.utils
    names = ["a.ipynb", "b.pyc", ".hidden.pyc", "__pycache__", ".ipynb_checkpoints", "feedback", "data.csv", ".x"]
    for name in names:
        (tmp_path / name).write_text("")
    patterns = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.ipynb"]
    theirs = nbgrader.utils.is_ignored
    assert theirs is not is_ignored, "hub.pipeline changed nbgrader on import"
    assert [is_ignored(str(tmp_path / n), patterns) for n in names] == [theirs(str(tmp_path / n), patterns) for n in names]
    many = tmp_path / "many"
    many.mkdir()
    for i in range(5000):
        (many / f"f{i}.txt").write_text("")
    started = time.perf_counter()
    nbgrader.utils.is_ignored = is_ignored  # as hub.pipeline.install() does in each step's process
    try:
        assert len(nbgrader.utils.find_all_files(str(many), patterns)) == 5000
    finally:
        nbgrader.utils.is_ignored = theirs
    assert time.perf_counter() - started < 5, "find_all_files is not linear"


def plant(folder, files=(), dirs=0, sparse=()):
    folder.mkdir()
    (folder / "n.ipynb").write_text("{}")
    (folder / "submission_secret.txt").write_text("s" * 64)
    for name in files:
        (folder / name).write_text("")
    if dirs:
        subprocess.run(["mkdir", "-p", str(folder.joinpath(*["d"] * dirs))], check=True)
    for name, size in sparse:
        with open(folder / name, "wb") as f:
            f.truncate(size)
    return str(folder)


@pytest.fixture
def inbound(tmp_path):
    """A folder for planted submissions, removed with coreutils at the end: pytest's own clean-up of old
    temporary folders (shutil.rmtree, recursive) would stop at 1 100 nested folders, in any later session."""
    yield tmp_path
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp_path)], check=True)


def test_collect_bounds_refuse_at_once(inbound):
    uid, tmp_path = os.getuid(), inbound
    cases = {"20 000 files": plant(tmp_path / "many", files=[f"f{i:05d}" for i in range(20_000)]),
             "1 100 folders deep": plant(tmp_path / "deep", dirs=1100),
             "sparse files": plant(tmp_path / "sparse", sparse=[(f"d{i}.bin", 95_000_000) for i in range(3)]),
             "a sparse secret": plant(tmp_path / "secret", sparse=[("big.txt", 100_000_001)])}
    for what, path in cases.items():
        started = time.perf_counter()
        with pytest.raises(safe_copy.Refused):
            safe_copy.measure(path, uid)
        with pytest.raises(safe_copy.Refused):
            safe_copy.copy_submission(path, str(tmp_path / f"copy-{os.path.basename(path)}"), uid)
        assert time.perf_counter() - started < 5, f"{what}: measured in {time.perf_counter() - started:.1f} s"
    honest = plant(tmp_path / "honest", files=["notes.txt"], dirs=2)
    (tmp_path / "honest" / "link").symlink_to("/etc/passwd")
    with pytest.raises(safe_copy.Refused, match="not a plain file"):
        safe_copy.measure(honest, uid)
    (tmp_path / "honest" / "link").unlink()
    assert safe_copy.copy_submission(honest, str(tmp_path / "copied"), uid) > 0
    assert sorted(os.listdir(tmp_path / "copied")) == ["d", "n.ipynb", "notes.txt", "submission_secret.txt"]
