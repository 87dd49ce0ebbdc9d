"""The run summary ``metacan run`` and ``metacan summary`` print.

:func:`summary_text` reads the catalog read-only and joins one section per stage, each a named function
over an open DuckDB connection: the frame (:func:`frame_lines`), Retraction Watch
(:func:`.retraction_summary.retraction_lines`), the direct labels (:func:`label_lines`),
this run's teacher calls (:func:`teacher_call_lines`), teacher agreement (:func:`agreement_lines`),
prevalence (:func:`prevalence_lines`), the predictions (:func:`prediction_lines`), the student holdout
(:func:`holdout_lines`), the machine scores (:func:`machine_score_lines`), the audit study (:func:`audit_lines`),
filter recall and known-item venue recall (:func:`instrument_lines`), study design against MEDLINE
(:func:`medline_lines`), the works per release layer (:func:`release_layer_lines`), the pages (:func:`page_lines`)
and the release database (:func:`release_lines`).
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from ..audit.coding.errors import CodingStoreError
from ..audit.coding.store import CodingStore
from ..audit.estimates.status import coding_status, status_sentence
from ..audit.estimates.summary import stratum_label
from ..audit.instruments.filters import recall_filters
from ..audit.instruments.recall import KNOWN_ITEM_CATEGORY, NO_REFERENCE, NO_SOURCE
from ..audit.medline.summary import medline_line
from ..audit.protocol.locked import EXCLUDED_TRAINED, STRATA, current_protocol_id, load_protocol
from ..release.release_layers import FIELD as RELEASE_LAYER
from ..release.release_layers import RELEASE_LAYERS
from ..settings import coding_store_path
from ..site.build.release import ReleaseUnavailable, current_release_id, database_path
from ..storage import MetacanStorage
from ..student.calibration import MIN_KISH_ESS, MIN_POSITIVES
from ..student.census import CENSUS_NO_SAMPLING_ERROR, zero_width_census
from ..student.estimands import CA_PERSON_NOT_MEASURED, ESTIMANDS
from ..teachers.core.registry import load_registry, load_roles
from ..vocab import REFERENCE_GATE_REASON, SAMPLE_TEACHER
from .retraction_summary import retraction_lines


def _score(value: float | None) -> str:
    """A rate, agreement or kappa as the summary prints it: three decimals, or ``n/a``."""
    return "n/a" if value is None else f"{value:.3f}"


def _plural(n: int) -> str:
    return "s" if n != 1 else ""


def nothing_to_summarise(root: Path) -> str:
    """What the summary says when ``root`` holds no frame yet (the ``summary`` command then exits 1)."""
    return (
        f"Nothing to summarise in {root}: no frame has been built there yet. Run `make run` (or `metacan run`), "
        f"or pass --data-dir (or set METACAN_DATA_DIR) to the folder of an earlier run."
    )


def frame_lines(con: duckdb.DuckDBPyConnection, names: set[str] | None = None) -> list[str]:
    """The frame: works admitted of the records read, the files and quarantine, and the works by route. ``names``:
    the catalog's tables and views (a frame written without a build, e.g. imported, has no manifest or quarantine)."""
    n, aff, fund, venue, about, blind = con.execute(
        "SELECT count(*), count(*) FILTER (ca_aff), count(*) FILTER (ca_fund), count(*) FILTER (ca_venue),"
        " count(*) FILTER (about_ca), count(*) FILTER (invisible_to_affiliation_only) FROM frame"
    ).fetchone()
    if names is not None and not {"openalex_quarantine", "frame_build_manifest"} <= names:
        read = "(no frame build recorded here)"
    else:
        q = con.execute("SELECT count(*) FROM openalex_quarantine").fetchone()[0]
        parts, w = con.execute("SELECT count(*), sum(work_records) FROM frame_build_manifest").fetchone()
        read = f"of {w} OpenAlex work records read from {parts} files ({q} records quarantined)"
    return [
        f"Frame: {n} works admitted {read}",
        f"  by route: ca_aff {aff} | ca_fund {fund} | ca_venue {venue} | about_ca {about} | invisible to "
        f"affiliation-only {blind}",
    ]


def label_lines(con: duckdb.DuckDBPyConnection, views: set[str]) -> list[str]:
    """The direct labels of every registry teacher that has a table: counts by status and source."""
    lines = ["Direct labels (current teacher configurations):"]
    for teacher in [t for t in load_registry() if f"direct_labels_{t}" in views]:
        rows = con.execute(
            f'SELECT status, source, count(*) FROM "direct_labels_{teacher}" GROUP BY ALL ORDER BY ALL'
        ).fetchall()
        lines.append(f"  {teacher}: " + (", ".join(f"{s} ({src}) {c}" for s, src, c in rows) or "none"))
    return lines


def teacher_call_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The teacher calls of run ``run_id``: calls, works, latency, tokens and cost per teacher, and the calls
    of each endpoint of a teacher that called several (the failed ones said)."""
    calls = con.execute(
        "SELECT teacher, count(*), count(*) FILTER (error IS NOT NULL), sum(n_works), coalesce(avg(latency_s), 0), "
        "coalesce(sum(prompt_tokens + completion_tokens), 0), coalesce(sum(cost_usd), 0) FROM teacher_calls "
        "WHERE run_id = ? GROUP BY teacher ORDER BY teacher",
        [run_id],
    ).fetchall()
    total = sum(c[1] for c in calls)
    detail = ", ".join(  # works sent: a work of a failed call is sent again, so it counts twice
        f"{t} {c} calls{f' ({f} failed)' if f else ''} sending {w} works ({s:.2f} s/call, {tok} tokens, ${usd:.4f})"
        for t, c, f, w, s, tok, usd in calls
    )
    lanes = con.execute(
        "SELECT teacher, list(endpoint || ' ' || n || ' calls' || if(failed > 0, ' (' || failed || ' failed)', '') "
        "ORDER BY endpoint) FROM (SELECT teacher, endpoint, count(*) n, count(*) FILTER (error IS NOT NULL) failed "
        "FROM teacher_calls WHERE run_id = ? AND endpoint IS NOT NULL GROUP BY ALL) GROUP BY teacher "
        "HAVING count(*) > 1 ORDER BY teacher",
        [run_id],
    ).fetchall()
    return [
        f"Teacher calls in this run: {total}"
        + (f" ({detail})" if detail else " (every label reused from the label store)")
    ] + [f"  {teacher} by endpoint: {', '.join(parts)}" for teacher, parts in lanes]


def agreement_lines(con: duckdb.DuckDBPyConnection, views: set[str]) -> list[str]:
    """Teacher agreement on the metaresearch head, plain and design-weighted, one line per pair of teachers."""
    if "teacher_agreement" not in views:
        return []
    rows = con.execute(
        "SELECT pair, n, agreement, kappa, weighted_agreement, weighted_kappa FROM teacher_agreement "
        "WHERE head = 'metaresearch' AND n > 0 ORDER BY pair"
    ).fetchall()
    return [
        f"Agreement {pair} on metaresearch: {n} works, agreement {_score(agree)}, kappa {_score(kappa)};"
        f" design-weighted {_score(wagree)}, kappa {_score(wkappa)}"
        for pair, n, agree, kappa, wagree, wkappa in rows
    ]


def _rate_text(population: str | None, what: str, method: str, rate, lo, hi, design) -> tuple[str, bool]:
    """One rate as the summary shows it, and whether it is a census rate's interval of zero width."""
    row = {"method": method, "design": design, "ci_low": lo, "ci_high": hi}
    where = f"{population} " if population else ""
    if zero_width_census(row):
        return f"{where}{what} {rate:.4f} [{lo:.4f}, {hi:.4f}] (census)", True
    if method == "screener_swap_range":
        return f"{where}screener swap {lo:.4f}-{hi:.4f}", False
    if lo is not None:
        return f"{where}{what} {rate:.4f} [{lo:.4f}, {hi:.4f}]", False
    return f"{where}{what} {rate:.4f}", False


def prevalence_lines(con: duckdb.DuckDBPyConnection, views: set[str]) -> list[str]:
    """The prevalence of metaresearch per population and method (with its interval, or the screener swap range),
    then one line per estimand of the protocol (:mod:`metacan_pipeline.student.estimands`) over the frame; a census
    rate's interval of zero width is marked "(census)" and explained on the next line."""
    if "prevalence" not in views:
        return []
    columns = {r[0] for r in con.execute("DESCRIBE prevalence").fetchall()}
    category_only = "estimand = 'category'" if "estimand" in columns else "true"
    parts, census = [], False
    for population, method, teacher, rate, lo, hi, design in con.execute(
        "SELECT population, method, teacher, rate, ci_low, ci_high, design FROM prevalence "
        f"WHERE category = 'metaresearch' AND rate IS NOT NULL AND {category_only} ORDER BY population, method, teacher"
    ).fetchall():
        text, zero = _rate_text(population, teacher or method.replace("_", " "), method, rate, lo, hi, design)
        parts.append(text)
        census = census or zero
    skipped = con.execute(
        "SELECT DISTINCT population, method FROM prevalence WHERE category = 'metaresearch' AND rate IS NULL "
        f"AND starts_with(design, 'not computed: teacher') AND {category_only} ORDER BY 1, 2"
    ).fetchall()
    parts += [
        f"{population} {method.replace('_', ' ')} not computed (a teacher is not qualified)"
        for population, method in skipped
    ]
    lines = ["Prevalence of metaresearch: " + "; ".join(parts)]
    estimand_lines, zero = _estimand_lines(con) if "estimand" in columns else ([], False)
    return lines + estimand_lines + ([f"  {CENSUS_NO_SAMPLING_ERROR}"] if census or zero else [])


def _estimand_lines(con: duckdb.DuckDBPyConnection) -> tuple[list[str], bool]:
    """The estimands block of :func:`prevalence_lines` (population ``frame``) and whether it shows a census rate."""
    rows = con.execute(
        "SELECT estimand, method, teacher, rate, ci_low, ci_high, design FROM prevalence "
        "WHERE population = 'frame' AND estimand <> 'category' ORDER BY CASE method WHEN "
        "'design_weighted_teacher_rate' THEN 0 WHEN 'screener_swap_range' THEN 1 ELSE 2 END, method, teacher"
    ).fetchall()
    if not rows:
        return [], False
    by: dict[str, list[str]] = {}
    census, notes = False, []
    for estimand, method, teacher, rate, lo, hi, design in rows:
        what = teacher or method.replace("_", " ")
        if rate is None and not (design or "").startswith("not computed: "):
            text = f"{what} n/a (no labelled work)"
        elif rate is None:
            reason = design.removeprefix("not computed: ")
            unqualified = reason.startswith("teacher")
            text = f"{what} not computed" + (" (a teacher is not qualified)" if unqualified else "")
            notes += [] if reason in notes or unqualified else [reason]
        else:
            text, zero = _rate_text(None, what, method, rate, lo, hi, design)
            census = census or zero
        by.setdefault(estimand, []).append(text)
    if all(r[3] is None for r in rows):
        return ["Estimands (frame): " + ("; ".join(notes) or "not computed (a teacher is not qualified)")], False
    lines = ["Estimands (frame; in scope = metaresearch; rate of the whole frame):"]
    lines += [f"  {e.name}: " + "; ".join(by[e.name]) for e in ESTIMANDS if e.name in by]
    lines += [f"  {CA_PERSON_NOT_MEASURED}"] + [f"  not computed: {n}" for n in notes]
    return lines, census


def prediction_lines(con: duckdb.DuckDBPyConnection, sample_teacher: str, tables: set[str] | None = None) -> list[str]:
    """The predictions: works scored, with a candidate or consensus category, the sample teacher's heads that pass the
    support gate, and how many of them decide in this run (none while the sample teacher is not qualified)."""
    p, cand, cons, mv = con.execute(
        "SELECT count(*), count(*) FILTER (len(candidate_categories) > 0), count(*) FILTER (len(consensus_categories) "
        "> 0), any_value(model_version) FROM predictions"
    ).fetchone()
    gated, heads = con.execute(
        "SELECT count(*) FILTER (gate_passed), count(*) FROM student_heads WHERE teacher = ?", [sample_teacher]
    ).fetchone()
    line = (
        f"Predictions: {p} works scored by {mv}; {cand} with a candidate category, {cons} with a consensus category;"
        f" {gated} of {heads} {sample_teacher} heads pass the support gate (at least {MIN_POSITIVES} positive direct "
        f"labels from each teacher, an effective sample size of {MIN_KISH_ESS:.0f})"
    )
    if tables is None or "prediction_thresholds" in tables:
        deciding, why = con.execute(
            "SELECT count(*) FILTER (gate_passed), any_value(gate_reason) FILTER (NOT gate_passed) "
            "FROM prediction_thresholds WHERE model_version = ?",
            [mv],
        ).fetchone()
        line += f"; {deciding} decide in this run" + (f" ({why})" if deciding == 0 and why else "")
    return [line]


def holdout_lines(con: duckdb.DuckDBPyConnection, tables: set[str]) -> list[str]:
    """The frozen student holdout and the metaresearch heads' AP and AUROC on its labelled works."""
    holdout = con.execute("SELECT count(*) FROM student_holdout").fetchone()[0] if "student_holdout" in tables else 0
    metrics = con.execute(
        "SELECT teacher, holdout_n, holdout_positives, ap, auroc FROM student_heads WHERE target = 'metaresearch' "
        "AND gate_reason IS DISTINCT FROM ? ORDER BY teacher",
        [REFERENCE_GATE_REASON],
    ).fetchall()
    references = con.execute(
        "SELECT teacher, labels, positives, ap, auroc, metric_note FROM student_heads WHERE target = 'metaresearch' "
        "AND gate_reason = ? ORDER BY teacher",
        [REFERENCE_GATE_REASON],
    ).fetchall()
    lines = [
        f"Student holdout: {holdout} frame works of held-out venues (frozen); metaresearch heads on its labelled works: "
        + "; ".join(
            f"{t} n={n} positives={pos} AP {_score(ap)} AUROC {_score(auc)}"
            if n
            else f"{t}: none of its labelled works is in the holdout (no AP or AUROC)"
            for t, n, pos, ap, auc in metrics
        )
    ]
    if references:
        lines.append(
            "Reference sets the heads also learned from (machine scores only; metaresearch, cross-validated on the set): "
            + "; ".join(
                f"{t} {n} works, {pos} positives, AP {_score(ap)} AUROC {_score(auc)} "
                f"({note.split(':')[0].removeprefix('reference set (').removesuffix(')')})"
                for t, n, pos, ap, auc, note in references
            )
        )
    return lines


def machine_score_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The machine scores by validation status, with the rounds run."""
    ms = con.execute(
        "SELECT validation_status, any_value(rounds_run), count(*) FROM machine_scores GROUP BY ALL"
    ).fetchall()
    return ["Machine scores: " + ", ".join(f"{s} {c} (after {r} round{_plural(r)})" for s, r, c in ms)]


def page_facts(con: duckdb.DuckDBPyConnection, tables: set[str]) -> tuple[tuple | None, tuple | None]:
    """``(pages, model-version folders)`` from ``page_manifest`` and the path of the fullest page (a work with
    the most routes and an abstract), or ``(None, None)`` before any page was rendered."""
    if "page_manifest" not in tables:
        return None, None
    pages = con.execute("SELECT count(*), count(DISTINCT split_part(page_path, '/', 2)) FROM page_manifest").fetchone()
    first = con.execute(
        "SELECT m.page_path FROM frame f JOIN page_manifest m USING (id) ORDER BY ca_aff::INT + ca_fund::INT + "
        "ca_venue::INT + about_ca::INT DESC, has_abstract DESC, in_sampling_frame DESC, id LIMIT 1"
    ).fetchone()
    return pages, first


def page_lines(site_dir: Path, pages: tuple | None, first: tuple | None) -> list[str]:
    """Where the pages and the index are, and one page to open."""
    lines = []
    if pages:
        lines.append(f"Pages: {pages[0]} in {site_dir / 'works'} ({pages[1]} model-version folder{_plural(pages[1])})")
    lines.append(f"Index: {site_dir / 'index.html'}")
    if first:
        lines.append(f"Open one: {site_dir / first[0]}")
    return lines


def qualification_lines(con, tables: set[str]) -> list[str]:
    """The newest qualification result of every teacher configuration (``teacher_qualification``)."""
    if "teacher_qualification" not in tables:
        return []
    rows = con.execute(
        """SELECT teacher, model, prompt_version, record_view, status, note FROM (
             SELECT *, row_number() OVER (PARTITION BY teacher, model, prompt_version, prompt_sha, record_view, config_hash
                                          ORDER BY computed_at DESC) rn FROM teacher_qualification) WHERE rn = 1
           ORDER BY teacher, model, prompt_version, record_view"""
    ).fetchall()
    if not rows:
        return []
    lines = ["Qualification (against the frame1k frontier reference; a teacher that fails decides nothing):"]
    # the model by name: a role's name ("codex") says nothing of the model that answers as it
    lines += [f"  {t} (model {m}, prompt {p}, {v}): {status}: {note}" for t, m, p, v, status, note in rows]
    return lines


_AUDIT_STRATA_SQL = """
SELECT stratum, any_value(stratum_size), count(*) FILTER (in_sample) FROM audit_sample WHERE protocol_id = ?
GROUP BY stratum
"""

_NEWEST_GATE_SQL = """
SELECT head, passed, reason, n_coded FROM (
  SELECT *, row_number() OVER (PARTITION BY head ORDER BY computed_at DESC, run_id DESC) AS rn
  FROM human_validation WHERE protocol_id = ? AND classifier_version = ?) WHERE rn = 1 ORDER BY head
"""


def audit_lines(
    con: duckdb.DuckDBPyConnection, views: set[str], tables: set[str], coding_store: Path | None = None
) -> list[str]:
    """The audit study (SPEC section 10): the current protocol, its audit sample by stratum (drawn / N_h), where the
    coding stands (:func:`..audit.estimates.status.status_sentence`: counts that add up, the final codes split by
    where they count) and each machine adjudicator's codes in and outside the sample (from the coding store, opened
    read-only, when it exists), the report (:func:`report_lines`) and the newest gate row of every evaluated head.
    Empty before any protocol."""
    if not {"audit_protocol_runs", "audit_protocols", "human_validation"} <= tables:
        return []
    pid = current_protocol_id(con)
    if pid is None:
        return []
    p = load_protocol(con, pid)
    lines = [
        f"Audit study: protocol {pid} ({p.classifier_version}, {p.decision_rule} rule, heads "
        f"{', '.join(p.head_names)}; gate precision >= {p.gate.precision_lower:.2f}, recall >= "
        f"{p.gate.recall_lower:.2f} (lower 95% bounds), {p.gate.min_coded_positives} coded positives; min n {p.min_n})"
    ]
    drawn: set[str] = set()
    if "audit_sample" in views:
        order = (EXCLUDED_TRAINED, *STRATA)
        strata = sorted(con.execute(_AUDIT_STRATA_SQL, [pid]).fetchall(), key=lambda r: order.index(r[0]))
        total = sum(n for _, _, n in strata)
        lines.append(
            f"  audit sample: {total} of {sum(big for _, big, _ in strata)} frame works drawn; by stratum (drawn / N_h): "
            + " | ".join(f"{s} {n}/{big}" for s, big, n in strata)
        )
        drawn = {
            r[0]
            for r in con.execute("SELECT id FROM audit_sample WHERE protocol_id = ? AND in_sample", [pid]).fetchall()
        }
    if "human_codes" in views and (coding_store is None or not coding_store.exists()):
        coded = con.execute("SELECT count(*) FROM human_codes WHERE protocol_id = ?", [pid]).fetchone()[0]
        lines.append(
            f"  final human codes (two coders agreed, or adjudicated; sampled or not, trained_on works included): "
            f"{coded} (no coding store at {coding_store}: how far the coding stands is not shown)"
        )
    if coding_store is not None and coding_store.exists():
        try:
            with CodingStore(coding_store, read_only=True) as store:
                machine = store.machine_codes(pid)
                answers, final = store.latest_answers(pid), store.adjudicated_codes(pid)
        except CodingStoreError as exc:
            lines.append(f"  coding and machine adjudicators: not read ({exc})")
            machine, answers, final = [], None, []
        if answers is not None and "audit_sample" in views:
            trained = {
                r[0]
                for r in con.execute(
                    "SELECT id FROM audit_sample WHERE protocol_id = ? AND in_sample AND trained_on", [pid]
                ).fetchall()
            }
            status = coding_status(answers, final, drawn - trained, trained)
            lines.append(f"  coding: {status_sentence(status)}")
        by: dict[str, set[str]] = {}
        for row in machine:
            by.setdefault(row["adjudicator"], set()).add(row["id"])
        for name, ids in sorted(by.items()):
            lines.append(
                f"  {name} (MACHINE-ADJUDICATED, never human codes): {len(ids)} works coded, {len(ids & drawn)} of "
                "them in the audit sample"
            )
    lines += report_lines(con, views, pid, p.head_names)
    rows = con.execute(_NEWEST_GATE_SQL, [pid, p.classifier_version]).fetchall()
    for head, passed, reason, n_coded in rows:
        state = f"human_validated:{pid}" if passed else "not passed"
        lines.append(
            f"  gate {head}: {state} ({reason}; {n_coded} final human codes on the head in the audited sample)"
        )
    return lines


def _ci(value, lower, upper, digits: int = 3) -> str:
    """``value [lower, upper]``, the value alone when its interval is missing, ``undefined`` with no value."""
    if value is None:
        return "undefined"
    if lower is None or upper is None:
        return f"{value:.{digits}f} (no interval)"
    return f"{value:.{digits}f} [{lower:.{digits}f}, {upper:.{digits}f}]"


def report_lines(con: duckdb.DuckDBPyConnection, views: set[str], pid: str, heads: list[str]) -> list[str]:
    """The human-code report of protocol ``pid`` on each evaluated head (tables ``validation_agreement``,
    ``validation_error_rates``, ``validation_prevalence``, code source ``human``): the inter-coder agreement pooled
    (design-weighted and raw) and per stratum, each system's design-weighted precision, recall and F1 with 95%
    intervals, and the human-only prevalence beside each prediction-powered one. Empty before a report."""
    lines = []
    if "validation_agreement" in views:
        columns = {d[0] for d in con.execute("SELECT * FROM validation_agreement LIMIT 0").description}
        if "stratum" not in columns:  # written before agreement had strata and intervals
            views = views - {"validation_agreement"}
            lines.append("  agreement: the stored report predates its strata; re-materialize validation_report")
    for head in heads:
        if "validation_agreement" in views:
            rows = con.execute(
                "SELECT stratum, weighting, statistic, value, lower, upper, n FROM validation_agreement "
                "WHERE protocol_id = ? AND code_source = 'human' AND head = ? "
                "ORDER BY stratum <> 'all', stratum, weighting = 'raw', statistic",
                [pid, head],
            ).fetchall()
            parts: dict[tuple[str, str], list[str]] = {}
            for stratum, weighting, statistic, value, lower, upper, n in rows:
                name = stratum_label(stratum, weighting)
                parts.setdefault((name, n), []).append(f"{_STAT_NAMES[statistic]} {_ci(value, lower, upper)}")
            if parts:
                lines.append(
                    f"  agreement on {head} before adjudication (works coded twice): "
                    + "; ".join(f"{name}, n={n}: {', '.join(p)}" for (name, n), p in parts.items())
                )
        if "validation_error_rates" in views:
            rows = con.execute(
                "SELECT system, metric, value, lower, upper, n FROM validation_error_rates WHERE protocol_id = ? "
                "AND code_source = 'human' AND head = ? AND group_by = 'all' "
                "ORDER BY system, list_position(['precision', 'recall', 'f1'], metric)",
                [pid, head],
            ).fetchall()
            by: dict[str, list[str]] = {}
            for system, metric, value, lower, upper, n in rows:
                shown = f"{_ci(value, lower, upper)} n={n}" if value is not None else f"not reported (n={n} < min n)"
                by.setdefault(system, []).append(f"{metric} {shown}")
            lines += [f"  {system} on {head} (design-weighted): {', '.join(m)}" for system, m in by.items()]
        if "validation_prevalence" in views:
            rows = con.execute(
                "SELECT method, value, lower, upper, n, width_ratio FROM validation_prevalence WHERE protocol_id = ? "
                "AND code_source = 'human' AND head = ? ORDER BY method <> 'human', method",
                [pid, head],
            ).fetchall()
            shown = [
                f"{'human-only' if method == 'human' else method} {_ci(value, lower, upper, 4)} n={n}"
                + (f" ({ratio:.2f}x the human-only width)" if ratio is not None else "")
                for method, value, lower, upper, n, ratio in rows
            ]
            if shown:
                lines.append(f"  prevalence of {head}: " + "; ".join(shown))
    return lines + (_estimand_prevalence_lines(con, pid) if "validation_prevalence" in views else [])


def _estimand_prevalence_lines(con: duckdb.DuckDBPyConnection, pid: str) -> list[str]:
    """The human-only prevalence of each estimand (``validation_prevalence`` head ``estimand:<name>``, code source
    ``human``) with its prediction-powered estimates, one line each; empty when the report has none."""
    rows = con.execute(
        "SELECT head, method, value, lower, upper, n FROM validation_prevalence WHERE protocol_id = ? "
        "AND code_source = 'human' AND starts_with(head, 'estimand:') ORDER BY head, method <> 'human', method",
        [pid],
    ).fetchall()
    by: dict[str, list[str]] = {}
    for head, method, value, lower, upper, n in rows:
        shown = "human-only" if method == "human" else method
        by.setdefault(head.removeprefix("estimand:"), []).append(f"{shown} {_ci(value, lower, upper, 4)} n={n}")
    return [f"  prevalence of estimand {e.name}: " + "; ".join(by[e.name]) for e in ESTIMANDS if e.name in by]


_STAT_NAMES = {"cohen_kappa": "kappa", "krippendorff_alpha": "alpha"}


def _or_not_yet(name: str, section) -> list[str]:
    """``section()``, or one line saying the stage is not there yet when a table it reads was never written (a run
    stopped before that stage, e.g. by Ctrl-C)."""
    try:
        return section()
    except duckdb.CatalogException as exc:
        table = re.search(r"with name (\w+) does not exist", str(exc))
        what = f"no table {table.group(1)}" if table else "a table it reads is missing"
        return [f"{name[:1].upper()}{name[1:]}: not yet ({what}: the run stopped before that stage; run again)"]


def summary_text(data_dir: str, run_id: str | None = None) -> str:
    """The post-run summary: frame by route, labels by teacher and status, predictions, pages (one section
    per function above); with ``run_id``, also that run's teacher calls. :func:`nothing_to_summarise` when
    ``data_dir`` holds no frame."""
    st = MetacanStorage(data_dir=data_dir)
    if not st.duckdb_path.exists() or not st.has_table("frame"):
        return nothing_to_summarise(st.root)
    sample_teacher = load_roles()[SAMPLE_TEACHER]
    with st.connect(read_only=True) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        sections = [
            ("frame", lambda: frame_lines(con, views | tables)),
            ("retraction", lambda: retraction_lines(con, views)),
            ("labels", lambda: label_lines(con, views)),
            ("qualification", lambda: qualification_lines(con, tables)),
            ("teacher calls", lambda: teacher_call_lines(con, run_id) if run_id else []),
            ("agreement", lambda: agreement_lines(con, views)),
            ("prevalence", lambda: prevalence_lines(con, views)),
            ("predictions", lambda: prediction_lines(con, sample_teacher, views | tables)),
            ("student holdout", lambda: holdout_lines(con, tables)),
            ("machine scores", lambda: machine_score_lines(con)),
            ("audit", lambda: audit_lines(con, views, tables, coding_store_path(data_dir))),
            ("instruments", lambda: instrument_lines(con, views)),
            ("MEDLINE", lambda: medline_lines(con, views)),
            ("release layers", lambda: release_layer_lines(con, views)),
        ]
        lines = [line for name, section in sections for line in _or_not_yet(name, section)]
        pages, first = page_facts(con, tables)
    return "\n".join(lines + page_lines(st.site_dir, pages, first) + release_lines(st.root))


def release_layer_lines(con: duckdb.DuckDBPyConnection, views: set[str]) -> list[str]:
    """The published works per release layer of the original protocol (``work_records``' ``release_layer``; every
    layer listed, 0 included, and the works in none, which the blocking check refuses), or nothing before any record."""
    if "work_records" not in views:
        return []
    counts = dict(
        con.execute(
            f"SELECT json_extract_string(record_json, '$.{RELEASE_LAYER}') AS layer, count(*) FROM work_records "
            "GROUP BY layer"
        ).fetchall()
    )
    shown = [f"{layer.replace('_', '-')} {counts.get(layer, 0)}" for layer in RELEASE_LAYERS]
    none = sum(n for layer, n in counts.items() if layer not in RELEASE_LAYERS)
    return [
        "Release layers (the protocol's; every work in one): "
        + " | ".join(shown)
        + (f" | in no layer {none} (re-materialize work_records)" if none else "")
    ]


def release_lines(data_dir: Path) -> list[str]:
    """The release database the site serves (asset ``site_database``) and how to serve it, or nothing before one."""
    try:
        release_id = current_release_id(data_dir)
    except ReleaseUnavailable:
        return []
    return [f"Release database: {database_path(data_dir, release_id)} (serve it: metacan serve, or make serve)"]


def _recall(value, lower, upper, hits: int, n: int) -> str:
    return "n = 0" if not n else f"{_ci(value, lower, upper)} ({hits}/{n})"


def instrument_lines(con: duckdb.DuckDBPyConnection, views: set[str]) -> list[str]:
    """Filter recall on metaresearch per reference (table ``filter_recall``) and known-item recall on the venue
    reference set overall (table ``venue_known_item_recall``), the latter marked as a non-probability bound. Empty
    before either asset ran."""
    lines = []
    if "filter_recall" in views:
        rows = con.execute(
            "SELECT reference_source, filter_name, recall, lower, upper, kept, n FROM filter_recall "
            "WHERE category = ? ORDER BY reference_source = 'human', reference_source, list_position(?, filter_name)",
            [KNOWN_ITEM_CATEGORY, [f.name for f in recall_filters()]],
        ).fetchall()
        lines.append("Filter recall on metaresearch (instrument ii: reference positives each filter keeps, 95% exact):")
        by: dict[str, list[str]] = {}
        for source, name, value, lower, upper, kept, n in rows:
            by.setdefault(source, []).append(f"{name} {_recall(value, lower, upper, kept, n)}")
        for source, shown in by.items():
            if source == NO_SOURCE:
                lines.append(f"  every filter: n = 0, {NO_REFERENCE}")
            else:
                lines.append(f"  against {source}: " + "; ".join(shown))
    if "venue_known_item_recall" in views:
        rows = con.execute(
            "SELECT system, recall, lower, upper, detected, n, reference_works, venue_list_version "
            "FROM venue_known_item_recall WHERE group_by = 'all' ORDER BY system LIKE 'teacher:%', system"
        ).fetchall()
        if rows:
            lines.append(
                f"Known-item recall on metaresearch, venue reference set {rows[0][7]} ({rows[0][6]} frame works; "
                "instrument iii, a non-probability bound on recall, not a design-based estimate):"
            )
            lines.append("  " + "; ".join(f"{r[0]} {_recall(r[1], r[2], r[3], r[4], r[5])}" for r in rows))
    return lines


def medline_lines(con: duckdb.DuckDBPyConnection, views: set[str]) -> list[str]:
    """Study design against MEDLINE in one line (table ``medline_study_design``): per class the sources that passed
    the gate on hand-indexed records, else ``unvalidated``. Empty before the asset ran or when it measured nothing."""
    if "medline_study_design" not in views:
        return []
    line = medline_line(con.execute("SELECT * FROM medline_study_design").df())
    return [line] if line else []
