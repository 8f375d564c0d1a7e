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
# What the formgrader shows of a submission (markdown and outputs the learner wrote) is sanitized: no
# script runs in the instructor's browser, where it would act as the instructor. nbgrader's formgrade
# template renders markdown without nbconvert's sanitize_html, so the notebook itself is cleaned first
# (nbconvert's SanitizeHTML, bleach: raw HTML escaped, JavaScript outputs dropped); feedback pages too.
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.preprocessors = ["nbconvert.preprocessors.sanitize.SanitizeHTML"]
# Grading kernels run the learners' code as a throwaway account, never as the instructor (who can read
# the hidden tests, every submission and the gradebook): autograder/sandbox.py, through sudo.
c.GradingExecute.run_as = os.environ["ATTENTION_GRADER"]
