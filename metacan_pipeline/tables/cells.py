"""Text cells written to CSV files a spreadsheet may open: the site's exports and ``metacan score``'s output.

A cell starting with a character of :data:`FORMULA_STARTS` is written with ``'`` before it, so Excel, LibreOffice
and Google Sheets show it as text instead of running it as a formula (OWASP, "CSV Injection")."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

#: The first characters that make a spreadsheet read a cell as a formula.
FORMULA_STARTS = "=+-@\t\r"
_FORMULA_START = "^[=+\\-@\t\r]"


def is_text(t: pa.DataType) -> bool:
    """A column whose cells are text a reader typed (titles, names, lists of names), not numbers or booleans."""
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or (pa.types.is_list(t) and pa.types.is_string(t.value_type))
    )


def defused(cells: pa.Array) -> pa.Array:
    """The cells of a text column with ``'`` before every one starting with a character of :data:`FORMULA_STARTS`
    (the others, and every number, unchanged)."""
    risky = pc.match_substring_regex(cells, _FORMULA_START)
    if not pc.any(risky).as_py():
        return cells
    return pc.if_else(risky, pc.binary_join_element_wise("'", cells, ""), cells)


def defused_table(table: pa.Table) -> pa.Table:
    """``table`` with every string column :func:`defused` (list and other columns unchanged)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            col = pa.chunked_array([defused(c) for c in table.column(i).chunks], type=f.type)
            table = table.set_column(i, f, col)
    return table
