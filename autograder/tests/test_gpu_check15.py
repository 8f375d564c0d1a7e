"""gpu_check15 (notebook 15's kernels on a real GPU) keeps its own copies of grading's bf16
tolerances, since a GPU machine may lack what autograder.checks imports: they must stay equal."""
from autograder import gpu_check15
from autograder.checks.nb15 import triton_forward


def test_the_gpu_check_uses_grading_tolerances():
    assert (gpu_check15.BF16_TOL, gpu_check15.ACC_TOL) == (triton_forward.BF16_TOL, triton_forward.ACC_TOL)
