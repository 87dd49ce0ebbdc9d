"""Matplotlib figures rendered off-screen to PNG bytes (the plots shown in asset metadata)."""

from __future__ import annotations

import io


def new_figure(figsize: tuple[float, float]):
    """A matplotlib ``Figure`` on the Agg backend (no display needed), 90 dpi."""
    # matplotlib is heavy to import and only the assets that draw a plot need it: imported on the first figure
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, dpi=90)


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes, cropped to its content."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()
