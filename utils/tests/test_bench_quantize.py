"""notebook 11's int8 explanation follows the measured order, whichever it is."""
from utils.bench_quantize import int8_order, layer_times

ROWS = [{"tokens/s": 100.0, "speed / float32": 1.0}, {"tokens/s": 300.0, "speed / float32": 3.0},
        {"tokens/s": 200.0, "speed / float32": 2.0}]


def test_the_sentence_names_the_faster_int8_model():
    assert "the weight-only model was the faster" in int8_order(ROWS)
    w8a8_faster = [ROWS[0], ROWS[1], {"tokens/s": 400.0, "speed / float32": 4.0}]
    assert "W8A8 was the faster" in int8_order(w8a8_faster)


def test_one_layer_alone_is_quoted_and_a_disagreement_is_said():
    agree = {"width": 512, "float32": 70.0, "int8 weight-only": 90.0, "W8A8 (fbgemm)": 150.0}
    assert "the same order" in int8_order(ROWS, agree) and "cost W8A8 more" in int8_order(ROWS, agree)
    disagree = agree | {"W8A8 (fbgemm)": 50.0}
    said = int8_order(ROWS, disagree)
    assert "the other order" in said and "cost W8A8 more" not in said


def test_layer_times_times_the_three_layers():
    times = layer_times(64, repeats=3)
    assert times["width"] == 64 and all(times[k] > 0 for k in ("float32", "int8 weight-only", "W8A8 (fbgemm)"))
