"""Real-data evaluation: the student's ``metaresearch`` head on the MetaCan pilot labels.

The pilot (``../shared/data/metacan_pilot``, its SOURCES.md; converter :mod:`..teachers.pilot`) had LLM
screeners label Canadian works under rubric v1.0. Here those labels train and test the student's
``metaresearch`` head, exactly as the student builds it (title-only text, a feature backend of
:func:`.features.make_features`, ``heads.PARAMS["logreg"]`` logistic regression, fitted with design
weights where there are any), under grouped cross-validation by :func:`.heads.grouped_cv_metrics`.
Nothing in the pilot is truth data: the figures say how well the title-only student reproduces a
screener that read title + abstract (+ venue, topic, field, affiliations, funders in frame1k), not how
often it is right.

Two sets of works (``metacan evaluate-pilot --set``):

- ``screening`` (default; :func:`evaluate_pilot`): the earlier two-screener pilot, whose work files name
  no venue, so the CV groups are titles (next section).
- ``frame1k`` (:func:`.pilot_frame1k.evaluate_frame1k`): 750 works of the frame1k sample, each labelled by three
  model arms, the contested ones adjudicated; they name venue, topic and field, so the CV groups are venues
  (:mod:`.pilot_frame1k`).

Field mapping, set ``screening`` (pilot -> ours):

=========== ==========================================================================================
label       ``metaresearch`` positive for tier ``T1``/``T2``, negative for ``T3``/``OUT``
            (:data:`..teachers.pilot.TIER_CATEGORIES`, via :func:`..teachers.pilot.pilot_imports`, so
            the labels are the converter's). Screener ``a`` (claude-sonnet-4-6): ``labels_joined.json``
            ``tier_a``. Screener ``b`` (gpt-5.6-sol, Codex): the ``codex/chunk_*.json`` tier, else
            ``labels_joined.json`` ``tier_b`` (they agree on every work that has both; a work in two
            codex files keeps the converter's choice). A record the converter fails is left out.
text        the student's title-only view, :func:`.features.student_text` of a frame-like row:
            ``title`` -> ``title_text`` (inline markup reduced to text with
            :func:`..openalex.abstract.markup_to_text`, as the frame does), ``type`` -> ``type``,
            ``lang`` -> ``language``; ``venue_name``, ``topic``, ``field`` empty (the pilot's work files
            ``chunks/`` and ``chunks_b/`` carry only ``id, title, abstract, year, lang, type``; ``year``
            is not a student field). The ``abstract`` is never read into the text: the student is
            title-only (SPEC section 6). Works come from ``chunks/*.json`` then ``chunks_b/*.json``
            (first occurrence of an id; duplicates have identical text). A labelled work with no saved
            text cannot be evaluated (496 of the 1290 ``labels_joined.json`` works, all of stratum
            ``settled_out``); a work with an empty title is left out, as the frame admits none.
group       ``venue:<venue>`` where a record names a venue; no pilot work record does (the frame1k
            files that carry ``venue`` hold other works, and ``../shared/data/openalex`` holds none of
            these works), so every work falls back to ``title:<its title, case-folded, whitespace
            collapsed>``: each work is its own group except works with the same title (``Reply``,
            ``Book reviews``, ...), which share one and so one fold. The grouped CV therefore
            degenerates to a work-level CV; :attr:`PilotEvaluation.without_venue` counts the works.
weights     works ``joined`` (the double-screened stratified sample, ``labels_joined.json``): design
            weights, used for fitting and for AP/AUROC (``sample_weight``). ``weight`` as published
            (1/``sel_prob``: 1 for strata positive, boundary, paratext; 8.005 for settled_out) times
            ``N_h / n_h``, the stratum's works in ``labels_joined.json`` over those evaluated (with saved
            text and a title), since text survives for only 104 of the 600 settled_out works (assumed
            missing at random within the stratum: they are whole chunk files) and one boundary work
            has an empty title. Settled_out works so weigh 46.18; the
            weighted in-scope rate of screener A is then 0.0106, the pilot's published design-weighted
            prevalence (SOURCES.md). The strata were drawn from screener A's tiers (stratum
            ``positive`` = A's in-scope works). Works ``all`` (screener B only): every work with a
            codex label and text (``chunks/`` random sample + ``chunks_b/``), which mixes two designs
            and has no weight for the 638 random-sample works outside ``labels_joined.json``: unweighted.
=========== ==========================================================================================
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..openalex.abstract import markup_to_text
from ..teachers.imports.pilot import pilot_imports
from .features import make_features, student_text
from .heads import grouped_cv_metrics, weighted_rate

SCREENERS = {
    "a": "claude-sonnet-4-6 (labels_joined.json tier_a)",
    "b": "gpt-5.6-sol, Codex (codex/ tier, else labels_joined.json tier_b)",
}
WORK_SETS = ("joined", "all")


@dataclass(frozen=True)
class PilotWork:
    """One pilot work as the evaluation sees it: the student's ``text``, CV ``group``, the two screeners'
    ``metaresearch`` labels (1/0, None where that screener gave none), and its ``labels_joined.json``
    stratum and adjusted design ``weight`` (None outside that sample)."""

    id: str
    text: str
    group: str
    y_a: int | None
    y_b: int | None
    stratum: str | None
    weight: float | None


@dataclass
class PilotEvaluation:
    """What :func:`evaluate_pilot` measured. ``ap`` / ``auroc``: out-of-fold average precision and area
    under the ROC curve of the ``metaresearch`` head (design-weighted when ``weighted``; None with the
    reason in ``cv`` when there are too few positives). ``positive_rate``: the (weighted) share of
    positives, AP's chance level. ``seconds``: features (fit + transform) and CV, wall clock."""

    screener: str
    features: str
    works: str
    weighted: bool
    n: int
    positives: int
    positive_rate: float
    groups: int
    folds: int
    without_venue: int
    in_shared_groups: int
    ap: float | None
    auroc: float | None
    cv: str
    feature_seconds: float
    cv_seconds: float


def _label(categories) -> int:
    return int("metaresearch" in (categories or []))


def pilot_works(folder: Path) -> tuple[list[PilotWork], dict[str, int]]:
    """The pilot works that have text and at least one screener's label, sorted by id, and counts of what
    was left out: labelled works without saved text (``no_text_a``, ``no_text_b``), works with an empty
    title (``empty_title``), label records the converter failed (``failed_labels``).

    Raises FileNotFoundError without ``labels_joined.json`` or without any ``chunks*/chunk_*.json`` work
    file, ValueError naming a file that is not JSON.
    """
    # the screeners' three imports come first (the frame1k arms follow); raises for a missing labels_joined.json or a
    # file that is not JSON
    imports = pilot_imports(folder)[:3]
    a_imp, b_codex, b_rest = imports
    failed = sum(1 for imp in imports for r in imp.records if r.error is not None)
    y_a = {r.label["id"]: _label(r.label["categories"]) for r in a_imp.records if r.error is None}
    y_b: dict[str, int] = {}
    for r in (*b_codex.records, *b_rest.records):
        if r.error is None:
            y_b.setdefault(r.label["id"], _label(r.label["categories"]))  # first codex label wins, as imported
    joined = json.loads((folder / "labels_joined.json").read_text(encoding="utf-8"))
    stratum = {r["id"]: (r["stratum"], float(r["weight"])) for r in joined}

    texts: dict[str, dict] = {}
    files = sorted(folder.glob("chunks/chunk_*.json")) + sorted(folder.glob("chunks_b/chunk_*.json"))
    if not files:
        raise FileNotFoundError(
            f"{folder}: no chunks/chunk_*.json or chunks_b/chunk_*.json work files (see the folder's SOURCES.md)"
        )
    for path in files:
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}: not JSON ({exc}); the pilot folder should hold the files listed in its SOURCES.md"
            ) from exc
        for rec in records:
            texts.setdefault(rec["id"], rec)

    empty = {i for i, r in texts.items() if not markup_to_text(r.get("title"))}
    with_text = set(texts) - empty
    # N_h / n_h: labels_joined works per stratum over those with text (see the module docstring)
    n_all = Counter(s for s, _ in stratum.values())
    n_text = Counter(stratum[i][0] for i in stratum if i in with_text)
    works = []
    for wid in sorted(with_text & (set(y_a) | set(y_b))):
        rec = texts[wid]
        title = markup_to_text(rec.get("title"))
        row = {
            "title_text": title,
            "venue_name": rec.get("venue"),
            "topic": rec.get("topic"),
            "field": rec.get("field"),
            "type": rec.get("type"),
            "language": rec.get("lang"),
        }
        venue = (rec.get("venue") or "").strip()
        group = f"venue:{venue}" if venue else "title:" + " ".join(title.casefold().split())
        s, w = stratum.get(wid, (None, None))
        weight = None if s is None else w * n_all[s] / n_text[s]
        works.append(PilotWork(wid, student_text(row), group, y_a.get(wid), y_b.get(wid), s, weight))
    dropped = {
        "no_text_a": sum(1 for i in y_a if i not in texts),
        "no_text_b": sum(1 for i in y_b if i not in texts),
        "empty_title": len(empty),
        "failed_labels": failed,
    }
    return works, dropped


def evaluate_pilot(
    folder: Path | str,
    features: str = "tfidf",
    screener: str = "a",
    works: str = "joined",
    weighted: bool | None = None,
    folds: int = 5,
) -> PilotEvaluation:
    """Train and evaluate the student's ``metaresearch`` head on one pilot screener's labels under grouped
    cross-validation (SPEC section 6; mapping, groups and weights in the module docstring).

    ``features``: ``tfidf`` (fitted on the evaluated works' texts, no labels, as the student fits it on
    the frame's) or any other kind of :func:`.features.make_features` (fitted the same way). ``screener``: ``a`` or ``b``. ``works``: ``joined`` (the works of
    ``labels_joined.json`` with text; both screeners have all of them) or ``all`` (screener ``b`` only:
    every work it labelled that has text). ``weighted``: design weights for fitting and metrics; default
    True for ``joined``, and ``all`` has none. ``folds``: at most this many (fewer if fewer groups).

    Raises ValueError for an unknown screener, work set or backend, for ``works="all"`` with screener
    ``a`` or with weights; ImportError (naming the install command) for a backend without its packages;
    FileNotFoundError / ValueError for a missing or unreadable pilot file.
    """
    if screener not in SCREENERS:
        raise ValueError(f"screener {screener!r}: expected one of {', '.join(SCREENERS)}")
    if works not in WORK_SETS:
        raise ValueError(f"works {works!r}: expected one of {', '.join(WORK_SETS)}")
    if works == "all" and screener != "b":
        raise ValueError(
            "works 'all' is screener b's set (screener a's labels exist only for labels_joined.json works): use works='joined'"
        )
    weighted = (works == "joined") if weighted is None else weighted
    if weighted and works == "all":
        raise ValueError(
            "works 'all' has no design weights (638 random-sample works are outside labels_joined.json): use weighted=False"
        )
    backend = make_features(features)  # ValueError / ImportError before any work is read
    pool, _ = pilot_works(Path(folder))
    label = "y_a" if screener == "a" else "y_b"
    chosen = [w for w in pool if getattr(w, label) is not None and (works == "all" or w.stratum is not None)]
    texts = [w.text for w in chosen]
    y = np.array([getattr(w, label) for w in chosen], dtype=int)
    wts = np.array([w.weight for w in chosen], dtype=float) if weighted else np.ones(len(chosen))
    groups = [w.group for w in chosen]

    t0 = time.perf_counter()
    X = backend.fit(texts).transform(texts)
    t1 = time.perf_counter()
    metrics = grouped_cv_metrics(X, y, groups, wts, folds, group_name="title")
    t2 = time.perf_counter()
    sizes = Counter(groups)
    return PilotEvaluation(
        screener=screener,
        features=features,
        works=works,
        weighted=weighted,
        n=len(chosen),
        positives=int(y.sum()),
        positive_rate=weighted_rate(y, wts),
        groups=len(sizes),
        folds=min(folds, len(sizes)),
        without_venue=sum(1 for g in groups if not g.startswith("venue:")),
        in_shared_groups=sum(1 for g in groups if sizes[g] > 1),
        ap=metrics["ap"],
        auroc=metrics["auroc"],
        cv=metrics["cv"],
        feature_seconds=t1 - t0,
        cv_seconds=t2 - t1,
    )


def fmt(v: float | None) -> str:
    """A metric with 3 decimals, or ``n/a`` when it could not be computed."""
    return "n/a" if v is None else f"{v:.3f}"


def format_table(results: list[PilotEvaluation]) -> str:
    """The results as a fixed-width text table, one line per evaluation."""
    head = (
        f"{'screener':<8} {'works':<6} {'features':<8} {'n':>5} {'pos':>4} {'pos.rate':>8} {'groups':>6} {'folds':>5} "
        f"{'weights':<7} {'AP':>6} {'AUROC':>6} {'feat s':>7} {'cv s':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r.screener:<8} {r.works:<6} {r.features:<8} {r.n:>5} {r.positives:>4} {r.positive_rate:>8.4f} {r.groups:>6} "
            f"{r.folds:>5} {'design' if r.weighted else 'none':<7} {fmt(r.ap):>6} {fmt(r.auroc):>6} "
            f"{r.feature_seconds:>7.1f} {r.cv_seconds:>6.1f}"
        )
    return "\n".join(lines)


PILOT_SETS = ("screening", "frame1k")
