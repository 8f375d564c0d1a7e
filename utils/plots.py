"""Figures the notebooks share: attention heatmaps first, more as the course grows.

matplotlib.pyplot is imported when a figure is drawn, not with the module: grading imports every
utils module (the shortcut rule guards them all), and pyplot costs most of a second there."""
import torch


def attention_heatmap(weights, query_labels=None, key_labels=None, ax=None, title=None,
                      annotate=True, cmap="Blues"):
    """Draw a (T_q, T_k) attention matrix: rows are queries, columns are keys.

    Labels are token strings; `annotate` writes each weight into its cell (readable up to
    about 12 tokens). Returns the matplotlib Axes so callers can add to it.
    """
    w = torch.as_tensor(weights).detach().float().cpu()
    if w.dim() != 2:
        raise ValueError(f"attention_heatmap draws one (T_q, T_k) matrix, got shape {tuple(w.shape)}")
    if ax is None:
        import matplotlib.pyplot as plt
        size = 1.0 + 0.55 * max(w.shape)
        _, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(w.numpy(), cmap=cmap, vmin=0.0, vmax=max(float(w.max()), 1e-9))
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), key_labels, rotation=45, ha="right")
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), query_labels)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if annotate and max(w.shape) <= 12:
        threshold = 0.6 * float(w.max())
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(j, i, f"{float(w[i, j]):.2f}", ha="center", va="center", fontsize=8,
                        color="white" if float(w[i, j]) > threshold else "black")
    if title:
        ax.set_title(title)
    return ax
