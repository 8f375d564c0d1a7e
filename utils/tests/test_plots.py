import matplotlib

matplotlib.use("Agg")  # this test only; notebooks keep their inline backend

import pytest
import torch

from utils.plots import attention_heatmap


def test_heatmap_labels_and_values():
    weights = torch.softmax(torch.arange(9.0).reshape(3, 3), dim=-1)
    ax = attention_heatmap(weights, ["a", "b", "c"], ["x", "y", "z"], title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "z"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert len(ax.texts) == 9 and ax.get_title() == "t"
    assert ax.images[0].get_array().shape == (3, 3)


def test_heatmap_rejects_batches():
    with pytest.raises(ValueError, match="one"):
        attention_heatmap(torch.ones(2, 3, 3))
