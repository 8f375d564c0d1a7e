"""The exporter that writes a learner's HTML feedback: nbconvert's HTMLExporter with nbgrader's
`feedback` template (nbgrader_config.py sets `GenerateFeedback.exporter_class` to it), with two
costs of every submit removed (about 0.7 s of 1.3 s on 2 cores, measured on notebook 06):

- Jinja compiles nbgrader's and nbconvert's templates on every run; here the compiled code is
  kept in build/jinja/, keyed by each template's source, so a changed template is compiled again.
- HTMLExporter parses the whole page (about 250 kB) again with BeautifulSoup, to give images
  without alternative text one and to make JupyterLab-template cells focusable. The feedback
  template is the classic one, which has no such cells, so only the alternative text is added
  here, by a regular expression on the `<img` tags.

And a third: Pygments highlights every code cell again at every submit (0.3 s of notebook 12's
0.6 s, 2 cores), though all but the learner's answers are the released notebook's own. The
highlighted HTML of a cell that is not an answer is kept in build/highlight/, under the hash of
everything it depends on; answers are highlighted afresh and not kept, so the folder grows only
with the released cells and the few others a learner edits. Like build/jinja/ it is read by anyone
and written only where the grading account may.

Formulas render offline: nbgrader's template loads MathJax from a CDN, which a learner without a
network (or a course server without one) cannot reach. The page loads MathJax 2 from the
environment instead (PyPI's jupyter-server-mathjax): from the Jupyter server that serves the page
(`<base>/static/jupyter_server_mathjax/`, where `<base>` is what comes before `/files/` in the
page's address, `/user/<name>` on JupyterHub), or, opened from disk, from the package's folder on
the machine that graded it (autograder/tests/test_feedback_mathjax.py checks both, offline).
"""
import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path

import nbconvert
import pygments

from jinja2 import FileSystemBytecodeCache
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

from autograder.workspace import CACHE

_IMG_WITHOUT_ALT = re.compile(r"<img(?![^>]*\balt=)")
NO_ALT = "No description has been provided for this image"
_CDN_MATHJAX = re.compile(r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"]*">\s*</script>')
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"  # the one combined configuration the package ships


def mathjax_folder() -> Path | None:
    """The folder of MathJax.js in jupyter-server-mathjax (found without importing the package)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    folder = Path(spec.origin).parent / "static" if spec and spec.origin else None
    return folder if folder and (folder / "MathJax.js").exists() else None


def local_mathjax_loader() -> str:
    folder = mathjax_folder()
    on_disk = folder.as_uri() if folder else ""
    return ("<script>(function () {\n"
            "  // MathJax from the environment, not a CDN (autograder/feedback.py)\n"
            "  var page = location.pathname, at = page.indexOf('/files/');\n"
            f"  var base = location.protocol === 'file:' ? {json.dumps(on_disk)} :\n"
            "      (at >= 0 ? page.slice(0, at) : '') + '/static/jupyter_server_mathjax';\n"
            f"  if (base) document.write('<script src=\"' + base + '/MathJax.js?config={MATHJAX_CONFIG}\"><' + '/script>');\n"
            "})();</script>")


class _BytecodeCache(FileSystemBytecodeCache):
    """Read by anyone; written only where the grading account may (on a course's JupyterHub the
    instructor grades, and the checkout's build/ belongs to root): a cache that cannot be written
    costs the compile, never the feedback."""

    def dump_bytecode(self, bucket):
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


class CachedHighlight(Highlight2HTML):
    """Highlight2HTML with the HTML of each cell that is not an answer kept in build/highlight/."""

    def __call__(self, source, language=None, metadata=None):
        if (metadata or {}).get("nbgrader", {}).get("solution"):  # the learner's own: seen once
            return super().__call__(source, language, metadata)
        language = language or self.pygments_lexer
        magics = (metadata or {}).get("magics_language")  # the one cell metadata highlighting reads
        key = hashlib.sha256(json.dumps([pygments.__version__, nbconvert.__version__, language, magics,
                                         self.extra_formatter_options, source], sort_keys=True).encode()).hexdigest()
        path = CACHE / "highlight" / key[:2] / f"{key}.html"
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            pass
        html = super().__call__(source, language, metadata)
        try:  # a temporary file renamed: a parallel grader reads all of it or nothing
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{key}.{os.getpid()}.tmp")
            partial.write_text(html, encoding="utf-8")
            os.replace(partial, path)
        except OSError:  # not ours to write: the feedback costs the highlighting, nothing else
            pass
        return html


class FeedbackExporter(HTMLExporter):
    def _create_environment(self):
        environment = super()._create_environment()
        try:
            (CACHE / "jinja").mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        # Jinja writes each entry to a temporary file and renames it: parallel graders are safe.
        environment.bytecode_cache = _BytecodeCache(str(CACHE / "jinja"))
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        # HTMLExporter.from_notebook_node without its BeautifulSoup pass (see the module's docstring).
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name"))
        resources = self._init_resources(resources)
        self.register_filter("highlight_code",
                             self.filters.get("highlight_code", CachedHighlight(pygments_lexer=lexer, parent=self)))
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        html = _CDN_MATHJAX.sub(lambda _: local_mathjax_loader(), html, count=1)
        return _IMG_WITHOUT_ALT.sub(f'<img alt="{NO_ALT}"', html), resources
