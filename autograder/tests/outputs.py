"""Compare the outputs of an executed notebook with the outputs stored in solutions/, the way
nbval does (the same sanitizing regexes and markers), so that the one execution of each solution
that grading needs also proves that its stored outputs are current.

Grading draws no figures (autograder/prestart.py sets the Agg backend), so figures and stderr
(progress bars, warnings) are left out here; `make nbval` compares those too.

Numbers are compared at the precision they are printed with: another processor's kernels (AVX2,
no vector instructions, ARM) or thread count round differently, and a decimal printed as 0.4419
here may be 0.4420 there. So a number written with a decimal point or an exponent may differ by
one unit of its last printed digit; everything else, integers included, must be as stored.
"""
import copy
import re
from collections import defaultdict

import nbformat
from nbval.plugin import (coalesce_streams, find_comment_markers, get_sanitize_patterns,
                          transform_streams_for_comparison)

from autograder.notebooks import ROOT

PATTERNS = get_sanitize_patterns((ROOT / "autograder" / "nbval_sanitize.cfg").read_text())
SKIP = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
        "application/vnd.jupyter.widget-view+json"}  # nbval's own list: widget ids are random


def _sanitize(value):
    if not isinstance(value, str):
        return value
    for regex, replace in PATTERNS:
        value = re.sub(regex, replace, value)
    return value


def _shown(output) -> bool:
    """Outputs that grading reproduces: not figures, not stderr."""
    if output.get("output_type") == "stream":
        return output.get("name") != "stderr"
    return not any(mime.startswith("image/") for mime in output.get("data", {}))


def _flat(outputs) -> dict:
    flat = defaultdict(list)
    kept = [o for o in coalesce_streams(copy.deepcopy(outputs)) if _shown(o)]
    for output in transform_streams_for_comparison(kept):
        for key, value in output.items():
            if key in SKIP:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime not in SKIP:
                        flat[mime].append(_sanitize(data))
            else:
                flat[key].append(_sanitize(value))
    return dict(flat)


NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _last_digit(token: str) -> float:
    """One unit of the last digit printed: 0.0001 for 0.4419, 1e-3 for 1.4e-02, 0 for an integer."""
    mantissa, _, exponent = token.lower().partition("e")
    if "." not in mantissa and not exponent:
        return 0.0
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def same_as_printed(a, b) -> bool:
    """Equal text, or equal but for decimals that differ by at most one unit of their last digit."""
    if a == b:
        return True
    if not (isinstance(a, str) and isinstance(b, str)) or NUMBER.split(a) != NUMBER.split(b):
        return False
    pairs = list(zip(NUMBER.findall(a), NUMBER.findall(b)))
    return all(x == y or abs(float(x) - float(y)) <= 1.000001 * max(_last_digit(x), _last_digit(y)) for x, y in pairs)


def _same(want: dict, got: dict) -> bool:
    return want.keys() == got.keys() and all(
        len(want[k]) == len(got[k]) and all(same_as_printed(a, b) for a, b in zip(want[k], got[k])) for k in want)


def differences(stored, executed) -> list[str]:
    """Cells whose executed outputs differ from the stored ones (nbval's rules); [] when all match."""
    stored, executed = (nbformat.read(p, as_version=4) if not hasattr(p, "cells") else p for p in (stored, executed))
    problems = []
    if len(stored.cells) != len(executed.cells):
        return [f"{len(stored.cells)} stored cells, {len(executed.cells)} executed"]
    for i, (a, b) in enumerate(zip(stored.cells, executed.cells)):
        if a.cell_type != "code":
            continue
        markers = dict(find_comment_markers(a.source))
        if markers.get("check") is False or markers.get("skip") or a.get("execution_count") is None:
            continue
        want, got = _flat(a.outputs), _flat(b.outputs)
        if not _same(want, got):
            keys = sorted(k for k in set(want) | set(got) if not _same({k: want.get(k, [])}, {k: got.get(k, [])}))
            problems.append(f"cell {i} ({a.source.strip().splitlines()[0][:50]!r}): outputs differ in {keys}")
    return problems
