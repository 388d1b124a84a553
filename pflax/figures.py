"""Matplotlib figures as small PNG files.

Every run writes plots beside its results, and the results are committed, so their size adds up: a
plot has few distinct colours, and storing it with a 256-colour palette instead of full RGBA makes the
file about a third as large with no visible difference (colormaps have at most 256 entries too).
"""
from __future__ import annotations

import io
from pathlib import Path


def png_bytes(fig, dpi: int = 120) -> bytes:
    """Render ``fig`` as a palette PNG and close it.

    Args:
      fig: a matplotlib figure (laid out by the caller).
      dpi: resolution of the rendering.

    Returns:
      The PNG file's bytes: 8-bit palette colour, no alpha.

    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots(figsize=(2, 2))
    >>> _ = ax.plot([0, 1], [1, 0])
    >>> data = png_bytes(fig, dpi=50)
    >>> data[:8] == b"\\x89PNG\\r\\n\\x1a\\n", data[25]  # PNG signature; colour type 3 = palette
    (True, 3)
    """
    import matplotlib.pyplot as plt
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    buf.seek(0)
    # octree keeps a colorbar's gradient smooth, where median cut bands it (it gives the few large flat
    # areas most of the palette); no dithering, whose noise would compress badly
    image = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE,
                                                     dither=Image.Dither.NONE)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def save_png(fig, path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` as a palette PNG (:func:`png_bytes`) and close it.

    Args:
      fig: a matplotlib figure.
      path: the file to write; its folder must exist.
      dpi: resolution of the rendering.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    >>> import tempfile, matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> with tempfile.TemporaryDirectory() as d:
    ...     written = save_png(plt.figure(figsize=(1, 1)), Path(d) / "empty.png", dpi=40)
    ...     written.stat().st_size > 0
    True
    """
    path = Path(path)
    path.write_bytes(png_bytes(fig, dpi))
    return path
