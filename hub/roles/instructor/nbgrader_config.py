"""nbgrader settings of the instructor's server on the course's JupyterHub (hub/course_hub.py puts
this folder on the instructor's JUPYTER_CONFIG_PATH): the course's settings and grader
(autograder/nbgrader_config.py: time limits, dead-kernel verdicts, the guard, the memory limit),
the course folder in the instructor's home, the exchange and the gradebook in PostgreSQL."""
import os
from pathlib import Path

c = get_config()  # noqa: F821
load_subconfig(str(Path(os.environ["ATTENTION_REPO"]) / "autograder" / "nbgrader_config.py"))  # noqa: F821
c.CourseDirectory.root = os.environ["ATTENTION_COURSE_ROOT"]
c.CourseDirectory.db_url = os.environ["ATTENTION_GRADEBOOK"]
c.Exchange.root = os.environ["ATTENTION_EXCHANGE"]
# The hardened folder exchange (hub/exchange.py): the root is the administrator's; collect copies only
# the named learner's own files and folders, follows no link and takes the time from the file system;
# each released feedback page is readable by its learner (and the instructor) only.
c.ExchangeFactory.release_assignment = "hub.exchange.Release"
c.ExchangeFactory.collect = "hub.exchange.SafeCollect"
c.ExchangeFactory.release_feedback = "hub.exchange.PrivateFeedback"
c.ExchangeFactory.list = "hub.exchange.List"
# What the formgrader and the feedback pages show of a submission runs no script (hub/render_safe.py):
# the notebook reduced to an allow-list first (no output metadata but a numeric width and height, no
# cell metadata but nbgrader's), then cleaned (nbconvert's SanitizeHTML: raw HTML escaped, JavaScript
# dropped; the markdown cleaned again as rendered, links to the web only), then marked so that only
# the template's scripts get the page's nonce under a Content-Security-Policy. The formgrader's page
# of a submission is rendered by hub/pipeline.py (hub/formgrader_guard.py); feedback by this exporter.
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.preprocessors = ["hub.render_safe.AllowList", "nbconvert.preprocessors.sanitize.SanitizeHTML",
                                "hub.render_safe.Boundary"]
c.GenerateFeedback.exporter_class = "hub.render_safe.SafeFeedbackExporter"
# Collect's bounds on one submission (hub/safe_copy.py): over any, it is refused with a note.
c.SafeCollect.max_entries = 200
c.SafeCollect.max_depth = 4
c.SafeCollect.max_bytes = 50_000_000
# Grading kernels run the learners' code as a throwaway account, never as the instructor (who can read
# the hidden tests, every submission and the gradebook): autograder/sandbox.py, through sudo.
c.GradingExecute.run_as = os.environ["ATTENTION_GRADER"]
