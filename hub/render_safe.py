"""A learner's notebook rendered for someone else's browser (the instructor's formgrader, the feedback
page), so that nothing in it runs there. Four layers, each enough against what the review found
(hub-probe-2.md, W1 and N8), none trusting nbconvert's templates to quote or escape:

1. `AllowList` (first preprocessor): the notebook reduced to what a page needs. Notebook metadata:
   the kernel's and language's names. A cell: its type, source, id, execution count, nbgrader's
   metadata (typed, its grade id a plain name: nbgrader's formgrade template writes it unescaped)
   and image attachments. An output: text, HTML and markdown (cleaned next), LaTeX, PNG and JPEG
   (base64 only), and of its metadata only a numeric width and height, `unconfined` and
   `needs_background` (nbconvert writes `width=` without quotes: a string there was an attribute).
2. nbconvert's `SanitizeHTML` (raw HTML in markdown and outputs escaped; JavaScript dropped), and
   `markdown2html` here cleaning the markdown *as rendered*, with a URL allow-list: bleach saw the
   source, where `[x](javascript:...)` is text, not a link.
3. `Boundary` (last preprocessor): two raw cells holding a random token around the notebook, so
   that `seal` can tell the template's scripts (given the page's nonce) from anything of the
   learner's (given nothing).
4. `seal`: a Content-Security-Policy without 'unsafe-inline' (POLICY): an inline script, an event
   handler or a `javascript:` URL that slipped through every layer above still does not run (only
   scripts of the server's own and the template's, which carry the page's nonce, do). The
   formgrader's handlers send it as a header (hub/formgrader_guard.py); the feedback page carries
   it in a <meta> tag, wherever it is opened.
"""
import base64
import binascii
import re
import secrets

import bleach
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode

from autograder.feedback import _CDN_MATHJAX as CDN_MATHJAX, MATHJAX_CONFIG, FeedbackExporter

NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,200}$")
LABEL = re.compile(r"^[\w .+()-]{1,100}$")  # a kernel's display name: "Python 3 (ipykernel)"
CELL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]*$")
TEXTS = ("text/plain", "text/html", "text/markdown", "text/latex")
IMAGES = ("image/png", "image/jpeg")
ATTACHMENTS = ("image/png", "image/jpeg", "image/gif")
EMPTY_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")
NBGRADER = {"grade": bool, "solution": bool, "locked": bool, "task": bool, "points": float,
            "schema_version": int, "cell_type": str, "checksum": str, "grade_id": str}
# 'unsafe-eval': MathJax 2 (the formulas, served by the Jupyter server: jupyter-server-mathjax) evaluates
# code at its start and for its configuration; it lets a script that already runs evaluate a string, and
# nothing more: no inline script, no event handler attribute, no javascript: URL runs without the nonce.
POLICY = ("default-src 'none'; script-src 'self'{nonce} 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; form-action 'self'; "
          "base-uri 'none'; object-src 'none'; frame-ancestors 'self'")


def policy(nonce: str | None) -> str:
    """POLICY with the page's nonce, or with none (then no inline script runs at all)."""
    return POLICY.format(nonce=f" 'nonce-{nonce}'" if nonce else "")


def _text(value, default=""):
    if isinstance(value, list):
        value = "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else default


def _size(value):
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 < number <= 10_000 else None


def _base64(value) -> str | None:
    text = _text(value)
    if not BASE64.match(text):
        return None
    try:
        base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return text


def _nbgrader(meta) -> dict | None:
    if not isinstance(meta, dict):
        return None
    kept = {}
    for key, kind in NBGRADER.items():
        if key in meta:
            try:
                kept[key] = kind(meta[key]) if kind is not str else _text(meta[key])
            except (TypeError, ValueError):
                return None
    if "grade_id" in kept and not NAME.match(kept["grade_id"]):
        return None
    return kept


def _output(out) -> NotebookNode | None:
    kind = out.get("output_type")
    if kind == "stream":
        return NotebookNode(output_type="stream", name="stderr" if out.get("name") == "stderr" else "stdout",
                            text=_text(out.get("text")))
    if kind == "error":
        return NotebookNode(output_type="error", ename=_text(out.get("ename")), evalue=_text(out.get("evalue")),
                            traceback=[_text(t) for t in out.get("traceback", []) if isinstance(t, str)])
    if kind not in ("display_data", "execute_result"):
        return None
    data, metadata = {}, {}
    for mime, value in (out.get("data") or {}).items():
        if mime in TEXTS:
            data[mime] = _text(value)
        elif mime in IMAGES and _base64(value) is not None:
            data[mime] = _text(value)
            given = (out.get("metadata") or {}).get(mime)
            given = given if isinstance(given, dict) else {}
            kept = {k: _size(given.get(k)) for k in ("width", "height") if _size(given.get(k))}
            if given.get("unconfined") is True:
                kept["unconfined"] = True
            metadata[mime] = kept
    needs = (out.get("metadata") or {}).get("needs_background")
    if needs in ("light", "dark"):
        metadata["needs_background"] = needs
    if not data:
        return None
    kept = NotebookNode(output_type=kind, data=data, metadata=metadata)
    if kind == "execute_result":
        kept.execution_count = out.get("execution_count") if isinstance(out.get("execution_count"), int) else None
    return kept


def _cell(cell) -> NotebookNode | None:
    kind = cell.get("cell_type")
    if kind not in ("markdown", "code", "raw"):
        return None
    kept = NotebookNode(cell_type=kind, source=_text(cell.get("source")), metadata=NotebookNode())
    if isinstance(cell.get("id"), str) and CELL_ID.match(cell["id"]):
        kept.id = cell["id"]
    nbgrader = _nbgrader((cell.get("metadata") or {}).get("nbgrader"))
    if nbgrader is not None:
        kept.metadata.nbgrader = NotebookNode(nbgrader)
    if kind == "code":
        count = cell.get("execution_count")
        kept.execution_count = count if isinstance(count, int) else None
        kept.outputs = [o for o in map(_output, cell.get("outputs") or []) if o is not None]
    elif kind == "markdown":
        attachments = {}
        for name, bundle in (cell.get("attachments") if isinstance(cell.get("attachments"), dict) else {}).items():
            images = {m: _text(v) for m, v in (bundle or {}).items() if m in ATTACHMENTS and _base64(v) is not None}
            if images and NAME.match(name):
                attachments[name] = images
        # A reference to an attachment that is not kept (or never was) would stop nbconvert for the whole
        # page: it shows an empty image instead.
        for name in re.findall(r"attachment:([^\s)\"'<>]+)", kept.source):
            attachments.setdefault(name, {"image/png": EMPTY_PNG})
        if attachments:
            kept.attachments = NotebookNode(attachments)
    return kept


class AllowList(Preprocessor):
    """What survives of a learner's notebook before any template sees it (layer 1 above)."""

    def preprocess(self, nb, resources):
        meta = nb.get("metadata") or {}
        kept = NotebookNode()
        for key in ("kernelspec", "language_info"):
            names = {k: v for k, v in (meta.get(key) or {}).items()
                     if k in ("name", "display_name", "language", "pygments_lexer", "file_extension", "version")
                     and isinstance(v, str) and LABEL.match(v)}
            if names:
                kept[key] = NotebookNode(names)
        nb.metadata = kept
        nb.cells = [c for c in map(_cell, nb.get("cells") or []) if c is not None]
        return nb, resources


class Boundary(Preprocessor):
    """Two raw cells that mark where the notebook begins and ends in the page (layer 3)."""

    def preprocess(self, nb, resources):
        token = f"attention-boundary-{secrets.token_hex(16)}"
        resources["boundary"] = token
        begin, end = (NotebookNode(cell_type="raw", id=f"attention-boundary-{where}", source=token,
                                   metadata=NotebookNode(raw_mimetype="text/html")) for where in ("begin", "end"))
        nb.cells = [begin, *nb.cells, end]
        return nb, resources


def _allowed(tag, name, value):
    """bleach's attribute filter for rendered markdown: links to the web, mail or this server only;
    images from the same, or inline PNG, JPEG, GIF."""
    if name in ("class", "id", "title", "alt", "align", "colspan", "rowspan", "start", "width", "height"):
        return True
    scheme = re.match(r"^\s*([A-Za-z][A-Za-z0-9+.-]*):", value)
    if tag == "a" and name == "href":
        return not scheme or scheme[1].lower() in ("http", "https", "mailto")
    if tag == "img" and name == "src":
        return not scheme or scheme[1].lower() in ("http", "https") or bool(
            re.match(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=]*$", value.strip(), re.I))
    return False


MARKDOWN_TAGS = [*bleach.ALLOWED_TAGS, "p", "div", "span", "pre", "code", "img", "br", "hr", "del", "s", "sup", "sub",
                 "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "dl", "dt", "dd"]


def clean_rendered(html: str) -> str:
    """Rendered markdown, with only MARKDOWN_TAGS and the attributes `_allowed` keeps (layer 2)."""
    return bleach.clean(html, tags=MARKDOWN_TAGS, attributes=_allowed, protocols=["http", "https", "mailto", "data"],
                        strip=True, strip_comments=True)


def seal(html: str, boundary: str | None) -> tuple[str, str | None]:
    """The page with the template's scripts given a fresh nonce; (html, nonce). Without the two
    boundaries in order, no script gets one: the page then shows, without any script (layer 4)."""
    parts = html.split(boundary) if boundary else []
    if len(parts) != 3:
        return html.replace(boundary or "\0", ""), None
    nonce = secrets.token_urlsafe(18)
    before, notebook, after = parts
    # nbgrader's formgrade template: two inline handlers (show or hide the learner's name) become listeners.
    handlers = {'onclick="toggle_name(true);"': "attention-show-name", 'onclick="toggle_name(false);"': "attention-hide-name"}
    for attribute, marker in handlers.items():
        before = before.replace(attribute, f'data-{marker}=""')
    listeners = (f'<script nonce="{nonce}">document.addEventListener("DOMContentLoaded", function () {{'
                 + "".join(f'document.querySelectorAll("[data-{m}]").forEach(function (e) {{ e.addEventListener("click", '
                           f'function () {{ toggle_name({"true" if "true" in a else "false"}); }}); }});'
                           for a, m in handlers.items())
                 + "});</script>")
    nonced = [re.sub(r"<script(?=[\s>])", f'<script nonce="{nonce}"', part) for part in (before, after)]
    before = nonced[0].replace("</head>", listeners + "</head>", 1)
    return before + notebook + nonced[1], nonce


class Safe:
    """The layers above on an HTML exporter: markdown cleaned as rendered, the page sealed."""
    meta_policy = False  # a <meta> CSP in the page itself (feedback, a file): the formgrader sends a header

    @pass_context
    def markdown2html(self, context, source):
        return clean_rendered(super().markdown2html(context, source))

    def from_notebook_node(self, nb, resources=None, **kw):
        html, resources = super().from_notebook_node(nb, resources, **kw)
        html, nonce = seal(self.local_scripts(html, resources), resources.get("boundary"))
        resources["csp_nonce"] = nonce
        if self.meta_policy:
            meta_policy = policy(nonce).replace("; frame-ancestors 'self'", "")  # a <meta> policy cannot say it
            meta = f'<meta http-equiv="Content-Security-Policy" content="{meta_policy}">'
            html = re.sub(r"<head>", "<head>\n" + meta, html, count=1)
        return html, resources

    def local_scripts(self, html, resources):
        """Scripts of the page's that load from elsewhere, replaced by the server's own (see below)."""
        return html


class SafeFormgradeExporter(Safe, HTMLExporter):
    def local_scripts(self, html, resources):
        # MathJax from the instructor's own server (jupyter-server-mathjax), not a CDN the policy refuses.
        local = f"{resources.get('base_url', '')}/static/jupyter_server_mathjax/MathJax.js?config={MATHJAX_CONFIG}"
        return CDN_MATHJAX.sub(lambda _: f'<script src="{local}"></script>', html, count=1)


class SafeFeedbackExporter(Safe, FeedbackExporter):
    meta_policy = True
