"""The stored-output comparison (outputs.py) reads numbers at the precision they are printed with."""
import pytest

from autograder.tests.outputs import same_as_printed


@pytest.mark.parametrize("stored, executed", [
    ("weights tensor([0.4419, 0.6515])", "weights tensor([0.4420, 0.6514])"),  # last digit, either way
    ("error 1.4e-02", "error 1.5e-02"),
    ("loss 3.1436 at step 191", "loss 3.1435 at step 191"),
    ("-0.0000", "0.0000"),
])
def test_a_last_digit_moved_by_rounding_is_the_same_output(stored, executed):
    assert same_as_printed(stored, executed)


@pytest.mark.parametrize("stored, executed", [
    ("weights tensor([0.4419, 0.6515])", "weights tensor([0.4421, 0.6515])"),  # two units
    ("148 of 256 positions", "149 of 256 positions"),                           # integers are exact
    ("error 1.4e-02", "error 1.4e-03"),
    ("speed-up 1.43x", "slow-down 1.43x"),                                      # the words count
    ("[0.1, 0.2]", "[0.1, 0.2, 0.3]"),
])
def test_anything_more_is_a_different_output(stored, executed):
    assert not same_as_printed(stored, executed)
