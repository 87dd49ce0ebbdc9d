"""The collaboration network drawn and written out: a server-drawn SVG (networkx's spring layout, seeded, so one
network is always drawn the same), GraphML (networkx's writer) and CSV of its nodes and edges. Names are written as
OpenAlex gives them; the SVG's text is escaped, and each node and edge carries a ``<title>``."""

from __future__ import annotations

import csv
import io
from xml.sax.saxutils import escape, quoteattr

from ..query.people import Network

SVG_SIZE = 640
_MARGIN = 40


def _graph(net: Network):
    import networkx as nx  # only the network's pages and downloads need it

    g = nx.Graph(kind=net.kind)
    for n in net.nodes:
        g.add_node(n["id"], name=n["name"] or "", works=int(n["works"]), ref=n.get("ref") or "")
    for e in net.edges:
        g.add_edge(e["source"], e["target"], weight=int(e["weight"]))
    return g


def layout(net: Network) -> dict[str, tuple[float, float]]:
    """Node positions in the SVG's pixels: networkx's spring layout weighted by shared works, seed 0."""
    import networkx as nx  # only the network's pages and downloads need it

    if not net.nodes:
        return {}
    pos = nx.spring_layout(_graph(net), weight="weight", seed=0)
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    span = max(max(xs) - min(xs), max(ys) - min(ys)) or 1.0
    inner = SVG_SIZE - 2 * _MARGIN
    return {
        k: (_MARGIN + (x - min(xs)) / span * inner, _MARGIN + (y - min(ys)) / span * inner) for k, (x, y) in pos.items()
    }


def svg(net: Network, title: str, href: dict[str, str]) -> str:
    """The network as one ``<svg>`` element (``role="img"``, labelled by ``title``; the page's data table beside it
    says the same for screen readers): edges as lines as thick as their weight's square root, nodes as circles
    as large as their works' square root, each linked to its page (``href``: node id -> URL) with its name and
    counts in a ``<title>``."""
    pos = layout(net)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SVG_SIZE} {SVG_SIZE}" width="{SVG_SIZE}" '
        f'height="{SVG_SIZE}" role="img" aria-labelledby="network-title" class="network">',
        f'<title id="network-title">{escape(title)}</title>',
    ]
    names = {n["id"]: n["name"] or n["id"] for n in net.nodes}
    for e in net.edges:
        (x1, y1), (x2, y2) = pos[e["source"]], pos[e["target"]]
        width = round(0.5 + e["weight"] ** 0.5, 2)
        out.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#888" stroke-width="{width}">'
            f"<title>{escape(names[e['source']])} – {escape(names[e['target']])}: {e['weight']}</title></line>"
        )
    for n in net.nodes:
        x, y = pos[n["id"]]
        r = round(3 + 2 * n["works"] ** 0.5, 2)
        label = escape(names[n["id"]])
        out.append(
            f'<a href={quoteattr(href[n["id"]])}><circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="#36c">'
            f"<title>{label}: {n['works']}</title></circle></a>"
        )
    out.append("</svg>")
    return "\n".join(out)


def graphml(net: Network) -> bytes:
    """The network as GraphML (networkx's writer): node attributes ``name``, ``works``, ``ref`` (ORCID or ROR),
    edge attribute ``weight`` (works shared)."""
    import networkx as nx  # only the network's pages and downloads need it

    buf = io.BytesIO()
    nx.write_graphml(_graph(net), buf, encoding="utf-8")
    return buf.getvalue()


def csv_text(net: Network) -> str:
    """The network's edges as CSV, heaviest first: each end's id, name and works in the cohort, and the works they
    share (a node without an edge is in the GraphML and on the page only)."""
    nodes = {n["id"]: n for n in net.nodes}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["source", "source_name", "source_works", "target", "target_name", "target_works", "shared_works"])
    for e in net.edges:
        a, b = nodes[e["source"]], nodes[e["target"]]
        w.writerow([a["id"], a["name"] or "", a["works"], b["id"], b["name"] or "", b["works"], e["weight"]])
    return buf.getvalue()
