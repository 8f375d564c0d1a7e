"""An nbgrader course directory driven from Python, with the course's config.

nbgrader reads `nbgrader_config.py` from the current directory and silently makes an empty
gradebook elsewhere; here the config is loaded from this folder explicitly and the course
root is set, so grading behaves the same from any working directory.
"""
import hashlib
import os
import shutil
import sys
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder.notebooks import ROOT, SOLUTIONS

CONFIG = Path(__file__).resolve().parent / "nbgrader_config.py"
CACHE = ROOT / "build"
GENERATED = CACHE / "generated"


def generated_key(stem: str) -> str:
    """`stem-<hash>` of what generate_assignment's output depends on."""
    import nbgrader

    digest = hashlib.sha256(nbgrader.__version__.encode())
    for path in (SOLUTIONS / f"{stem}.ipynb", CONFIG):
        digest.update(path.read_bytes())
    return f"{stem}-{digest.hexdigest()[:20]}"


class GradingError(Exception):
    """nbgrader itself failed; the message carries the end of its log."""


def load_config(root: Path, timeout: int | None = None) -> Config:
    config = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    config.CourseDirectory.root = str(root)
    if timeout is not None:
        config.Execute.timeout = timeout
    return config


def empty_gradebook() -> Path:
    """An empty gradebook, made once per nbgrader version and copied into each workspace.

    A new gradebook asks the `alembic` program for its schema version, which takes seconds;
    a learner's submit should not pay that every time.
    """
    import nbgrader
    from nbgrader.api import Gradebook

    template = CACHE / f"gradebook-empty-nbgrader-{nbgrader.__version__}.db"
    if not template.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = template.with_suffix(f".{os.getpid()}.tmp")
        Gradebook(f"sqlite:///{partial}").close()
        partial.replace(template)  # atomic, so parallel first runs never see half a file
    return template


class Workspace:
    """source/, submitted/, autograded/, feedback/ and gradebook.db under `root`."""

    def __init__(self, root, timeout: int | None = None):
        from nbgrader.apps.api import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        # nbgrader runs `alembic` as a program: it must be found next to this Python.
        bin_dir = str(Path(sys.executable).parent)
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        config = load_config(self.root, timeout)
        self.api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        self.db_url = f"sqlite:///{self.root / 'gradebook.db'}"
        # A workspace whose gradebook starts empty may take generate_assignment's output from the cache.
        self.fresh = not (self.root / "gradebook.db").exists()
        if self.fresh:
            shutil.copyfile(empty_gradebook(), self.root / "gradebook.db")

    def path(self, step: str, stem: str, student: str | None = None) -> Path:
        parts = [step] + ([student] if student else []) + [stem, f"{stem}.ipynb"]
        return self.root.joinpath(*parts)

    def _run(self, what: str, result: dict):
        if not result.get("success"):
            log = (result.get("error") or "") + (result.get("log") or "")
            raise GradingError(f"nbgrader {what} failed: " + log.strip()[-2000:])

    def generate(self, stem: str):
        """Put the instructor notebook in source/ and let nbgrader make the release version.

        What nbgrader generates (source/, release/ and the gradebook's record of the assignment:
        cells, points, checksums of the locked cells) depends only on the solution notebook, this
        course's config and nbgrader's version, so it is kept in build/generated/ under their hash
        and copied into a fresh workspace instead of being generated again (seconds per submit).
        """
        key = generated_key(stem)
        cached = GENERATED / key
        if self.fresh and (cached / "gradebook.db").exists():
            try:
                for step in ("source", "release"):
                    shutil.copytree(cached / step, self.root / step / stem, dirs_exist_ok=True)
                shutil.copyfile(cached / "gradebook.db", self.root / "gradebook.db")
                self.fresh = False
                return self.path("release", stem)
            except OSError:  # removed meanwhile by a grader of a newer version: generate instead
                shutil.copyfile(empty_gradebook(), self.root / "gradebook.db")
        source = self.path("source", stem)
        source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOLUTIONS / f"{stem}.ipynb", source)
        self._run(f"generate_assignment {stem}", self.api.generate_assignment(stem, force=True))
        if self.fresh:
            self.fresh = False
            self._keep_generated(stem, key)
        return self.path("release", stem)

    def _keep_generated(self, stem: str, key: str):
        partial = GENERATED / f".{key}.{os.getpid()}.tmp"
        shutil.rmtree(partial, ignore_errors=True)
        for step in ("source", "release"):
            shutil.copytree(self.root / step / stem, partial / step)
        shutil.copyfile(self.root / "gradebook.db", partial / "gradebook.db")
        try:
            partial.rename(GENERATED / key)  # atomic: a parallel grader sees all of it or nothing
        except OSError:  # another grader stored the same key first
            shutil.rmtree(partial, ignore_errors=True)
        for old in GENERATED.glob(f"{stem}-*"):  # outputs of earlier versions of this notebook
            if old.name != key:
                shutil.rmtree(old, ignore_errors=True)

    def submit(self, stem: str, student: str, notebook: Path):
        target = self.path("submitted", stem, student)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, target)

    def autograde(self, stem: str, student: str):
        self._run(f"autograde {stem} for {student}", self.api.autograde(stem, student, force=True))
        self._run(f"generate_feedback {stem} for {student}",
                  self.api.generate_feedback(stem, student, force=True))
        return self.path("autograded", stem, student), self.root / "feedback" / student / stem / f"{stem}.html"

    def grades(self, stem: str, student: str) -> dict[str, tuple[float, float]]:
        """grade_id -> (score, max_score) of one graded notebook, from the gradebook."""
        from nbgrader.api import Gradebook

        with Gradebook(self.db_url) as gb:
            notebook = gb.find_submission_notebook(stem, stem, student)
            return {g.name: (float(g.score or 0.0), float(g.max_score)) for g in notebook.grades}
