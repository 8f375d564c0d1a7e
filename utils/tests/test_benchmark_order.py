"""Timings that should grow with the size: found out of order, measured again, warned about."""
from utils.benchmark import order_warning, out_of_order, steady


def test_out_of_order_names_the_column_and_the_sizes():
    rows = [{"T": 1, "t": 1.0, "u": 1.0}, {"T": 2, "t": 5.0, "u": 2.0}, {"T": 4, "t": 1.0, "u": 4.0}]
    assert out_of_order(rows, "T", ["t", "u"]) == [("t", 2, 4, 0.2)]
    assert out_of_order(rows, "T", ["u"]) == []
    assert order_warning(rows, "T", ["u"]) is None
    warning = order_warning(rows, "T", ["t"])
    assert "t: T = 4 took 0.20x the time of T = 2" in warning and "quiet machine" in warning


def test_small_dips_and_missing_times_are_not_disorder():
    rows = [{"T": 1, "t": 1.0}, {"T": 2, "t": 0.9}, {"T": 4, "t": None}, {"T": 8, "t": 0.5}]
    assert out_of_order(rows, "T", ["t"]) == []


def test_steady_measures_again_only_where_out_of_order_and_keeps_the_smallest():
    calls = []
    disturbed = {2: [10.0]}  # T = 2 is slow once (the machine was busy), then 2.0 as it should be

    def measure(T):
        calls.append(T)
        t = disturbed[T].pop(0) if disturbed.get(T) else float(T)
        return {"T": T, "t": t, "MiB": 10 * T}

    rows = steady(measure, [1, 2, 4], "T", ["t"])
    assert calls == [1, 2, 4, 2, 4]  # both sizes of the pair out of order, once more
    assert [r["t"] for r in rows] == [1.0, 2.0, 4.0] and [r["MiB"] for r in rows] == [10, 20, 40]
    quiet = []
    steady(lambda T: quiet.append(T) or {"T": T, "t": float(T)}, [1, 2, 4], "T", ["t"])
    assert quiet == [1, 2, 4]
    stubborn = steady(lambda T: {"T": T, "t": 1.0 / T}, [1, 2, 4], "T", ["t"], retries=2)
    assert order_warning(stubborn, "T", ["t"]) is not None  # still out of order: said, not hidden
