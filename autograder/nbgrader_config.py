"""nbgrader settings of the course, read by `python -m autograder` (whatever the cwd) and by
the Validate button (`make lab` puts this folder on JUPYTER_CONFIG_PATH)."""
c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.CourseDirectory.course_id = "attention-course"
# Time limits of grading. A cell that runs longer than Execute.timeout is interrupted and
# scores 0 (CPU torch cells take seconds, not the 30 s nbgrader allows by default); once the
# whole notebook has run for GradingExecute.notebook_timeout (kernel start included), the cells
# left are not run and score 0. Every solution notebook runs in under 45 s on 2 cores, so
# 120 s leaves room for a busy machine, and one submission, whatever it does, is graded in
# about two minutes plus nbgrader's own few seconds.
c.Execute.timeout = 60
c.GradingExecute.notebook_timeout = 120
# Memory of each grading kernel, in MiB (RLIMIT_DATA, autograder/prestart.py): a notebook that asks
# for more fails that cell with a verdict naming the limit, and grade-all's other jobs go on.
# Notebooks 07, 12 and 14's solutions keep full marks when graded with 1536 MiB; `grade-all
# --memory-mb` (or AUTOGRADER_MEMORY_LIMIT_MB) overrides it.
c.GradingExecute.memory_limit_mb = 4096
# The python3 kernel of the environment that runs nbgrader: the course's own .venv.
c.Execute.kernel_name = "python3"
# nbgrader's autograde steps, with its Execute replaced by the course's (autograder/preprocessors.py):
# the notebook-wide limit above, a verdict when the kernel dies, and the checks reloaded from
# their files before every test cell, so a notebook that patches them gains nothing.
c.Autograde.autograde_preprocessors = [
    "autograder.preprocessors.GradingExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# The learner's HTML feedback: nbgrader's template, compiled once and not parsed twice (autograder/feedback.py).
c.GenerateFeedback.exporter_class = "autograder.feedback.FeedbackExporter"
