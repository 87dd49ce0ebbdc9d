"""The synthetic side of the student benchmark's inputs: titles carrying keyword phrases, and each teacher's
labels of them (keyword truth with independent noise). See bench_student.py's docstring for the recipe.

Deterministic in SEED: work i is the same for every n (one block of random numbers per work), so the 100k
works are the 1M works' prefix.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from _common import SHARED_DATA

PILOT = SHARED_DATA / "metacan_pilot"
SEED = 20251130

# keyword phrases per binary target and the share of works that carry one (the label truth)
BINARY_KEYWORDS: dict[str, tuple[float, tuple[str, ...]]] = {
    "metaresearch": (
        0.04,
        ("meta-research", "research on research", "reporting quality of trials", "reproducibility of findings"),
    ),
    "metaepi_narrow": (0.01, ("meta-epidemiological study", "meta-epidemiology of trial effect sizes")),
    "metaepi_broad": (0.06, ("systematic review", "meta-analysis", "umbrella review")),
    "bibliometrics": (0.03, ("bibliometric analysis", "citation analysis", "scientometric study")),
    "sts": (0.005, ("science and technology studies", "sociology of scientific knowledge")),
    "scholarly_communication": (0.02, ("peer review", "open access publishing", "preprint servers")),
    "open_science": (0.015, ("open data", "data sharing policies", "open science practices")),
    "research_integrity": (0.0015, ("research misconduct", "retracted publications")),
    "insufficient_payload": (0.001, ()),  # a 1-2 word title: the model declines to judge
    "about_ca_system": (0.05, ("Canadian health system", "Ontario hospitals", "CIHR-funded")),
    "about_ca_topic": (0.08, ("Canada", "Quebec", "First Nations communities", "British Columbia")),
}
CATEGORICAL_KEYWORDS: dict[str, dict[str, tuple[float, str]]] = {
    "domain": {
        "methods": (0.02, "statistical methods"),
        "reporting": (0.015, "reporting guidelines"),
        "reproducibility": (0.01, "replication study"),
        "evaluation": (0.01, "research assessment"),
        "incentives": (0.005, "academic incentives"),
    },
    "study_design": {
        "randomized_trial": (0.03, "randomized controlled trial"),
        "observational": (0.08, "cohort study"),
        "case_report": (0.02, "case report"),
        "qualitative": (0.03, "qualitative interview study"),
        "simulation_or_modeling": (0.02, "simulation model"),
        "bench_or_experimental": (0.04, "in vitro experiment"),
    },
    "genre": {
        "review": (0.05, "a narrative review"),
        "protocol": (0.01, "study protocol"),
        "dataset": (0.01, "a dataset"),
        "software": (0.01, "an R package"),
        "commentary": (0.02, "commentary"),
        "editorial": (0.01, "editorial"),
    },
}
NOISE = {
    "gemma": (0.10, 0.10),
    "codex": (0.05, 0.05),
}  # (false negative rate, false positives as a share of the target's rate)
STRATUM_WEIGHTS = (10.0, 20.0, 50.0, 100.0)  # codex design weights 1/pi, stratum = work index mod 4


def _word_pool() -> tuple[list[str], object]:
    import numpy as np

    counts: Counter = Counter()
    for f in sorted(PILOT.glob("**/chunk_*.json")):
        try:
            items = json.loads(f.read_text())
        except ValueError:
            continue
        for it in items if isinstance(items, list) else []:
            if isinstance(it, dict) and it.get("title"):
                counts.update(re.findall(r"[^\W\d_][\w'-]*", it["title"]))
    if not counts:
        raise SystemExit(f"no titles found under {PILOT} (the word pool of the synthetic titles)")
    words = sorted(counts)
    p = np.array([counts[w] for w in words], dtype=float)
    return words, p / p.sum()


def synth_works(n: int, titles_mode: str, real_titles: list[str]) -> dict:
    """Titles and label truths of n works (deterministic in SEED; work i is the same for every n)."""
    import numpy as np

    from metacan_pipeline.vocab import BINARY_TARGETS, CATEGORICAL_TARGETS

    rng = np.random.default_rng(SEED)
    # one block of random numbers per work, so that a prefix of the 1M works equals the 100k works
    truth = {t: rng.random(n) < BINARY_KEYWORDS[t][0] for t in BINARY_TARGETS}
    truth["metaresearch"] |= truth["metaepi_narrow"] | truth["research_integrity"]
    kw_pick = rng.integers(0, 1 << 30, size=(n, len(BINARY_TARGETS)))
    cat_draw = {t: rng.random(n) for t in CATEGORICAL_TARGETS}
    words, p = _word_pool()
    lengths = rng.integers(6, 17, size=n)
    ends = np.cumsum(lengths)
    idx = rng.choice(len(words), size=int(ends[-1]), p=p)
    wa = np.array(words, dtype=object)[idx]
    cat_truth: dict[str, list] = {}
    for t, table in CATEGORICAL_KEYWORDS.items():
        vals = np.full(n, None, dtype=object)
        lo = np.zeros(n)
        for cls, (rate, _) in table.items():
            hit = (cat_draw[t] >= lo) & (cat_draw[t] < lo + rate)
            vals[hit] = cls
            lo = lo + rate
        cat_truth[t] = vals
    cat_truth["domain"][np.equal(cat_truth["domain"], None) & ~truth["metaresearch"]] = "not_metaresearch"
    cat_truth["domain"][np.equal(cat_truth["domain"], None)] = "methods"
    cat_truth["study_design"][np.equal(cat_truth["study_design"], None)] = "not_applicable"
    cat_truth["study_design"][truth["metaepi_broad"]] = "systematic_review"
    cat_truth["genre"][np.equal(cat_truth["genre"], None)] = "empirical"
    titles = []
    start = 0
    bin_targets = list(BINARY_TARGETS)
    for i in range(n):
        if titles_mode == "repeat":
            title = real_titles[i % len(real_titles)]
        elif truth["insufficient_payload"][i]:
            title = " ".join(wa[start : start + 2])
        else:
            parts = list(wa[start : ends[i]])
            for j, t in enumerate(bin_targets):
                phrases = BINARY_KEYWORDS[t][1]
                if truth[t][i] and phrases:
                    parts.insert(kw_pick[i, j] % (len(parts) + 1), phrases[kw_pick[i, j] % len(phrases)])
            for t, table in CATEGORICAL_KEYWORDS.items():
                v = cat_truth[t][i]
                if v in table:
                    parts.insert(kw_pick[i, 0] % (len(parts) + 1), table[v][1])
            title = " ".join(parts)
        titles.append(title)
        start = ends[i]
    return {"titles": titles, "truth": truth, "cat_truth": cat_truth}


def teacher_labels(works: dict, teacher: str, n: int) -> dict:
    """Column arrays of one teacher's labels of the first n works: truth with independent noise."""
    import numpy as np

    from metacan_pipeline.vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS, CATEGORIES

    rng = np.random.default_rng(SEED + (1 if teacher == "gemma" else 2))
    fn, fp = NOISE[teacher]
    bits = {}
    for t, y in works["truth"].items():
        y = y[:n]
        r = rng.random(n)
        bits[t] = np.where(y, r >= fn, r < fp * BINARY_KEYWORDS[t][0])
    cats = [[] for _ in range(n)]
    for c in CATEGORIES:
        for i in np.flatnonzero(bits[c]):
            cats[i].append(c)
    out = {"categories": cats, **{t: bits[t] for t in ABOUT_CA_TARGETS}}
    for t, classes in CATEGORICAL_TARGETS.items():
        v = works["cat_truth"][t][:n].copy()
        r = rng.random(n)
        swap = r >= 0.85
        v[swap] = np.array(classes, dtype=object)[rng.integers(0, len(classes), size=int(swap.sum()))]
        v[r < 0.03] = None
        out[t] = v
    return out


def label_dicts(lab: dict, ids: list[str], teacher: str) -> list[dict]:
    from metacan_pipeline.vocab import ABOUT_CA_TARGETS, CATEGORICAL_TARGETS

    return [
        {
            "work_id": wid,
            "label_id": f"{teacher}-{wid}",
            "teacher": teacher,
            "status": "labelled",
            "source": "teacher_call",
            "categories": lab["categories"][i],
            **{t: bool(lab[t][i]) for t in ABOUT_CA_TARGETS},
            **{t: lab[t][i] for t in CATEGORICAL_TARGETS},
        }
        for i, wid in enumerate(ids)
    ]


def gemma_table(lab: dict, ids: list[str], start: int):
    """``direct_labels_gemma`` rows (LABELS_SCHEMA) for ids (frame positions start..): 2% failed calls and
    2% older duplicate labels of the same work (the predictions query keeps the newest)."""
    import datetime as dt

    import numpy as np
    import pyarrow as pa

    from metacan_pipeline.tables.teachers import LABELS_SCHEMA

    n = len(ids)
    rng = np.random.default_rng(SEED + 3 + start)
    failed = rng.random(n) < 0.02
    dup = rng.random(n) < 0.02
    base = dt.datetime(2026, 1, 1)
    pos = np.arange(start, start + n)
    status = np.where(failed, "failed", "labelled")

    def col(values, mask_null=None):
        vals = list(values)
        if mask_null is not None:
            vals = [None if m else v for v, m in zip(vals, mask_null, strict=False)]
        return vals

    cols = {
        "label_id": [f"g-{w}" for w in ids],
        "work_id": ids,
        "teacher": ["gemma"] * n,
        "model": ["gemma-3-270m-it-q4_k_m"] * n,
        "prompt_version": ["v1"] * n,
        "prompt_sha": ["0" * 16] * n,
        "record_view": ["title_only"] * n,
        "view_hash": [f"{p:016x}" for p in pos],
        "status": status.tolist(),
        "categories": col(lab["categories"], failed),
        "domain": col(lab["domain"], failed),
        "study_design": col(lab["study_design"], failed),
        "genre": col(lab["genre"], failed),
        "about_ca_system": col(lab["about_ca_system"].tolist(), failed),
        "about_ca_topic": col(lab["about_ca_topic"].tolist(), failed),
        "confidence": col(["high"] * n, failed),
        "reason": col(["keyword label (benchmark)"] * n, failed),
        "error": [("schema: no label" if f else None) for f in failed],
        "attempts": [1] * n,
        "call_id": [f"c{p // 8}" for p in pos],
        "run_id": ["bench"] * n,
        "source": ["teacher_call"] * n,
        "source_ref": [None] * n,
        "created_at": [base + dt.timedelta(seconds=int(p)) for p in pos],
    }
    table = pa.table(cols, schema=LABELS_SCHEMA)
    if dup.any():
        old = table.filter(pa.array(dup))
        old = old.set_column(
            old.schema.get_field_index("created_at"),
            "created_at",
            pa.array([base - dt.timedelta(days=30)] * old.num_rows, pa.timestamp("us")),
        )
        old = old.set_column(
            old.schema.get_field_index("label_id"),
            "label_id",
            pa.array([f"g-old-{w}" for w in old.column("work_id").to_pylist()]),
        )
        table = pa.concat_tables([table, old])
    return table
