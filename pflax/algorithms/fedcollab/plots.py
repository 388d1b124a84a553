"""Figure: the estimated distance matrix with the solved coalitions outlined."""
from __future__ import annotations

import numpy as np

from ...figures import save_png
from .solver import coalitions_of

__all__ = ["plot_distances"]


def plot_distances(dist, assignment, path, title: str = "FedCollab: estimated distances") -> None:
    """Heat map of D_hat; each coalition's block (clients reordered by coalition) is boxed.

    Args:
      dist: ``[N, N]`` estimated distances.
      assignment: ``[N]`` coalition labels.
      path: the image file to write.
      title: the figure's title.
    Returns:
      None (writes ``path``).

    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "distances.png")
    >>> plot_distances(np.array([[0.0, 0.1, 0.9], [0.1, 0.0, 0.8], [0.9, 0.8, 0.0]]), [0, 0, 1], out)
    >>> os.path.getsize(out) > 0
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    groups = coalitions_of(assignment)
    order = [i for g in groups for i in g]  # coalition members next to each other
    d = np.asarray(dist)[np.ix_(order, order)]
    fig, ax = plt.subplots(figsize=(6, 5))
    im = ax.imshow(d, cmap="viridis", vmin=min(0.0, d.min()), vmax=1.0)
    ax.set_xticks(range(len(order)), order, fontsize=7)
    ax.set_yticks(range(len(order)), order, fontsize=7)
    start = 0
    for g in groups:
        ax.add_patch(Rectangle((start - 0.5, start - 0.5), len(g), len(g), fill=False, ec="red", lw=2))
        start += len(g)
    fig.colorbar(im, ax=ax, label="D_hat")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, path, dpi=120)
