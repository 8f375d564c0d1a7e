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
# Collect only submissions whose file the named learner owns (nbgrader merely warns): hub/exchange.py.
c.ExchangeFactory.collect = "hub.exchange.OwnerCheckedCollect"
# Each released feedback page readable by its learner (and the instructor) only: hub/exchange.py.
c.ExchangeFactory.release_feedback = "hub.exchange.PrivateFeedback"
# Grading kernels run the learners' code as a throwaway account, never as the instructor (who can read
# the hidden tests, every submission and the gradebook): autograder/sandbox.py, through sudo.
c.GradingExecute.run_as = os.environ["ATTENTION_GRADER"]
