"""Every markdown cell of every solution notebook is bilingual, paragraph by paragraph.

The rule, exactly (README, Conventions):
- A cell is cut into blocks at blank lines; a fenced code block (``` ... ```) is one block.
- Fenced code, display math (a block that starts with `$$`), tables (starts with `|`), images
  (starts with `![`) and HTML comments (`<!-- rules: ... -->`, the markers of a Rules block) are exempt: they are skipped, they neither need nor give a translation.
- A heading (a block that starts with `#`) must carry both languages: a Latin letter and a
  Chinese character.
- Every other block (a paragraph or a list) is Chinese when, leaving out inline code (`...`) and
  inline math ($...$), its Chinese characters (CJK ideographs) number at least 15 % of its Latin letters; English
  otherwise (so an English paragraph may quote a Chinese title, and a Chinese one may name
  identifiers). Between two headings, these blocks must read English, Chinese, English,
  Chinese, ...: every English block is followed by its Chinese rendering before the next English
  block, and no Chinese block comes without the English one before it.
"""
import json
import re

import pytest

from autograder.notebooks import SOLUTIONS, course_notebooks

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
LATIN = re.compile(r"[A-Za-z]")
INLINE = re.compile(r"`[^`]*`|\$[^$]*\$")


def blocks(source: str) -> list[str]:
    """The cell's blocks, cut at blank lines outside fenced code."""
    out, current, fenced = [], [], False
    for line in source.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                out.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def kind(block: str) -> str:
    start = block.lstrip()
    if start.startswith(("```", "$$", "|", "![", "<!--")):
        return "exempt"
    if start.startswith("#"):
        return "heading"
    prose = INLINE.sub("", block)
    han = len(HAN.findall(prose))
    return "zh" if han and han >= 0.15 * len(LATIN.findall(prose)) else "en"


def problems(source: str) -> list[str]:
    """What breaks the rule in one markdown cell (empty when it is bilingual)."""
    found, expecting = [], "en"
    for block in blocks(source):
        what, first = kind(block), block.strip().splitlines()[0][:60]
        if what == "exempt":
            continue
        if what == "heading":
            if not (HAN.search(block) and LATIN.search(block)):
                found.append(f"heading without both languages: {first!r}")
            if expecting == "zh":
                found.append("an English paragraph before this heading has no Chinese rendering")
            expecting = "en"
        elif what != expecting:
            found.append(f"{'two English blocks in a row' if what == 'en' else 'a Chinese block without its English one'}"
                         f" at {first!r}")
            expecting = "zh" if what == "en" else "en"
        else:
            expecting = "zh" if what == "en" else "en"
    if expecting == "zh":
        found.append("the last English block has no Chinese rendering")
    return found


def markdown_cells(stem):
    nb = json.loads((SOLUTIONS / f"{stem}.ipynb").read_text(encoding="utf-8"))
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            yield index, "".join(cell["source"])


@pytest.mark.parametrize("stem", course_notebooks())
def test_markdown_alternates_english_and_chinese(stem):
    bad = [f"cell {i}: {p}" for i, source in markdown_cells(stem) for p in problems(source)]
    assert not bad, f"{stem}: markdown must alternate English and Chinese paragraphs:\n" + "\n".join(bad)


def test_the_rule_itself():
    assert problems("# Title · 标题\n\nOne.\n\n一。\n\nTwo.\n\n二。") == []
    assert problems("## A · 甲\n\nOne.\n\n$$x$$\n\n一。\n\n- a\n- b\n\n- 甲\n- 乙") == []
    assert problems("```\nno translation\n```") == []
    assert problems("One.\n\nTwo.\n\n一。\n\n二。")  # all English, then all Chinese
    assert problems("# English only\n\nOne.\n\n一。")
    assert problems("One.")
    assert problems("一。")
    assert problems("Sources: A. Vaswani et al., Attention Is All You Need (2017), section 3.2.1; the illustrated "
                    "e-book 《看图学大模型》 and its interview question on the variance.\n\n来源：电子书《看图学大模型》。") == []
    assert problems("One.\n\n用 `torch.nn.functional.scaled_dot_product_attention` 计算。") == []
