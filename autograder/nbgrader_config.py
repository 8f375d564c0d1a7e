"""nbgrader settings of the course, read by `python -m autograder` (whatever the cwd) and by
the Validate button (`make lab` puts this folder on JUPYTER_CONFIG_PATH)."""
c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.CourseDirectory.course_id = "attention-course"
# CPU torch cells take seconds, not the 30 s nbgrader allows by default; a learner's infinite
# loop is interrupted after this long and only that exercise loses its points.
c.Execute.timeout = 120
# The python3 kernel of the environment that runs nbgrader: the course's own .venv.
c.Execute.kernel_name = "python3"
