"""The feedback's highlighted code comes from build/highlight/ for every cell that is not an
answer (autograder/feedback.py), and is the HTML that Pygments gives, byte for byte."""
from nbconvert.filters.highlight import Highlight2HTML

from autograder import feedback

CELL = "scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, T, T)\n%timeit scores.softmax(-1)"


def kept(folder) -> list:
    return sorted((folder / "highlight").rglob("*.html"))


def test_a_cell_is_highlighted_once_and_served_as_pygments_gives_it(tmp_path, monkeypatch):
    monkeypatch.setattr(feedback, "CACHE", tmp_path)
    cached, plain = feedback.CachedHighlight(pygments_lexer="ipython3"), Highlight2HTML(pygments_lexer="ipython3")
    first = cached(CELL, metadata={"nbgrader": {"locked": True}})
    assert first == plain(CELL, metadata={}) and len(kept(tmp_path)) == 1
    entry = kept(tmp_path)[0]
    entry.write_text("served from the cache", encoding="utf-8")  # what is kept is what is served
    assert cached(CELL, metadata={}) == "served from the cache"
    assert cached(CELL, language="python", metadata={}) == plain(CELL, language="python")  # another lexer, another entry
    assert len(kept(tmp_path)) == 2


def test_answers_are_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(feedback, "CACHE", tmp_path)
    answer = {"nbgrader": {"solution": True, "grade_id": "attention"}}
    assert feedback.CachedHighlight(pygments_lexer="ipython3")(CELL, metadata=answer) == Highlight2HTML(
        pygments_lexer="ipython3")(CELL, metadata=answer)
    assert kept(tmp_path) == []


def test_a_folder_it_cannot_write_costs_only_the_highlighting(tmp_path, monkeypatch):
    (tmp_path / "highlight").write_text("a file where the folder would be")  # unwritable even for root
    monkeypatch.setattr(feedback, "CACHE", tmp_path)
    assert feedback.CachedHighlight(pygments_lexer="ipython3")(CELL, metadata={}) == Highlight2HTML(
        pygments_lexer="ipython3")(CELL, metadata={})
