"""The reference kernels follow their inputs' device (utils.device_checks, python -m utils.device_report).

Where a GPU exists every kernel runs there and must equal its CPU result; without one, each kernel
runs on the CPU with every tensor that utils/ makes without device= landing on meta (where it
fails), and the kernels that read no values run on meta tensors, where a stray CPU tensor fails.
"""
import itertools

import pytest
import torch
from torch import nn

from utils import device_report, rope
from utils.device_checks import KERNELS, StrayOnMeta, check_kernel, check_w8a8
from utils.w8a8 import W8A8Linear

SLOW = {"mini_deepseek_mtp", "train_steps"}  # the trained model's four decoders; three training steps
ON_CPU = [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in KERNELS]
ON_META = [k for k, (_, _, meta, _) in KERNELS.items() if meta]


@pytest.mark.parametrize("name", ON_CPU)
def test_kernel_makes_every_tensor_on_its_inputs_device(name):
    status, _, note = check_kernel(name, "cpu")
    assert status == "ok", note


@pytest.mark.parametrize("name", ON_META)
def test_kernel_runs_on_meta_tensors(name):
    status, _, note = check_kernel(name, "meta")
    assert status == "ok", note


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_on_the_gpu_equals_the_cpu(name):
    status, gap, note = check_kernel(name, "cuda")
    assert status == "ok", f"{note} (largest difference {gap:.3g})"


def test_stray_tensors_from_utils_land_on_meta_and_torchs_own_do_not():
    with StrayOnMeta():
        assert rope.sinusoidal_positions(4, 8).device.type == "meta"  # device= not given: a stray
        assert rope.sinusoidal_positions(4, 8, device="cpu").device.type == "cpu"
        assert nn.Linear(2, 2).weight.device.type == "cpu"  # torch's code keeps its default


def test_the_check_fails_a_kernel_that_ignores_the_device(monkeypatch):
    monkeypatch.setitem(KERNELS, "stray", (lambda: (), lambda device: rope.sinusoidal_positions(7, 16), True, None))
    assert check_kernel("stray", "cpu")[0] == "FAIL"  # made on meta by StrayOnMeta
    assert check_kernel("stray", "meta")[0] == "FAIL"  # made on the CPU, not on meta
    runs = itertools.count()  # a different output at every run
    monkeypatch.setitem(KERNELS, "noise", (lambda: (), lambda device: torch.full((3,), next(runs), device=device), False, None))
    status, gap, note = check_kernel("noise", "cpu")
    assert status == "FAIL" and gap > 0 and "differs" in note


def test_w8a8_works_on_the_cpu_and_refuses_other_devices():
    assert check_w8a8("cpu")[0] == "ok" and check_w8a8("meta")[0] == "ok"
    layer = W8A8Linear.from_linear(nn.Linear(8, 4))
    with pytest.raises(ValueError, match="CPU-only"):
        layer(torch.ones(2, 8, device="meta"))


def test_report_prints_one_row_per_item_and_goes_on_after_an_error(monkeypatch, tmp_path, capsys):
    def broken(device, small, big):
        raise RuntimeError("planted")
    monkeypatch.setattr(device_report, "BENCHMARKS", {"nb10_moe_dispatch": device_report.BENCHMARKS["nb10_moe_dispatch"],
                                                      "broken": broken})
    log = tmp_path / "report.log"
    assert device_report.main(["--device", "cpu", "--small", "--only", "dot_product", "nb10", "broken", "--out", str(log)]) == 1
    rows = {line.split()[0]: line.split()[2] for line in capsys.readouterr().out.splitlines()[2:-1]}
    assert rows["nb10_moe_dispatch"] == "ok" and rows["broken"] == "ERROR"
    assert rows["dot_product_attention"] == "ok" and len(rows) == 3
    assert "RuntimeError: planted" in log.read_text()


@pytest.mark.slow
def test_report_runs_every_item_on_the_cpu(tmp_path):
    log = tmp_path / "report.log"
    assert device_report.main(["--device", "cpu", "--small", "--out", str(log)]) == 0, log.read_text()
    text = log.read_text()
    for name in [*KERNELS, *device_report.BENCHMARKS]:
        assert f"\n{name} " in text
