"""Asset metadata that users read in the Dagster UI: row count, column schema, markdown preview."""

from __future__ import annotations

import base64
from typing import Any

import dagster as dg
import pyarrow as pa

from .plots import new_figure, png_bytes

#: The Arrow field metadata key of a column's description (the catalog's field dictionary sets it on every column).
DESCRIPTION = b"description"


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    """``dagster/column_schema`` value for an Arrow schema: each column's name, type and the description its field
    metadata carries (the catalog's columns all have one; none for a column built without it)."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(f.name, str(f.type), description=(f.metadata or {}).get(DESCRIPTION, b"").decode() or None)
            for f in schema
        ]
    )


def markdown_preview(rows: list[dict], columns: list[str], limit: int = 10) -> dg.MetadataValue:
    """A small markdown table of the first ``limit`` rows (values cut to 60 characters)."""

    def cell(v: Any) -> str:
        s = "" if v is None else str(v)
        s = s.replace("|", "\\|").replace("\n", " ")
        return s if len(s) <= 60 else s[:57] + "..."

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(cell(r.get(c)) for c in columns) + " |\n" for r in rows[:limit])
    return dg.MetadataValue.md(head + body if rows else "_(no rows)_")


def table_metadata(
    schema: pa.Schema,
    row_count: int,
    preview: list[dict] | None = None,
    preview_columns: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Standard table metadata (STYLE: row count, column schema, a preview) plus ``extra``."""
    md: dict[str, Any] = {
        "dagster/row_count": row_count,
        "dagster/column_schema": column_schema(schema),
    }
    if preview is not None:
        md["preview"] = markdown_preview(preview, preview_columns or [f.name for f in schema][:6])
    md.update(extra)
    return md


def counts_markdown(counts: dict[str, int], key: str = "value", value: str = "count") -> dg.MetadataValue:
    """A two-column markdown table of counts, largest first."""
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return dg.MetadataValue.md(
        f"| {key} | {value} |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows) if rows else "_(none)_"
    )


def png_markdown(png: bytes, alt: str) -> dg.MetadataValue:
    """A PNG as markdown metadata (a data: URL), which the Dagster UI shows as an image."""
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})")


def frame_plot_png(by_year: dict[int, dict[str, int]], title: str) -> bytes:
    """A PNG of frame works per publication year, one line per route (a work counts once per route it
    took). ``by_year`` maps year -> {route: works}. Matplotlib's Agg backend (no display)."""
    fig = new_figure((6.5, 3.6))
    ax = fig.add_subplot()
    years = sorted(by_year)
    routes = sorted({r for counts in by_year.values() for r in counts})
    for route, marker in zip(routes, "osD^v<>", strict=False):
        ax.plot(years, [by_year[y].get(route, 0) for y in years], marker=marker, linewidth=1.2, label=route)
    ax.set_xlabel("publication year")
    ax.set_ylabel("frame works")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return png_bytes(fig)
