"""Real-data evaluation: the student's ``metaresearch`` head on the MetaCan pilot labels (issue 5).

The pilot (``../shared/data/metacan_pilot``, its SOURCES.md; converter :mod:`..teachers.imports.pilot`) had LLM
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
- ``frame1k`` (:func:`evaluate_frame1k`): 750 works of the frame1k sample, each labelled by three model
  arms, the contested ones adjudicated; they name venue, topic and field, so the CV groups are venues
  (section "frame1k" below).

Field mapping, set ``screening`` (pilot -> ours):

=========== ==========================================================================================
label       ``metaresearch`` positive for tier ``T1``/``T2``, negative for ``T3``/``OUT``
            (:data:`..teachers.core.reference.TIER_CATEGORIES`, via :func:`..teachers.imports.pilot.pilot_imports`, so
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

frame1k
-------

Files (``<pilot>/frame1k``, SOURCES.md section 1): works ``chunks/chunk_NN.json`` (15 saved chunks of 50,
750 works); one label per work in ``opus_r1/``, ``codex_r1/``, ``grok_r1/`` ``labels_NN.json`` (paired
with ``chunk_NN.json`` by ``id``); the adjudicator's decisions ``adjudication/verdict_*.json``.

=========== ==========================================================================================
label       ``metaresearch`` from the record's ``tier`` (rubric v1.0, the same tiers and meaning as the
            screening set, so the same map :data:`..teachers.core.reference.TIER_CATEGORIES`): positive for
            ``T1`` (core metaresearch) and ``T2`` (adjacent: STS, LIS, research infrastructure,
            history/philosophy of science, research-policy analysis), negative for ``T3``
            (contextual: editorials, policy documents, announcements) and ``OUT``. Any other tier
            value is no label (counted ``failed_<arm>``; none occurs). Nothing else of a label is
            read (``genre``, ``about_ca``, ``confidence``, ``reason`` feed no ``metaresearch`` head).
arms        ``opus_r1`` (Claude Opus 4.8), ``codex_r1`` (GPT-5.6 through the Codex CLI, "gpt" in the
            project), ``grok_r1`` (Grok 4.5): each arm's own ``tier``; 28, 20 and 14 positives of 750.
            ``adjudicated``: where ``verdict_*.json`` holds the work (24 of the 750: the 23 on which the
            arms disagree about scope, plus W2901282154, in scope for all three but T2/T2/T1), the
            verdict's ``tier``, same map (its ``seam``, ``confidence``, ``rubric_is_silent`` unused);
            otherwise the scope all three r1 arms share (726 works). A work without a verdict on which
            the arms disagree, or where an arm has no usable label, gets no ``adjudicated`` label
            (counted; none occurs). 16 positives (10 unanimous, 6 by verdict).
text        the student's title-only view, :func:`.features.student_text` of a frame-like row, all six
            student fields from the work record: ``title`` -> ``title_text`` (reduced with
            :func:`..openalex.abstract.markup_to_text`, as the frame does; 37 titles carry markup or
            entities), ``venue`` -> ``venue_name`` (absent for 44 works), ``topic`` -> ``topic`` and
            ``field`` -> ``field`` (absent for 42), ``type`` -> ``type``, ``lang`` -> ``language``. Never
            read into the text: ``abstract`` (587 works have one; the student is title-only, SPEC
            section 6), ``year``, ``ca_institutions``, ``funders`` (not student fields). A work with an
            empty title would be left out (none is).
group       :func:`.holdout.venue_key` (the student holdout's rule) of the work id and the venue name:
            the ``venue`` string as given (OpenAlex's source display name, which is what the frame's
            ``venue_name`` holds; the files carry no source id; 548 distinct names, none differ only
            by case or whitespace), or ``no-venue:<work id>`` for the 44 works without a venue, each
            its own group: 592 groups. Every venue lies in one test fold (``GroupKFold``).
folds       5, fewer when fewer than 5 venue groups hold a positive (then one per such group, at least
            2; :func:`.heads.grouped_cv_metrics` needs 2 positives); all four arms have 14 or more, so
            5 folds. ``GroupKFold`` balances folds by works, not positives: the positives per test fold
            are reported (:attr:`Frame1kEvaluation.fold_positives`).
weights     none: the sample is stratified with known selection probabilities (French oversampled), but
            the saved files carry neither probabilities nor weights, so fitting and AP/AUROC are
            unweighted and describe this sample, not the frame; the positive rate is the sample's.
left out    ``frame1k/v2`` (rubric v2 re-screen of the 179 contested works of all 112 chunks: only 24
            are among the 750, the rest exist only as adjudication batch records, a selected and not a
            random set, labelled under another rubric) and the batches' blinded opinions (they equal
            the r1 labels, SOURCES.md).
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
from ..teachers.core.reference import FRAME1K_ARMS, frame1k_labels
from ..teachers.imports.pilot import pilot_imports
from .features import make_features, student_text
from .heads import grouped_cv_metrics, weighted_rate
from .holdout import venue_key

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
    imports = pilot_imports(folder)  # raises for a missing labels_joined.json / a file that is not JSON
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
    the frame's) or ``minilm``. ``screener``: ``a`` or ``b``. ``works``: ``joined`` (the works of
    ``labels_joined.json`` with text; both screeners have all of them) or ``all`` (screener ``b`` only:
    every work it labelled that has text). ``weighted``: design weights for fitting and metrics; default
    True for ``joined``, and ``all`` has none. ``folds``: at most this many (fewer if fewer groups).

    Raises ValueError for an unknown screener, work set or backend, for ``works="all"`` with screener
    ``a`` or with weights; ImportError (naming the install command) for ``minilm`` without its packages;
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


# --- frame1k: the three arms (and the adjudication) on works that name their venue ---------------------

PILOT_SETS = ("screening", "frame1k")


@dataclass(frozen=True)
class Frame1kWork:
    """One frame1k work: the student's ``text``, its CV ``group`` (:func:`.holdout.venue_key` of the venue
    name: ``<venue>``, or ``no-venue:<work id>``), ``venue`` (None when the record names none) and
    ``labels``: arm -> ``metaresearch`` 1/0, None where that arm has no usable label."""

    id: str
    text: str
    group: str
    venue: str | None
    labels: dict[str, int | None]


@dataclass
class Frame1kEvaluation:
    """What :func:`evaluate_frame1k` measured (unweighted: the files carry no selection probabilities).
    ``groups``: CV groups = ``venues`` distinct venue names + ``without_venue`` works that name none (one
    group each). ``positive_groups``: groups holding a positive. ``fold_positives``: positives per test
    fold. ``note``: why fewer folds than asked, if so. ``ap`` / ``auroc`` / ``cv`` as
    :class:`PilotEvaluation`. ``feature_seconds``: wall clock of the feature fit + transform when it was
    computed; ``features_reused``: this evaluation reused that matrix (same backend, same works)."""

    arm: str
    features: str
    n: int
    positives: int
    positive_rate: float
    groups: int
    venues: int
    without_venue: int
    positive_groups: int
    folds: int
    fold_positives: list[int]
    ap: float | None
    auroc: float | None
    cv: str
    note: str
    feature_seconds: float
    features_reused: bool
    cv_seconds: float


def frame1k_works(folder: Path) -> tuple[list[Frame1kWork], dict[str, int]]:
    """The frame1k works (``<folder>/frame1k/chunks/chunk_*.json``, in file order) with every arm's label
    (:func:`..teachers.core.reference.frame1k_labels`, whose counts of what was left out this returns, plus
    ``empty_title``: works dropped for an empty title).

    Raises FileNotFoundError without chunk files, ValueError naming a file that is not JSON.
    """
    ref = frame1k_labels(folder)
    records, labels = ref.records, ref.labels
    dropped = Counter(ref.dropped)
    dropped["empty_title"] = 0
    works = []
    for wid, rec in records.items():
        title = markup_to_text(rec.get("title"))
        if not title:
            dropped["empty_title"] += 1
            continue
        venue = (rec.get("venue") or "").strip() or None
        row = {
            "title_text": title,
            "venue_name": venue,
            "topic": rec.get("topic"),
            "field": rec.get("field"),
            "type": rec.get("type"),
            "language": rec.get("lang"),
        }
        works.append(
            Frame1kWork(
                wid,
                student_text(row),
                venue_key(wid, venue),
                venue,
                {arm: labels[arm].get(wid) for arm in FRAME1K_ARMS},
            )
        )
    return works, {k: int(v) for k, v in sorted(dropped.items())}


_MATRICES: dict[tuple[str, tuple[str, ...]], tuple[object, float]] = {}


def _frame1k_matrix(features: str, texts: tuple[str, ...], backend) -> tuple[object, float, bool]:
    """The feature matrix of ``texts`` (``backend`` fitted on them, no labels), its wall-clock seconds, and
    whether it was reused: the arms label the same works, so one backend's matrix serves every arm (the
    last two (backend, texts) pairs are kept)."""
    key = (features, texts)
    if key in _MATRICES:
        X, seconds = _MATRICES[key]
        return X, seconds, True
    t0 = time.perf_counter()
    X = backend.fit(list(texts)).transform(list(texts))
    seconds = time.perf_counter() - t0
    while len(_MATRICES) >= 2:
        _MATRICES.pop(next(iter(_MATRICES)))
    _MATRICES[key] = (X, seconds)
    return X, seconds, False


def evaluate_frame1k(
    folder: Path | str, features: str = "tfidf", arm: str = "adjudicated", folds: int = 5
) -> Frame1kEvaluation:
    """Train and evaluate the student's ``metaresearch`` head on one frame1k arm's labels under
    cross-validation grouped by venue (mapping in the module docstring, section frame1k).

    ``features``: ``tfidf`` (fitted on the evaluated works' texts, no labels) or ``minilm``. ``arm``: one
    of :data:`FRAME1K_ARMS`. ``folds``: at most this many, fewer when fewer groups, and fewer when fewer
    venue groups hold a positive (each fold can then still test one; said in ``note``). Unweighted.

    Raises ValueError for an unknown arm or backend, ImportError for ``minilm`` without its packages,
    FileNotFoundError / ValueError for missing or unreadable frame1k files.
    """
    if arm not in FRAME1K_ARMS:
        raise ValueError(f"frame1k arm {arm!r}: expected one of {', '.join(FRAME1K_ARMS)}")
    backend = make_features(features)
    pool, _ = frame1k_works(Path(folder))
    chosen = [w for w in pool if w.labels[arm] is not None]
    texts = [w.text for w in chosen]
    y = np.array([w.labels[arm] for w in chosen], dtype=int)
    wts = np.ones(len(chosen))
    groups = [w.group for w in chosen]
    sizes = Counter(groups)
    positive_groups = len({g for g, v in zip(groups, y, strict=False) if v})
    k, note = min(folds, len(sizes)), ""
    if 2 <= positive_groups < k:
        k, note = (
            positive_groups,
            f"{positive_groups} venue groups hold a positive: {positive_groups} folds instead of {folds}",
        )

    X, feature_seconds, reused = _frame1k_matrix(features, tuple(texts), backend)
    t1 = time.perf_counter()
    metrics = grouped_cv_metrics(X, y, groups, wts, k, group_name="venue")
    t2 = time.perf_counter()
    if metrics["ap"] is None:
        note = metrics["cv"]
    return Frame1kEvaluation(
        arm=arm,
        features=features,
        n=len(chosen),
        positives=int(y.sum()),
        positive_rate=weighted_rate(y, wts),
        groups=len(sizes),
        venues=len({w.venue for w in chosen if w.venue}),
        without_venue=sum(1 for w in chosen if w.venue is None),
        positive_groups=positive_groups,
        folds=len(metrics["fold_positives"]),
        fold_positives=metrics["fold_positives"],
        ap=metrics["ap"],
        auroc=metrics["auroc"],
        cv=metrics["cv"],
        note=note,
        feature_seconds=feature_seconds,
        features_reused=reused,
        cv_seconds=t2 - t1,
    )


def format_frame1k_table(results: list[Frame1kEvaluation]) -> str:
    """frame1k results as a fixed-width text table, one line per arm x backend; a reused feature matrix's
    seconds (computed once for an earlier line) are in parentheses."""
    head = (
        f"{'arm':<11} {'features':<8} {'n':>4} {'pos':>4} {'pos.rate':>8} {'groups':>6} {'venues':>6} {'no-venue':>8} "
        f"{'folds':>5} {'test pos/fold':<14} {'AP':>6} {'AUROC':>6} {'feat s':>7} {'cv s':>6}"
    )

    lines = [head, "-" * len(head)]
    for r in results:
        per_fold = "/".join(map(str, r.fold_positives)) or "-"
        feat = f"({r.feature_seconds:.1f})" if r.features_reused else f"{r.feature_seconds:.1f}"
        lines.append(
            f"{r.arm:<11} {r.features:<8} {r.n:>4} {r.positives:>4} {r.positive_rate:>8.4f} {r.groups:>6} {r.venues:>6} "
            f"{r.without_venue:>8} {r.folds:>5} {per_fold:<14} {fmt(r.ap):>6} {fmt(r.auroc):>6} "
            f"{feat:>7} {r.cv_seconds:>6.1f}"
        )
    return "\n".join(lines)
