"""Grading of the course: nbgrader configuration, the learner's `submit`, the instructor's
batch grading and release, and the checks that hidden tests call (autograder.checks).

Run `python -m autograder --help`; the Makefile wraps the common calls.
"""
