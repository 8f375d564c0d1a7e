"""demo_device: a notebook's demonstrations on the GPU when present, never while grading."""
import torch

from utils.benchmark import demo_device


def test_gpu_when_present_and_not_grading(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert demo_device() == "cuda"


def test_cpu_while_grading_even_with_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert demo_device() == "cpu"


def test_cpu_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert demo_device() == "cpu"
