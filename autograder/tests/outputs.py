"""Compare the outputs of an executed notebook with the outputs stored in solutions/, the way
nbval does (the same sanitizing regexes and markers), so that the one execution of each solution
that grading needs also proves that its stored outputs are current.

Grading draws no figures (autograder/prestart.py sets the Agg backend), so figures and stderr
(progress bars, warnings) are left out here; `make nbval` compares those too.
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
        if want != got:
            keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            problems.append(f"cell {i} ({a.source.strip().splitlines()[0][:50]!r}): outputs differ in {keys}")
    return problems
