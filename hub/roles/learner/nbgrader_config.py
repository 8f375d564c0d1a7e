"""nbgrader settings of a learner's server on the course's JupyterHub (hub/course_hub.py puts this
folder on the learner's JUPYTER_CONFIG_PATH): the course's own settings (Validate runs with its time
limits), the course id and the exchange. The instructor's tools are off (labconfig/page_config.json,
jupyter_server_config.json): a learner sees the assignment list, Validate and their feedback."""
import os
from pathlib import Path

c = get_config()  # noqa: F821
load_subconfig(str(Path(os.environ["ATTENTION_REPO"]) / "autograder" / "nbgrader_config.py"))  # noqa: F821
c.CourseDirectory.course_id = "attention-course"
c.Exchange.root = os.environ["ATTENTION_EXCHANGE"]
# Submissions readable by the instructor's group only, not by every account; the exchange's root is
# the administrator's (hub/exchange.py). Nothing here is a protection: a learner can change their own
# configuration; what holds is the folders' permissions and what the instructor's collect checks.
c.ExchangeFactory.submit = "hub.exchange.PrivateSubmit"
c.ExchangeFactory.fetch_assignment = "hub.exchange.Fetch"
c.ExchangeFactory.fetch_feedback = "hub.exchange.FetchFeedback"
c.ExchangeFactory.list = "hub.exchange.List"
