"""Preloaded by the formgrader's forkserver (hub/formgrader_guard.py) after hub.pipeline: the
formgrader's exporter made and used once, so that each page's child starts with it ready."""
from hub import pipeline

pipeline.install()
pipeline.warm()
