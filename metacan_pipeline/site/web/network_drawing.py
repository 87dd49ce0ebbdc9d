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
_LABEL_ROOM = 120  # right of the square: the labels of the rightmost nodes


def _graph(net: Network):
    import networkx as nx  # only the network's pages and downloads need it

    g = nx.Graph(kind=net.kind)
    for n in net.nodes:
        g.add_node(n["id"], name=n["name"] or "", works=int(n["works"]), ref=n.get("ref") or "")
    for e in net.edges:
        g.add_edge(e["source"], e["target"], weight=int(e["weight"]))
    return g


def layout(net: Network) -> dict[str, tuple[float, float]]:
    """Node positions in the drawing's pixels, the same for the same network. Each connected component is laid out on
    its own: a dense one (such as the authors of one consortium paper) on a circle, the others by networkx's
    Kamada-Kawai layout (shared works as closeness). The largest component takes the left three quarters of the
    square; the others share a grid in the right quarter, largest first (one component: the whole square)."""
    import math

    import networkx as nx  # only the network's pages and downloads need it

    if not net.nodes:
        return {}
    g = _graph(net)
    comps = sorted(nx.connected_components(g), key=lambda c: (-len(c), min(c)))
    inner = SVG_SIZE - 2 * _MARGIN
    main_w = inner if len(comps) == 1 else inner * 0.75
    cells = [(_MARGIN, _MARGIN, main_w, inner)]  # (left, top, width, height) of each component's cell
    rest = comps[1:]
    if rest:
        cols = max(1, math.ceil(math.sqrt(len(rest) / 3)))
        rows = math.ceil(len(rest) / cols)
        w, h = (inner - main_w) / cols, inner / rows
        cells += [(_MARGIN + main_w + (k % cols) * w, _MARGIN + (k // cols) * h, w, h) for k in range(len(rest))]
    out: dict[str, tuple[float, float]] = {}
    for comp, (left, top, w, h) in zip(comps, cells, strict=True):
        sub = g.subgraph(sorted(comp))
        if len(comp) == 1:
            pos = {next(iter(comp)): (0.0, 0.0)}
        elif len(comp) > 2 and nx.density(sub) > 0.5:
            pos = nx.circular_layout(sub)
        else:
            dist = {a: {b: 1 / d["weight"] for b, d in sub[a].items()} for a in sub}
            pos = nx.kamada_kawai_layout(sub, dist=_all_pairs(sub, dist))
        radius = 0.42 * min(w, h)
        for node, (x, y) in pos.items():
            out[node] = (left + w / 2 + float(x) * radius, top + h / 2 + float(y) * radius)
    return out


def _all_pairs(sub, dist: dict) -> dict:
    """Shortest-path lengths of a connected component with ``1 / shared works`` as each edge's length (the
    Kamada-Kawai layout's target distances: two nodes sharing many works sit close)."""
    import networkx as nx  # only the network's pages and downloads need it

    for a, b, d in sub.edges(data=True):
        d["length"] = dist[a][b]
    return dict(nx.all_pairs_dijkstra_path_length(sub, weight="length"))


def _short(name: str, most: int = 22) -> str:
    """A node's label in the drawing: its name, cut to ``most`` characters (the tables beside it have it whole)."""
    return name if len(name) <= most else name[: most - 1] + "…"


def svg(net: Network, title: str, href: dict[str, str], colon: str = ": ") -> str:
    """The network as one ``<svg>`` element (``role="img"``, labelled by ``title``; the page's data tables beside it
    say the same for screen readers): edges as lines as thick as their weight's square root, nodes as circles as
    large as their works' square root with their (shortened) name beside, each linked to its page (``href``: node
    id -> URL) with its whole name and works in a ``<title>`` (``colon``: the page language's, " : " in French)."""
    pos = layout(net)
    width = SVG_SIZE + _LABEL_ROOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {SVG_SIZE}" width="{width}" '
        f'height="{SVG_SIZE}" role="img" aria-labelledby="network-title" class="network">',
        f'<title id="network-title">{escape(title)}</title>',
    ]
    names = {n["id"]: n["name"] or n["id"] for n in net.nodes}
    for e in net.edges:
        (x1, y1), (x2, y2) = pos[e["source"]], pos[e["target"]]
        stroke = round(0.5 + e["weight"] ** 0.5, 2)
        out.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#999" stroke-width="{stroke}">'
            f"<title>{escape(names[e['source']])} – {escape(names[e['target']])}{escape(colon)}{e['weight']}</title></line>"
        )
    for n in net.nodes:
        x, y = pos[n["id"]]
        r = round(3 + 1.5 * n["works"] ** 0.5, 2)
        out.append(
            f'<a href={quoteattr(href[n["id"]])}><circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="#36c">'
            f"<title>{escape(names[n['id']])}{escape(colon)}{n['works']}</title></circle>"
            f'<text x="{x + r + 2:.1f}" y="{y + 3:.1f}" font-size="9" fill="#1a1a1a">'
            f"{escape(_short(names[n['id']]))}</text></a>"
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
    share; then each node without an edge, as a row whose target and shared works are empty."""
    nodes = {n["id"]: n for n in net.nodes}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["source", "source_name", "source_works", "target", "target_name", "target_works", "shared_works"])
    linked = set()
    for e in net.edges:
        a, b = nodes[e["source"]], nodes[e["target"]]
        linked.update((a["id"], b["id"]))
        w.writerow([a["id"], a["name"] or "", a["works"], b["id"], b["name"] or "", b["works"], e["weight"]])
    for n in net.nodes:
        if n["id"] not in linked:
            w.writerow([n["id"], n["name"] or "", n["works"], "", "", "", ""])
    return buf.getvalue()
