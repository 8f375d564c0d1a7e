"""One step of the instructor's pipeline on one learner's submission, in a process of its own (the
formgrader asks for it: hub/formgrader_guard.py). nbgrader's formgrader runs collect, autograde,
feedback and the page of a submission inside the instructor's Jupyter server: one submission could
then hold the server's event loop (20 000 files: ~12 minutes per step, review N5), and use the
memory, disk and processes of an account that has no limits (it starts the grading kernels). Here
each step is a child process that:

- is forked from a server of its own that imported nbgrader and nbconvert once (multiprocessing's
  forkserver, with this module preloaded): a fresh process per step and learner, started in
  milliseconds rather than the seconds of importing nbgrader again;
- joins the class's grading cgroup (hub/limits.py: memory, CPU, processes, shared with the
  grading kernels), takes rlimits (file size, no core) and a session of its own, so that its cost
  is the class's and bounded, and the formgrader can end it, with all it started, after a time limit;
- does one thing for one learner (or collect, which refuses each bad submission on its own:
  hub/exchange.py), and answers as nbgrader's API does (success, log, error);
- lists folders once per folder, not once per file (nbgrader's `is_ignored`, quadratic: UPSTREAM.md).

By hand, for one step: python -m hub.pipeline collect ASSIGNMENT | autograde|feedback|release
ASSIGNMENT LEARNER | render NOTEBOOK_FILE RESOURCES_JSON (it prints the answer as JSON).
"""
import fnmatch
import json
import os
import resource
import sys
import traceback

FILE_MB = 256  # the largest file a step writes (a rendered page, a copied notebook)


def confine() -> None:
    """The grading cgroup (named by the instructor's environment: hub/jupyterhub_config.py) and rlimits."""
    for procs in filter(None, os.environ.get("ATTENTION_GRADING_CGROUPS", "").split(":")):
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    for which, value in ((resource.RLIMIT_FSIZE, FILE_MB << 20), (resource.RLIMIT_CORE, 0)):
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def is_ignored(filename: str, ignore_globs=None) -> bool:
    """nbgrader.utils.is_ignored without listing the folder: the name matched against each pattern as
    glob would (a leading dot matched only by a pattern that has one)."""
    name = os.path.basename(filename)
    return any(fnmatch.fnmatchcase(name, pattern) and (pattern.startswith(".") or not name.startswith("."))
               for pattern in ignore_globs or ())


def install() -> None:
    """The linear is_ignored in nbgrader (find_all_files looks it up there at each call)."""
    nbgrader.utils.is_ignored = is_ignored


def api():
    app = NbGrader()
    app.load_config_file()  # the instructor's role folder (JUPYTER_CONFIG_PATH), as the formgrader loads it
    return NbGraderAPI(config=app.config)


_exporter = None


def exporter():
    """The formgrader's exporter, made once per process (in the forkserver by warm(): each child
    starts with nbgrader's templates compiled and nbconvert's filters loaded)."""
    global _exporter
    if _exporter is None:
        app = NbGrader()
        app.load_config_file()
        config = Config(app.config)
        config.HTMLExporter.template_name = "formgrade"
        config.HTMLExporter.extra_template_basedirs = [formgrader_handlers.template_path]
        _exporter = SafeFormgradeExporter(config=config)
    return _exporter


def render(notebook: str, resources: dict) -> dict:
    """The formgrader's page of a submission, sealed (hub/render_safe.py): html and its script nonce."""
    html, resources = exporter().from_notebook_node(nbformat.read(notebook, as_version=4), resources=resources)
    return {"success": True, "html": html, "nonce": resources.get("csp_nonce")}


def warm() -> None:
    """A page rendered once, of a notebook of two cells: what every later page needs is loaded."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("*a* $x$"), nbformat.v4.new_code_cell(
        "print(1)", outputs=[nbformat.v4.new_output("stream", text="1")])])
    nb.metadata.language_info = {"name": "python", "pygments_lexer": "ipython3"}
    resources = {"base_url": "", "assignment_id": "a", "notebook_id": "n", "submission_id": "s", "index": 0,
                 "total": 1, "student": "s", "last_name": None, "first_name": None, "notebook_path": "n.ipynb"}
    try:
        exporter().from_notebook_node(nb, resources=resources)
    except Exception:  # only a head start: each page is rendered, and reports its own failure, anyway
        pass


def run(step: str, args) -> dict:
    """One step; its answer, a failure included (reported to the formgrader as nbgrader's API reports one)."""
    try:
        if step == "render":
            return render(args[0], args[1])
        if step == "collect":
            return api().collect(args[0])
        if step == "autograde":
            return api().autograde(args[0], args[1])
        if step == "feedback":
            return api().generate_feedback(args[0], args[1])
        if step == "release":
            return api().release_feedback(args[0], args[1])
        return {"success": False, "error": f"hub.pipeline: no step {step!r}"}
    except Exception as e:
        return {"success": False, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"}


def child(answer, step: str, args) -> None:
    """What the forkserver's child runs: confined, in a session of its own; the answer sent back."""
    os.setsid()
    confine()
    install()
    answer.send(run(step, args))
    answer.close()


def main(argv: list[str]) -> int:
    confine()
    install()
    step, *rest = argv
    if step == "render" and len(rest) == 2:
        rest[1] = json.loads(rest[1])
    print(json.dumps(run(step, rest)))
    return 0


# Imported once by the forkserver (and by the formgrader's server, which has them already): each step's
# child starts with nbgrader, nbconvert and the exchange ready.
import nbformat  # noqa: E402
import nbgrader.utils  # noqa: E402
from nbgrader.apps.api import NbGraderAPI  # noqa: E402
from nbgrader.apps.baseapp import NbGrader  # noqa: E402
from nbgrader.server_extensions.formgrader import handlers as formgrader_handlers  # noqa: E402
from traitlets.config import Config  # noqa: E402

import hub.exchange  # noqa: E402,F401
from hub.render_safe import SafeFormgradeExporter  # noqa: E402


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
