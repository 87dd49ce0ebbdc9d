"""HTML pages per work and the index, through Jinja2 with autoescaping (SPEC section 9).

Every value from OpenAlex or a model (titles with inline markup, abstracts, names, reasons) is
escaped by Jinja2's autoescape; titles are first reduced to their text, so ``<i>Planck</i>`` shows
as "Planck" and a ``<script>`` in a title can never run. The work pages also forbid scripts outright
through a Content-Security-Policy; the index allows one script, its own ``index.js`` (``script-src
'self'``), which reads the rows from an inert JSON block and writes them with textContent only.

Layout: ``index.html`` and ``index.js`` at the site root, a work's page at
``works/<model_version>/<id>.html`` (:func:`page_path`), so a page's permalink pins its model version.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from functools import partial
from gettext import NullTranslations
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from .. import __version__, settings
from ..i18n import DEFAULT_LOCALE, N_, language_name
from ..openalex.ids import is_work_id
from ..release.release_layers import layer_basis
from ..storage import MetacanStorage
from ..vocab import CATEGORIES, CATEGORY_DISPLAY, DISPLAY_NAMES, PREDICTION_STATUS
from .abstract_cascade import SOURCE_NAMES
from .abstracts import Abstract
from .cascade_record import BOUND_METHOD_NAMES
from .lineage import build_runs, run_url
from .notes import machine_note_words
from .records import classification_card

_NOT_FETCHED = {"status": "off"}

ROUTE_LABELS = (
    ("ca_aff", N_("Canadian affiliation")),
    ("ca_fund", N_("Canadian funder")),
    ("ca_venue", N_("Canadian venue")),
    ("about_ca", N_("About Canada")),
)

#: Why the abstract is fetched at render time and never stored (SPEC section 9); shown under every abstract.
ABSTRACT_REASON = N_(
    "Abstracts are not stored in this database: the inverted indexes are most of the bytes of an OpenAlex "
    "work record, and a page needs the text only when it is rendered."
)


#: What a source said of a work's abstract (:data:`.abstracts.OUTCOMES`), as the abstract's source line says it.
ABSTRACT_OUTCOMES = {
    "ok": N_("abstract"),
    "none": N_("no abstract"),
    "missing": N_("no record"),
    "failed": N_("fetch failed"),
    "not_attempted": N_("not attempted"),
    "no_id": N_("not asked, no DOI or PMID"),
}


def asked_line(abstract: Abstract, gettext=lambda s: s) -> str:
    """What each source said, in the order asked (``OpenAlex: no abstract; Europe PMC: abstract``), in the language of
    ``gettext``; source names are proper names, never translated."""
    pattern = gettext(N_("%(source)s: %(outcome)s"))
    return "; ".join(
        pattern % {"source": SOURCE_NAMES.get(s, s), "outcome": gettext(ABSTRACT_OUTCOMES.get(o, o))}
        for s, o in getattr(abstract, "asked", ())
    )


#: What an ORCID or a ROR id must be to become a link (anything else is shown as text: a link never carries a
#: ``javascript:`` or another site's URL that a record happened to hold).
ORCID_RE = re.compile(r"https://orcid\.org/\d{4}-\d{4}-\d{4}-\d{3}[\dX]")
ROR_RE = re.compile(r"https://ror\.org/0[a-z0-9]{6}\d{2}")
#: The query parameter that names the work in the "report a problem" link.
REPORT_PARAM = "work"


def link_or_none(value: str | None, pattern: re.Pattern) -> str | None:
    """``value`` when it is a whole match of ``pattern`` (an ORCID or ROR URL), else None."""
    return value if isinstance(value, str) and pattern.fullmatch(value) else None


def report_link(base: str | None, wid: str) -> str | None:
    """The "report a problem with this record" link: ``base`` (:func:`metacan_pipeline.settings.report_url`) with
    ``work=<id>`` added to its query string; None when no URL is configured."""
    if not base:
        return None
    parts = urlsplit(base)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != REPORT_PARAM]
    return urlunsplit(parts._replace(query=urlencode([*query, (REPORT_PARAM, wid)])))


def explore_links(record: dict, card: dict, prefix: str | None) -> dict | None:
    """The served site's cohort links from a work page. ``prefix``: on a served page the language's path prefix,
    ``""`` or ``"/fr"``; on a static page the served site's address (:func:`metacan_pipeline.settings.site_url`,
    ``https://host[/path]``), or None when none is configured: a static site has no cohort builder of its own, so
    no links; None too for a work with no venue, topic or category. ``{"venue", "topic": href or None,
    "categories": [{"category", "source", "teacher", "mode", "href"}]}``: the same venue, the same topic, and each
    category the Classification card shows, by its own source (a direct label's teacher, or the classifier's mode
    and version: SPEC section 8, never mixed)."""
    if prefix is None:
        return None

    def href(params: dict) -> str:
        return f"{prefix}/?{urlencode(params)}"

    categories = []
    if card["kind"] == "direct":
        for label in card["labels"]:
            for c in label.get("categories") or []:
                params = {"label_category": c, "label_teacher": label["teacher"]}
                categories.append(
                    {"category": c, "source": "direct", "teacher": label["teacher"], "href": href(params)}
                )
    elif card["kind"] in ("consensus", "candidate"):
        for c in card["categories"]:
            params = {"classifier_category": c, "classifier_mode": card["kind"]}
            if card.get("model_version"):
                params["classifier_version"] = card["model_version"]
            categories.append({"category": c, "source": card["kind"], "href": href(params)})
    links = {
        "venue": href({"venue": record["venue"]}) if record.get("venue") else None,
        "topic": href({"topic": record["topic"]}) if record.get("topic") else None,
        "categories": categories,
    }
    return links if any(links.values()) else None  # nothing to explore: no section (it showed an empty list)


def _score(value, missing: str = "n/a") -> str:
    """A probability as shown on pages: three decimals, or ``missing`` for None."""
    return missing if value is None else f"{value:.3f}"


def _utc(value) -> str:
    """A datetime as ``YYYY-MM-DD HH:MM UTC`` (other values as text)."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "" if value is None else str(value)


#: The qualification notes the teachers stage writes (``QualificationResult.note``), as interface strings: a page in
#: another language says them in that language (:func:`qualification_words`), with the note's own figures.
QUALIFICATION_NOTES = {
    "qualified": N_(
        "teacher qualified (kappa %(kappa)s on %(n)s reference works (%(positives)s positive); needs %(needed)s)"
    ),
    "not_qualified": N_(
        "teacher not qualified (kappa %(kappa)s on %(n)s reference works (%(positives)s positive); needs %(needed)s)"
    ),
    "too_few": N_(
        "teacher not qualified: too few cases to judge (kappa %(kappa)s on %(n)s reference works (%(positives)s "
        "positive); needs %(needed)s)"
    ),
    "not_tested": N_("teacher not qualified: not tested yet"),
}
_NOTE = re.compile(
    r"teacher (?P<state>qualified|not qualified(?:: too few cases to judge)?) \(kappa (?P<kappa>\S+) on "
    r"(?P<n>\d+) reference works \((?P<positives>\d+) positive\); needs (?P<needed>\S+)\)"
)


def qualification_words(note: str | None, tr: NullTranslations) -> str | None:
    """A teacher's qualification note in the language of ``tr``: one of :data:`QUALIFICATION_NOTES` with its figures,
    or the note verbatim when it is none of them (an imported set's note, a future wording)."""
    if not note:
        return note
    if note == QUALIFICATION_NOTES["not_tested"]:
        return tr.gettext(note)
    m = _NOTE.fullmatch(note)
    if m is None:
        return note
    state = {"qualified": "qualified", "not qualified": "not_qualified"}.get(m["state"], "too_few")
    values = {k: m[k] for k in ("kappa", "n", "positives", "needed")}
    return tr.gettext(QUALIFICATION_NOTES[state]) % values


def qualification_notes_in(text: str, tr: NullTranslations) -> str:
    """``text`` with every qualification note in it (:data:`QUALIFICATION_NOTES`) said in the language of ``tr``."""
    text = _NOTE.sub(lambda m: qualification_words(m.group(0), tr), text)
    untested = QUALIFICATION_NOTES["not_tested"]
    return text.replace(untested, qualification_words(untested, tr))


def environment(translations: NullTranslations | None = None, locale: str = DEFAULT_LOCALE) -> Environment:
    """The Jinja2 environment (package templates, autoescape on for .j2 HTML templates).

    Templates write interface strings through gettext (``_()``, ``ngettext``; :mod:`metacan_pipeline.i18n`).
    ``translations`` None (the static site) renders them in English, as written; the served site passes a
    language's translations for its ``/fr/`` pages. Category display names and route labels are translated
    through the same translations; ``locale`` (the language of ``translations``) names a work's language in it."""
    env = Environment(
        loader=PackageLoader("metacan_pipeline.publish", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True, default=True),
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
        extensions=["jinja2.ext.i18n"],
    )
    tr = translations or NullTranslations()
    env.install_gettext_translations(tr, newstyle=True)
    display = {c: tr.gettext(name) for c, name in CATEGORY_DISPLAY.items()}
    env.globals["display"] = display
    env.filters["display_names"] = lambda cats: [display.get(c, c) for c in (cats or [])]
    env.filters["tr"] = tr.gettext
    env.filters["code"] = lambda value: Markup("<code>%s</code>") % value
    env.filters["code_link"] = lambda text, href: Markup('<a href="%s"><code>%s</code></a>') % (href, text)
    env.filters["qualification"] = partial(qualification_words, tr=tr)
    env.filters["machine_note"] = partial(machine_note_words, tr=tr)
    #: a vocabulary code by its display name (``{{ l.confidence | named("confidence") }}``; an unknown code as it is)
    env.filters["named"] = lambda code, vocabulary: (
        tr.gettext(DISPLAY_NAMES[vocabulary][code]) if code in DISPLAY_NAMES[vocabulary] else code
    )
    env.filters["score"] = _score
    env.filters["utc"] = _utc
    env.filters["asked"] = partial(asked_line, gettext=tr.gettext)
    env.filters["source_name"] = lambda source: SOURCE_NAMES.get(source, source)
    env.filters["language"] = partial(language_name, locale=locale)
    return env


UNSCORED = "unscored"  # the folder of works that have no prediction (so no model version) in this build
# A model version becomes a folder name: letters, digits, ".", "_", "-", starting with a letter or digit
# (so never "." or ".."), at most 128 characters.
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
INDEX_FIELDS = ("id", "title", "year", "routes", "source", "mode", "model_version", "classification", "href")
INDEX_MAX_ROWS = 500  # the index table shows at most this many matches (index.js reads it from data-max-rows)
#: The static index embeds the rows of at most this many works (the first in :func:`.page_writer.index_order`: newest year
#: first), about 280 bytes each in index.html; a larger frame is browsed on the served site (``metacan serve``).
INDEX_MAX_WORKS = 50_000
STATIC_FILES = ("index.js",)  # copied next to index.html by write_static; index.html.j2's CSP allows them ('self')


def model_version_of(record: dict) -> str | None:
    """The model version a work's page shows: its prediction's ``model_version`` (None: no prediction).

    It is the page's version whatever the Classification card shows first (a directly labelled work's
    page still shows that prediction under "How this classification was reached").
    """
    return (record.get("prediction") or {}).get("model_version") or None


def _page_folder(version: str | None, wid: str) -> str:
    if version is None:
        return UNSCORED
    if not isinstance(version, str) or version == UNSCORED or not _VERSION_RE.fullmatch(version):
        raise ValueError(
            f"refusing to publish {wid} under model version {version!r}: a version becomes a folder name and "
            f"must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$ and not be {UNSCORED!r}"
        )
    return version


def page_path(record: dict) -> str:
    """The page of a work relative to the site root: ``works/<model_version>/<id>.html``
    (``works/unscored/<id>.html`` when the work has no prediction), so a page's permalink pins the
    model version it shows.

    Raises ValueError naming the value when the id is not a short work id (``^W\\d+$``,
    openalex.ids.is_work_id) or the model version is not a safe folder name (see ``_VERSION_RE``;
    ``unscored`` is reserved).
    """
    wid = record.get("id")
    if not is_work_id(wid):
        raise ValueError(f"refusing to publish work id {wid!r}: ids must match ^W\\d+$")
    return f"works/{_page_folder(model_version_of(record), wid)}/{wid}.html"


def render_work(env: Environment, record: dict, abstract: Abstract | None, context: dict) -> str:
    """One work page (the sections of seeds/000; SPEC sections 8 and 9) as an HTML string.

    ``abstract`` is the live fetch result (:class:`.abstracts.Abstract`; None = fetching is off).
    ``context`` holds build-level facts: ``n_codex_labels``, ``gated_heads``, ``total_heads``,
    ``constant_heads`` (a set of ``(teacher, target)`` whose head could not be fitted), and optionally
    ``rendered_at`` and ``page_run_id`` (shown in the lineage section), ``dagster_ui`` (the Dagster UI's address,
    :func:`metacan_pipeline.settings.dagster_ui_url`: each run id of the lineage links to its run there; absent or
    None: run ids are text) and ``frame_build_runs`` (``{frame build id: runs that produced it}``,
    :func:`.lineage.build_runs`: with two runs or more the lineage says they produced the same build). The served
    site adds ``lang`` (the ``<html lang>``), ``alternates`` (``[{"hreflang", "href"}]``, the page in each language)
    and ``switch`` (``{"href", "lang", "name"}``, the language switch link), ``served`` (True: a failed live abstract says to
    reload the page, not to render it again) and ``guide`` (``{"about", "methods", "glossary"}``: the addresses of the
    site's plain-words pages, linked from the footer); the static site has none of them. ``explore`` (both): where the
    page's cohort links point (:func:`explore_links`: the served language's path prefix, or the served site's
    address on a static page; absent: no links). ``report_url`` (both): the "report a problem with this record"
    link's base (:func:`report_link`). The page's
    permalink and its model version come from :func:`page_path` (ValueError for an id or version that may not
    become a path).
    """
    permalink = page_path(record)
    card = classification_card(record)
    ui_url = context.get("dagster_ui")

    def run_code(run_id: str | None) -> Markup:
        """A run id as code, linked to its run in the Dagster UI when a UI address is configured."""
        url = run_url(ui_url, run_id)
        return (
            (Markup('<a href="%s"><code>%s</code></a>') % (url, run_id))
            if url
            else Markup("<code>%s</code>") % (run_id or "")
        )

    build = (record.get("lineage") or {}).get("frame_build_id")
    same_build = (context.get("frame_build_runs") or {}).get(build, [])
    return env.get_template("work.html.j2").render(
        run_code=run_code,
        same_build_runs=Markup(", ").join(run_code(r) for r in same_build) if len(same_build) > 1 else None,
        r=record,
        abstract=abstract or _NOT_FETCHED,
        abstract_reason=ABSTRACT_REASON,
        card=card,
        release_layer=layer_basis(record),
        authors=[
            {
                "name": a["name"],
                "orcid": a.get("orcid"),
                "orcid_link": link_or_none(a.get("orcid"), ORCID_RE),
                "institutions": [{**i, "ror_link": link_or_none(i.get("ror"), ROR_RE)} for i in a["institutions"]],
            }
            for a in record.get("ca_authors") or []
        ],
        explore=explore_links(record, card, context.get("explore")),
        report_href=report_link(context.get("report_url"), record["id"]),
        failed_labels=[label for label in record["direct_labels"] if label["status"] == "failed"],
        routes=ROUTE_LABELS,
        categories=CATEGORIES,
        prediction_status=PREDICTION_STATUS,
        bound_methods=BOUND_METHOD_NAMES,
        version=__version__,
        built_at=None,
        n_codex_labels=context["n_codex_labels"],
        gated_heads=context["gated_heads"],
        total_heads=context["total_heads"],
        constant_heads=context.get("constant_heads", set()),
        model_version=model_version_of(record) or UNSCORED,
        permalink=permalink,
        root="../" * permalink.count("/"),
        rendered_at=context.get("rendered_at", "now"),
        page_run_id=context.get("page_run_id", "none"),
        lang=context.get("lang"),
        alternates=context.get("alternates", ()),
        switch=context.get("switch"),
        served=context.get("served", False),
        guide=context.get("guide"),
        model_card_href=model_card_link(context.get("explore"), model_version_of(record)),
    )


def model_card_link(prefix: str | None, model_version: str | None) -> str | None:
    """The address of a model version's card on the served site (``<prefix>/models/<model_version>``, ``prefix`` as
    :func:`explore_links` takes it), or None without a served site or a model version."""
    if prefix is None or not model_version:
        return None
    return f"{prefix.rstrip('/')}/models/{model_version}"


def index_row(record: dict) -> dict:
    """One row of the index (fields ``INDEX_FIELDS``), from a published record.

    - ``title``: the title text ("" when OpenAlex has none); ``year``: int or None;
    - ``routes``: the route keys that admitted the work, among ca_aff, ca_fund, ca_venue, about_ca;
    - ``source``: "direct" (a direct teacher or rule label is shown first), "classifier" (a consensus or
      candidate prediction, or a prediction with no category) or "none" (not classified yet); ``mode``:
      "consensus" | "candidate" for a classifier call with categories, None otherwise (SPEC section 8: direct labels and predictions never share a badge);
    - ``model_version``: the version the page shows (None: no prediction); ``classification``: short
      human text naming the source and status of every category (SPEC section 8), e.g. "direct label (gemma,
      direct_label_unvalidated, teacher not qualified ...): Metaresearch", "consensus prediction
      (machine_predicted_unvalidated): Bibliometrics"; ``href``: :func:`page_path`.
    """
    card = classification_card(record)
    kind = card["kind"]
    if kind == "direct":
        cls = "; ".join(
            f"direct label ({label['teacher']}, {label['label_status']}"
            + (f", {label['qualification']}" if label.get("qualification") else "")
            + "): "
            + (", ".join(CATEGORY_DISPLAY[c] for c in label["categories"]) or "not meta-research")
            for label in card["labels"]
        )
    elif kind == "none":
        cls = "not classified yet"
    elif kind == "no_category":
        cls = "prediction: no category"
    else:
        cls = f"{kind} prediction ({record['prediction']['prediction_status']}): " + ", ".join(
            CATEGORY_DISPLAY[c] for c in card["categories"]
        )
    return {
        "id": record["id"],
        "title": record["title"] or "",
        "year": record["year"],
        "routes": [r for r, _ in ROUTE_LABELS if record["routes"][r]],
        "source": {"direct": "direct", "none": "none"}.get(kind, "classifier"),
        "mode": kind if kind in ("consensus", "candidate") else None,
        "model_version": model_version_of(record),
        "classification": cls,
        "href": page_path(record),
    }


def index_json(rows: list[dict]) -> str:
    """The rows as the JSON text embedded in index.html: ``{"fields": INDEX_FIELDS, "rows": [[...], ...]}``
    (one array per row, in field order: about half the bytes of one object per row).

    ``<``, ``>``, ``&``, U+2028 and U+2029 are written as ``\\uXXXX`` escapes (still the same JSON), so a
    title holding ``</script>`` or ``<!--`` cannot end or alter the ``<script type="application/json">``
    block it sits in.
    """
    text = json.dumps(
        {"fields": INDEX_FIELDS, "rows": [[r[f] for f in INDEX_FIELDS] for r in rows]},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def render_index(
    env: Environment,
    rows: list[dict],
    *,
    built_at: str | None = None,
    n_works: int | None = None,
    versions: Counter[str] | None = None,
) -> str:
    """``index.html``: search by title or id and filters (route, year, source, mode, classifier version)
    over every row of :func:`index_row` given, run by ``index.js`` (copy it next to index.html with
    :func:`write_static`). Rows are embedded as JSON (:func:`index_json`), so the index works from
    file:// with no request. ``built_at`` defaults to the current UTC minute.

    ``n_works`` and ``versions`` (works by model version, ``UNSCORED`` for none) describe the whole frame when
    ``rows`` holds only the first :data:`INDEX_MAX_WORKS` of it (:class:`.page_writer.SiteIndex`); the heading and the
    pages-by-version line count the frame, the page says which works the search covers, and the filters offer
    the years and versions of the rows. Both default to what ``rows`` holds."""
    row_versions = Counter(r["model_version"] or UNSCORED for r in rows)
    versions = row_versions if versions is None else versions
    n_works = len(rows) if n_works is None else n_works
    years = sorted({r["year"] for r in rows if r["year"] is not None}, reverse=True)

    def by_name(counts: Counter[str]) -> list[tuple[str, int]]:
        return sorted(counts.items(), key=lambda kv: (kv[0] == UNSCORED, kv[0]))

    return env.get_template("index.html.j2").render(
        n_works=n_works,
        n_listed=len(rows),
        data=Markup(index_json(rows)),
        routes=ROUTE_LABELS,
        max_rows=INDEX_MAX_ROWS,
        years=years,
        unknown_year=any(r["year"] is None for r in rows),
        unscored=UNSCORED,
        versions=by_name(versions),
        version_options=by_name(row_versions),
        version=__version__,
        built_at=built_at or dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def write_static(site_dir: Path) -> list[Path]:
    """Copy the index's static files (``static/index.js``, shipped as package data) to ``site_dir``,
    each only when its bytes differ from what is there; returns the paths written."""
    written = []
    static = resources.files("metacan_pipeline.publish").joinpath("static")
    site_dir = Path(site_dir)
    for name in STATIC_FILES:
        data = static.joinpath(name).read_bytes()
        dest = site_dir / name
        if dest.exists() and dest.read_bytes() == data:
            continue
        site_dir.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(dest)
        written.append(dest)
    return written


def page_context(heads: list[dict], sample_teacher: str) -> dict:
    """The build-level facts :func:`render_work` needs, from the rows of ``student_heads``: the number of
    direct labels of the sample teacher its heads were trained on (``n_codex_labels``), how many of its heads
    pass the support gate (``gated_heads``) of ``total_heads``, and the ``(teacher, target)`` pairs whose head
    is constant (``constant_heads``)."""
    sample_heads = [h for h in heads if h["teacher"] == sample_teacher]
    return {
        "n_codex_labels": max((h["n_train"] for h in sample_heads), default=0),
        "gated_heads": sum(1 for h in sample_heads if h["gate_passed"]),
        "total_heads": len(sample_heads),
        "constant_heads": {(h["teacher"], h["target"]) for h in heads if h["status"].startswith("constant")},
    }


def run_context(storage: MetacanStorage, sample_teacher: str, run_id: str, rendered_at: dt.datetime) -> dict:
    """:func:`page_context` of the current ``student_heads`` (none yet: no heads) plus the run's facts the
    lineage section shows: ``page_run_id`` and ``rendered_at`` (``YYYY-MM-DD HH:MM UTC``), the configured
    ``report_url`` (:func:`metacan_pipeline.settings.report_url`; None: no report link) and ``explore``, the served
    site's address (:func:`metacan_pipeline.settings.site_url`; None: no explore links), ``dagster_ui``
    (:func:`metacan_pipeline.settings.dagster_ui_url`; None: run ids are not links) and ``frame_build_runs``, every run
    that produced the current frame's builds (:func:`.lineage.build_runs`; a page rendered later than a re-run of the
    same build names that run too, a page left unchanged keeps what it said)."""
    heads = storage.read_table("student_heads").to_pylist() if storage.has_table("student_heads") else []
    builds: dict[str, list[str]] = {}
    if storage.has_table("frame"):
        with storage.connect() as con:
            ids = [r[0] for r in con.execute("SELECT DISTINCT frame_build_id FROM frame").fetchall()]
            builds = build_runs(con, ids)
    return {
        **page_context(heads, sample_teacher),
        "page_run_id": run_id,
        "rendered_at": f"{rendered_at:%Y-%m-%d %H:%M} UTC",
        "report_url": settings.report_url(),
        "explore": settings.site_url(),
        "dagster_ui": settings.dagster_ui_url(),
        "frame_build_runs": builds,
    }
