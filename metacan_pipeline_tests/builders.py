"""Builders shared by several test files: the helpers, constants and classes more than one test module uses
(fixtures live in conftest.py). Test files import from here, never from one another."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import logging
import os
import shutil
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import dagster as dg
import pyarrow as pa

from metacan_pipeline.definitions import build_resources, materialize_in_process
from metacan_pipeline.frame.entities import EntityLists
from metacan_pipeline.frame.routes import AdmissionRule, frame_row
from metacan_pipeline.openalex.reader import Record
from metacan_pipeline.openalex.works import work_row
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.student.checks import PREDICTION_CHECKS
from metacan_pipeline.student.holdout import venue_held_out, venue_key
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.teachers.assets import imported_labels, teacher_agreement
from metacan_pipeline.teachers.core.registry import TeacherSpec
from metacan_pipeline.vocab import CATEGORICAL_TARGETS, PREDICTION_STATUS, SCORE_ONLY_IMMATURE

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("METACAN_SHARED_DIR", REPO.parent / "shared"))
OPENALEX = SHARED / "data" / "openalex"
#: 1,054 more real work records in shapes ../openalex lacks (its SOURCES.md): 2022 schema, a tar.gz, .txt JSON Lines, ...
OPENALEX_MORE = SHARED / "data" / "openalex_more"

# A small real input: the Canadian funder records, the current-schema Canadian works, one work seen in
# several versions and a page with an HTML title. Enough for every route the data supports.
SMALL_INPUT_FILES = (
    "choxos__MetaCan__funder_CIHR_F4320334506.json",
    "choxos__MetaCan__funder_NSERC_F4320334593.json",
    "choxos__MetaCan__funder_SSHRC_F4320334617.json",
    "choxos__MetaCan__funder_CFI_F4320319952.json",
    "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json",
    "choxos__MetaCan__works_ca_reproducibility_3406695ce49cc852.json",
    "Mearman__Academic-Explorer__work_W2741809807.json",
    "rkrug__openalexPro__fixture_keypaper_page_1.json",
)


class LoopbackOpenAlex:
    """A real HTTP server on loopback answering OpenAlex list pages: ``answer(path, query)`` gives the
    ``results`` of one page (``query``: the request's parameters, one value each); every page is the
    last one (``next_cursor`` null) and costs $0.0001. ``hits`` holds the query of every request."""

    def __init__(self, answer: Callable[[str, dict[str, str]], list[dict]]) -> None:
        self.hits: list[dict[str, str]] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                url = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                hits.append(q)
                results = answer(url.path, q)
                body = json.dumps(
                    {"meta": {"count": len(results), "next_cursor": None, "cost_usd": 0.0001}, "results": results}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def shutdown(self) -> None:
        self.server.shutdown()


LME4_ABSTRACT = (
    "Maximum likelihood or restricted maximum likelihood (REML) estimates of the parameters in linear mixed-effects "
    "models can be determined using the lmer function in the lme4 package for R. As for most model-fitting functions "
    "in R, the model is described in an lmer call by a formula, in this case including both fixed- and random-effects "
    "terms. The formula and data together determine a numerical representation of the model from which the profiled "
    "deviance or the profiled REML criterion can be evaluated as a function of some of the model parameters. The "
    "appropriate criterion is optimized, using one of the constrained optimization functions in R, to provide the "
    "parameter estimates. We describe the structure of the model, the steps in evaluating the profiled deviance or "
    "REML criterion, and the structure of classes or types that represents such a model. Sufficient detail is "
    "included to allow specialization of these structures by users who wish to write functions to fit specialized "
    "linear mixed models, such as models incorporating pedigrees or smoothing splines, that are not easily "
    "expressible in the formula language used by lmer."
)

FUNDER_FILES = (
    "choxos__MetaCan__funder_CIHR_F4320334506.json",
    "choxos__MetaCan__funder_NSERC_F4320334593.json",
    "choxos__MetaCan__funder_SSHRC_F4320334617.json",
    "choxos__MetaCan__funder_CFI_F4320319952.json",
)
LME4_ID = "W1951724000"  # funded by NSERC (ca_fund) and with a Canadian author: choxos works_funders_ca
REPRO_ID = "W2997681568"  # choxos works_ca_reproducibility


def is_canadian(w: dict) -> bool:
    """A work the frame must admit on its own: a Canadian author country, a title, a year in 2000-2025."""
    return (
        any("CA" in (a.get("countries") or []) for a in w.get("authorships") or [])
        and isinstance(w.get("title"), str)
        and bool(w["title"].strip())
        and 2000 <= (w.get("publication_year") or 0) <= 2025
    )


def json_lines(records: list) -> bytes:
    """JSON Lines; a ``str`` item is written as the raw line (a bad line, or ``""`` for a blank line)."""
    return b"".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)).encode() + b"\n" for r in records)


def write_part(root: Path, date: str, n: int, records: list) -> str:
    rel = f"data/works/updated_date={date}/part_{n:03d}.gz"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(gzip.compress(json_lines(records), compresslevel=1, mtime=0))
    return rel


def write_manifest(root: Path, counts: dict[str, int], sizes: dict[str, int] | None = None) -> None:
    """``data/works/manifest`` as OpenAlex writes it (Redshift-style JSON: url, content_length, record_count);
    ``sizes`` gives the content_length of parts cut after the manifest was written (default: the file's size)."""
    sizes = sizes or {}
    entries = [
        {
            "url": f"s3://openalex/{rel}",
            "meta": {"content_length": sizes.get(rel, (root / rel).stat().st_size), "record_count": n},
        }
        for rel, n in counts.items()
    ]
    (root / "data" / "works" / "manifest").write_text(json.dumps({"entries": entries}, indent=2))


def copy_funders(openalex_dir: Path, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in FUNDER_FILES:
        shutil.copy(openalex_dir / name, root / name)


def complete_lines(data: bytes) -> int:
    """How many whole lines the readable prefix of a (cut) gzip stream holds, decoded independently of the reader."""
    return zlib.decompressobj(wbits=31).decompress(data).count(b"\n")


def build_frame(data: Path, inp: Path, instance: dg.DagsterInstance | None = None):
    instance = instance or dg.DagsterInstance.ephemeral()
    return instance, materialize_in_process(instance, build_resources(str(data), str(inp)), through="frame")


def node_metadata(result, node: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}


def check_evaluation(result, name: str):
    return next(e for e in result.get_asset_check_evaluations() if e.check_name == name)


def root_error(result) -> str:
    """The innermost error message of the first failed step (what the operator reads)."""
    for e in result.all_events:
        if e.is_step_failure:
            err = e.event_specific_data.error
            while err.cause is not None:
                err = err.cause
            return f"{err.cls_name}: {err.message}"
    return ""


def labels(storage, teacher):
    return storage.read_table(f"direct_labels_{teacher}").to_pylist()


def write_labels(storage, teacher, rows):
    storage.write_table(f"direct_labels_{teacher}", pa.Table.from_pylist(rows, schema=LABELS_SCHEMA))


def move_holdout_works(storage, n=3) -> list[str]:
    """Give ``n`` frozen-holdout works a venue the holdout rule does not hold out (OpenAlex re-assigns a
    source, or a work without a venue gets one), and add a new gemma label so the student retrains."""
    held = sorted(r[0] for r in sql(storage, "SELECT work_id FROM student_holdout"))
    free = next(
        f"https://openalex.org/S{k}" for k in range(9000, 10000) if not venue_held_out(f"https://openalex.org/S{k}")
    )
    moved = held[:n]
    frame = storage.read_table("frame").to_pylist()
    for r in frame:
        if r["id"] in moved:
            r["venue_id"] = free
    storage.write_table("frame", pa.Table.from_pylist(frame))
    g = labels(storage, "gemma")
    g[1]["label_id"] = "relabelled"
    write_labels(storage, "gemma", g)
    return moved


RUN_LOG = logging.getLogger("break")

PILOT = SHARED / "data" / "metacan_pilot"

GOOD_LABEL = {
    "id": "W1",
    "categories": ["metaresearch"],
    "domain": "reporting",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": True,
    "confidence": "high",
    "reason": "Audits reporting of trials.",
}


def materialize(tmp_path: Path, config: dict | None = None) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [imported_labels, teacher_agreement],
        resources={"storage": MetacanStorage(data_dir=str(tmp_path / "data"))},
        run_config={"ops": {"imported_labels": {"config": config or {}}}},
        instance=dg.DagsterInstance.ephemeral(),
    )


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def failure_messages(result) -> list[str]:
    return [e.event_specific_data.error.message for e in result.all_events if e.is_step_failure]


def canadian_ids(works: dict[str, dict]) -> list[str]:
    return sorted(k for k, w in works.items() if is_canadian(w))


XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ENTITIES = EntityLists({}, {}, {}, {"funder": "f", "source": "s", "institution": "i"})


def real_frame_row(openalex_dir, **overrides):
    data = json.loads((openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json").read_text())[
        "payload"
    ]["results"][0]
    data = {**data, **overrides}
    row, why = frame_row(
        work_row(
            Record(data, "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json", "payload.results[0]", None, "W")
        ),
        ENTITIES,
        AdmissionRule(),
    )
    assert why == "admitted"
    row["frame_build_id"] = "test-run"
    return row


def label_row(wid, teacher, categories, status="labelled"):
    return {
        "work_id": wid,
        "teacher": teacher,
        "model": "m",
        "prompt_version": "v1",
        "record_view": "title_only",
        "view_hash": "h",
        "status": status,
        "categories": categories,
        "domain": None,
        "study_design": "observational",
        "genre": "empirical",
        "about_ca_system": False,
        "about_ca_topic": False,
        "confidence": "low",
        "reason": f"because {XSS}",
        "error": None,
        "attempts": 1,
        "call_id": "c1",
        "label_id": "l1",
        "run_id": "r",
        "source": "teacher_call",
        "created_at": None,
    }


def prediction_row(wid):
    row = {
        "id": wid,
        "model_version": "metacan-v0-hybrid-000000000000",
        "candidate_categories": [],
        "consensus_categories": [],
        "category_scores_codex": [0.1] * 9,
        "category_scores_gemma": [0.2] * 9,
        "teacher_disagreement_score": 0.9,
        "threshold_uncertainty_score": 0.0,
        "prediction_status": PREDICTION_STATUS,
        "gemma_label_status": "labelled",
    }
    for t in ("about_ca_system", "about_ca_topic"):
        row.update({f"{t}_candidate": False, f"{t}_consensus": False, f"{t}_score_codex": 0.1, f"{t}_score_gemma": 0.1})
    for t, classes in CATEGORICAL_TARGETS.items():
        row.update(
            {
                f"{t}_scores_codex": [1 / len(classes)] * len(classes),
                f"{t}_scores_gemma": [1 / len(classes)] * len(classes),
                f"{t}_codex": None,
                f"{t}_gemma": None,
                f"{t}_candidate": None,
                f"{t}_consensus": None,
            }
        )
    return row


def machine_row(wid):
    return {
        "id": wid,
        "score_gemma": 0.3,
        "score_codex": 0.1,
        "score_spread": 0.2,
        "validation_status": SCORE_ONLY_IMMATURE,
        "provisional": True,
        "baseline": True,
        "maturity_gate_passed": False,
        "rounds_run": 1,
        "arm_status": "x",
        "note": "Scores rank; they never assert a category.",
    }


CTX = {"n_codex_labels": 0, "gated_heads": 0, "total_heads": 14}

N_WORKS, N_VENUES = 480, 47  # 47: prime, so every venue mixes positive and negative titles
POS_TITLES = [
    "Meta-research audit of reporting quality in {} trials",
    "Reproducibility of published {} studies: a meta-research survey",
    "Research integrity and peer review in {} journals",
]
NEG_TITLES = [
    "Soil nitrogen cycling in {} boreal forests",
    "Catalytic oxidation of {} alcohols",
    "Ice sheet dynamics near {} glaciers",
]
WORDS = ["cardiology", "oncology", "ecology", "physics", "nursing", "surgery", "economics", "geology"]


def student_frame_rows():
    rows = []
    for i in range(N_WORKS):
        pos = i % 4 == 0
        title = (POS_TITLES if pos else NEG_TITLES)[i % 3].format(WORDS[i % len(WORDS)])
        rows.append(
            {
                "id": f"W{100000 + i}",
                "title_text": title,
                "venue_name": f"Journal {i % N_VENUES}",
                "venue_id": f"https://openalex.org/S{500 + i % N_VENUES}",
                "topic": "Topic " + WORDS[(i // 3) % 8],
                "field": "Medicine" if i % 2 else "Earth Sciences",
                "type": "article",
                "language": "en",
            }
        )
    return rows


def student_label(teacher: str, wid: str, title: str, flip: bool = False) -> dict:
    meta = ("meta-research" in title.lower() or "integrity" in title.lower()) != flip
    label_id = hashlib.sha256(f"{teacher}:{wid}:{flip}".encode()).hexdigest()[
        :32
    ]  # deterministic: sentinels hash the labels
    return {
        "label_id": label_id,
        "work_id": wid,
        "teacher": teacher,
        "model": "m",
        "prompt_version": "v2",
        "prompt_sha": "x",
        "record_view": "title_only",
        "view_hash": "h",
        "status": "labelled",
        "categories": ["metaresearch"] + (["research_integrity"] if "integrity" in title.lower() else [])
        if meta
        else [],
        "domain": "reproducibility" if meta else None,
        "study_design": "observational" if meta else "bench_or_experimental",
        "genre": "empirical" if int(wid[1:]) % 3 else "review",
        "about_ca_system": False,
        "about_ca_topic": int(wid[1:]) % 5 == 0,
        "confidence": "high",
        "reason": "synthetic",
        "error": None,
        "attempts": 1,
        "call_id": "c",
        "run_id": "r",
        "source": "teacher_call",
        "source_ref": None,
        "created_at": dt.datetime(2026, 11, 30),
    }


def write_inputs(
    storage: MetacanStorage, flip_holdout: bool = False, in_sample=lambda i, held: i % 2 == 0
) -> list[dict]:
    """Frame, sample design (weight 2; by default every other work in the sample), gemma labels on every
    work and codex labels on the sample. ``in_sample(index, held_out)`` chooses the sample."""
    frame = student_frame_rows()
    storage.write_table("frame", pa.Table.from_pylist(frame))
    held = {r["id"] for r in frame if venue_held_out(venue_key(r["id"], r["venue_id"]))}
    sample = [in_sample(i, r["id"] in held) for i, r in enumerate(frame)]
    storage.write_table(
        "sample_design",
        pa.Table.from_pylist(
            [{"id": r["id"], "in_sample": sample[i], "design_weight": 2.0} for i, r in enumerate(frame)]
        ),
    )
    gemma = [student_label("gemma", r["id"], r["title_text"], flip_holdout and r["id"] in held) for r in frame]
    codex = [
        student_label("codex", r["id"], r["title_text"], flip_holdout and r["id"] in held)
        for i, r in enumerate(frame)
        if sample[i]
    ]
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(gemma, schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    record_qualification(storage, "gemma")
    record_qualification(storage, "codex")
    return frame


def record_qualification(storage: MetacanStorage, teacher: str, agree: bool = True) -> None:
    """Store a qualification result for a registry teacher whose labels a test writes directly (no calls):
    :func:`~metacan_pipeline.teachers.qualification.judge` on the real frame1k reference set of a teacher
    that gives every reference work its reference label (``agree``: qualified, kappa 1) or calls every
    work not meta-research (not qualified, kappa 0)."""
    from metacan_pipeline.teachers.core.registry import load_registry
    from metacan_pipeline.teachers.qualification import (
        draw_reference_set,
        judge,
        load_qualification,
        reference_sha,
        store_result,
    )

    cfg = load_qualification()
    works = draw_reference_set(PILOT, cfg, set())
    result = judge(works, {w.row["id"]: w.reference if agree else 0 for w in works}, cfg)
    store_result(storage, load_registry()[teacher], cfg, result, "test", reference_sha(works))


def run_student(storage: MetacanStorage, *assets, raise_on_error: bool = True) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [*assets, *PREDICTION_CHECKS],
        resources={"storage": storage},
        raise_on_error=raise_on_error,
        selection=dg.AssetSelection.assets(*assets),
    )


def sql(storage: MetacanStorage, query: str) -> list[tuple]:
    with storage.connect() as con:
        return con.execute(query).fetchall()


# Frame rows (the columns the student reads) of works of three subjects.
REPRO = {
    "id": "W1",
    "title_text": "Reproducibility of published psychology experiments",
    "venue_name": "Psychological Science",
    "type": "article",
    "language": "en",
}
SOIL = {
    "id": "W4",
    "title_text": "Nitrogen cycling in boreal forest soils",
    "venue_name": "Soil Biology and Biochemistry",
    "type": "article",
    "language": "en",
}

GOOD_REPLY = {
    "id": "W1",
    "categories": ["metaresearch", "metaresearch", "open_science"],
    "domain": "reproducibility",
    "study_design": "observational",
    "genre": "empirical",
    "about_ca_system": False,
    "about_ca_topic": True,
    "confidence": "medium",
    "reason": "x" * 500,
}


def frame_rows(n: int, faults: dict[int, str] | None = None) -> list[dict]:
    faults = faults or {}
    return [
        {
            "id": f"W{1000 + i}",
            "title_text": f"Study {i} of research practice" + (f" FAULT:{faults[i]}" if i in faults else ""),
            "publication_year": 2020,
            "language": "en",
            "type": "article",
            "venue_name": None,
            "topic": None,
            "field": None,
            "in_sampling_frame": True,
            "sampling_frame_exclusion": None,
            "has_abstract": False,
        }
        for i in range(n)
    ]


def spec_for(url: str, **kw) -> TeacherSpec:
    base = {
        "name": "stub",
        "base_url": url,
        "model": "stub-teacher",
        "works_per_call": 4,
        "concurrency": 4,
        "structured_output": "json_schema",
        "system_role": "yes",
        "max_transport_attempts": 2,
        "price_input_per_1k": 0.001,
        "price_output_per_1k": 0.002,
    }
    return TeacherSpec(**{**base, **kw})


#: Values the site world cycles through (issue 15): every filter of a cohort meets several values.
SITE_LANGUAGES = ("en", "fr", "en", "de")
SITE_TYPES = ("article", "review", "article", "preprint", "book-chapter")
SITE_FIELDS = ("Medicine", "Social Sciences", "Computer Science")
SITE_INSTITUTIONS = ("McGill University", "University of Toronto", "Université Laval", "Dalhousie University")
SITE_FUNDERS = ("Canadian Institutes of Health Research", "NSERC", "SSHRC")
SITE_TITLES = (
    "Reproducibility of {} trials: a meta-research audit",
    "Peer review and research integrity in {} journals",
    "Bibliometric analysis of {} citations",
    "Soil nitrogen cycling in {} boreal forests",
    "Études de reproductibilité en {} au Québec",
)
SITE_WORDS = ("cardiology", "oncology", "ecology", "physics", "nursing", "surgery", "economics")


def site_world(storage: MetacanStorage, openalex_dir: Path, n: int = 60) -> list[dict]:
    """Write the warehouse tables ``work_records`` reads for ``n`` frame works with varied years, languages,
    types, fields, venues, routes, institutions, funders, keywords, direct labels (gemma on every third work
    but one failed, codex on every fifth), predictions (candidate on every fourth work, consensus on every
    eighth) and machine scores; the first work's title and keywords carry injection and XSS payloads.
    Returns the frame rows."""
    from metacan_pipeline.tables.frame import FRAME_SCHEMA
    from metacan_pipeline.tables.student import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA
    from metacan_pipeline.vocab import CATEGORIES

    base = real_frame_row(openalex_dir)
    frame, gemma, codex, preds, machine = [], [], [], [], []
    for i in range(n):
        wid = f"W{7000 + i}"
        ca_aff = i % 3 != 1
        title = SITE_TITLES[i % len(SITE_TITLES)].format(SITE_WORDS[i % len(SITE_WORDS)])
        row = {
            **base,
            "id": wid,
            "title_text": ("'; DROP TABLE works; -- " + XSS) if i == 0 else title,
            "publication_year": 2005 + (i * 7) % 20,
            "language": SITE_LANGUAGES[i % len(SITE_LANGUAGES)],
            "type": SITE_TYPES[i % len(SITE_TYPES)],
            "venue_name": f"Journal {i % 6}",
            "field": SITE_FIELDS[i % len(SITE_FIELDS)],
            "topic": f"Topic {i % 9}",
            "cited_by_count": (i * 37) % 101,
            "ca_aff": ca_aff,
            "ca_fund": i % 4 == 0,
            "ca_venue": i % 5 == 0,
            "about_ca": i % 2 == 0,
            "invisible_to_affiliation_only": not ca_aff,
            "has_abstract": i % 3 == 0,
            "is_retracted": i % 17 == 3,
            "ca_institutions": [SITE_INSTITUTIONS[i % 4], SITE_INSTITUTIONS[(i + 1) % 4]] if i % 5 else [],
            "funder_names": [SITE_FUNDERS[i % 3]] if i % 2 == 0 else [],
            "keywords": (["' OR 1=1 --", "peer review"] if i == 0 else [f"kw{i % 5}", SITE_WORDS[i % 7]]),
        }
        frame.append(row)
        if i % 3 == 0:
            cats = [CATEGORIES[i % 4]] if i % 6 == 0 else []
            gemma.append(label_row(wid, "gemma", cats, status="failed" if i == 9 else "labelled"))
        if i % 5 == 0:
            codex.append(
                {**label_row(wid, "codex", [CATEGORIES[i % 4]] if i % 10 == 0 else []), "record_view": "title_abstract"}
            )
        pred = prediction_row(wid)
        pred["candidate_categories"] = [CATEGORIES[i % 3]] if i % 4 == 0 else []
        pred["consensus_categories"] = [CATEGORIES[i % 3]] if i % 8 == 0 else []
        pred["category_scores_codex"] = [round((i % 10) / 10 + k / 100, 3) for k in range(9)]
        if i % 11 != 10:  # every eleventh work has no prediction at all
            preds.append(pred)
        m = machine_row(wid)
        m["score_gemma"], m["score_codex"] = round((i % 20) / 20, 2), round(((i * 3) % 20) / 20, 2)
        m["score_spread"] = abs(m["score_gemma"] - m["score_codex"])
        machine.append(m)
    for label in gemma:
        if label["status"] == "failed":
            label.update(categories=None, study_design=None, genre=None, error="reply invalid")
    storage.write_table("frame", pa.Table.from_pylist(frame, schema=FRAME_SCHEMA))
    storage.write_table("direct_labels_gemma", pa.Table.from_pylist(gemma, schema=LABELS_SCHEMA))
    storage.write_table("direct_labels_codex", pa.Table.from_pylist(codex, schema=LABELS_SCHEMA))
    storage.write_table("predictions", pa.Table.from_pylist(preds, schema=PRED_SCHEMA))
    storage.write_table("student_heads", pa.Table.from_pylist([], schema=HEADS_SCHEMA))
    storage.write_table("machine_scores", pa.Table.from_pylist(machine, schema=MACHINE_SCHEMA))
    return frame


def build_site(storage: MetacanStorage) -> dg.ExecuteInProcessResult:
    """Materialize ``work_records`` (with its blocking check) and ``site_database`` over what ``storage`` holds."""
    from metacan_pipeline.publish.assets import work_records
    from metacan_pipeline.publish.checks import records_may_ship
    from metacan_pipeline.site.assets import site_database

    return dg.materialize(
        [work_records, records_may_ship, site_database],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def lock_audit_sample(storage: MetacanStorage, frame: list[dict], drawn: list[str], run_id: str = "run-audit") -> str:
    """Record a small audit protocol (``record_protocol``, coder instructions v1) as the current one and write its
    ``audit_sample``: one row per frame work, ``drawn`` in the sample (pi 0.5) and the rest not (pi 0.5, not drawn).
    What ``audit_protocol`` + ``audit_sample`` leave for the coding step, without a student run. Returns its id."""
    from metacan_pipeline.audit.protocol.locked import (
        STRATA,
        AuditProtocol,
        GateThresholds,
        HeadUnderTest,
        StratumPlan,
        load_instructions,
        record_protocol,
    )
    from metacan_pipeline.tables.audit import AUDIT_SAMPLE_SCHEMA

    instructions = load_instructions("v1")
    protocol = AuditProtocol(
        classifier_version="metacan-v0-hybrid-0a1b2c3d4e5f",
        decision_rule="consensus",
        heads=(HeadUnderTest("metaresearch", False, "codex positives 2 < 20", 0.1, 4, None, "none"),),
        gate=GateThresholds(),
        strata=tuple(StratumPlan(name, 0.5, 1, 0.1) for name in STRATA),
        near_band=0.5,
        salt="metacan-audit-test",
        trained_works="own_stratum",
        frame_build_id="frame-5e6f7a8b9c0d",
        instructions_version=instructions.version,
        instructions_sha256=instructions.sha256,
    )
    record_protocol(storage, protocol, run_id)
    rows = [
        {
            "protocol_id": protocol.protocol_id,
            "id": f["id"],
            "stratum": "negative_far",
            "stratum_size": len(frame),
            "stratum_sample_size": len(drawn),
            "hash_rank": i,
            "selection_probability": 0.5,
            "design_weight": 2.0,
            "in_sample": f["id"] in drawn,
            "trained_on": False,
            "language": f.get("language"),
            "has_abstract": bool(f.get("has_abstract")),
            "route_key": f.get("route_key") or "ca_aff",
        }
        for i, f in enumerate(frame)
    ]
    storage.write_table("audit_sample", pa.Table.from_pylist(rows, schema=AUDIT_SAMPLE_SCHEMA))
    return protocol.protocol_id


def audit_draw(states: list[dict], protocol) -> list[dict]:
    """The ``audit_sample`` rows :func:`metacan_pipeline.audit.protocol.design.draw_audit_sample` draws under ``protocol`` from
    machine-state rows (dicts of the columns of the ``machine_state`` view: id, language, has_abstract, route_key,
    trained_on, any_consensus, any_candidate, any_near), in its order."""
    import duckdb

    from metacan_pipeline.audit.protocol.design import draw_audit_sample

    with duckdb.connect() as con:
        con.register("machine_state", pa.Table.from_pylist(states))
        return [row for batch in draw_audit_sample(con, protocol) for row in batch.to_pylist()]


def audit_sizes(sample: list[dict]) -> dict[str, tuple[int, int]]:
    """``{stratum: (N_h, n_h)}`` of ``audit_sample`` rows."""
    return {r["stratum"]: (r["stratum_size"], r["stratum_sample_size"]) for r in sample}
