"""Every solution notebook has a text source (solutions/NN_*.py, jupytext py:percent) that says
the same thing: same cells, same sources, same nbgrader metadata."""
from autograder import sources


def test_every_notebook_has_a_text_source_in_sync():
    stale = sources.out_of_sync()
    assert not stale, "out of sync (edit the .py, then `make sync`): " + "; ".join(f"{k}: {v}" for k, v in stale.items())


def test_a_changed_source_is_noticed(tmp_path, monkeypatch):
    stem = sources.stems()[0]
    for ext in ("py", "ipynb"):
        (tmp_path / f"{stem}.{ext}").write_bytes((sources.SOLUTIONS / f"{stem}.{ext}").read_bytes())
    monkeypatch.setattr(sources, "SOLUTIONS", tmp_path)
    assert sources.differences(stem) == ""
    py = tmp_path / f"{stem}.py"
    py.write_text(py.read_text().replace("### BEGIN SOLUTION", "### BEGIN SOLUTION\n    pass", 1))
    assert "differs from character" in sources.differences(stem)
    (tmp_path / f"{stem}.ipynb").unlink()
    assert "has no notebook" in sources.differences(stem)
