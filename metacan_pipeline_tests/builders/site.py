"""Site builders for tests: the site world (the warehouse tables `work_records` reads) and a release database built from it."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow as pa

from metacan_pipeline.publish.assets import work_records
from metacan_pipeline.publish.checks import records_in_one_release_layer, records_may_ship
from metacan_pipeline.site.assets import site_database
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.student import HEADS_SCHEMA, MACHINE_SCHEMA, PRED_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline.vocab import CATEGORIES
from metacan_pipeline_tests.builders.common import REPO, XSS
from metacan_pipeline_tests.builders.frame import real_frame_row
from metacan_pipeline_tests.builders.student import machine_row, prediction_row
from metacan_pipeline_tests.builders.teachers import label_row

CTX = {"n_codex_labels": 0, "gated_heads": 0, "total_heads": 14}


#: Values the site world cycles through: every filter of a cohort meets several values.
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


def site_venue(i: int) -> str:
    """The venue of the site world's ``i``-th work: ``Journal <i % 6>``, but ``Revue de Montréal`` (an accent) for
    ``i % 6 == 5`` and ``JOURNAL 1`` (a second spelling of ``Journal 1``) for ``i % 12 == 1``, so that case- and
    accent-insensitive filters have values to fold together."""
    if i % 6 == 5:
        return "Revue de Montréal"
    return "JOURNAL 1" if i % 12 == 1 else f"Journal {i % 6}"


def site_world(storage: MetacanStorage, openalex_dir: Path, n: int = 60) -> list[dict]:
    """Write the warehouse tables ``work_records`` reads for ``n`` frame works with varied years, languages,
    types, fields, venues, routes, institutions, funders, keywords, direct labels (gemma on every third work
    but one failed, codex on every fifth), predictions (candidate on every fourth work, consensus on every
    eighth; none on every eleventh; without any category score on works 3, 17, 31, 38, 45 and 59, as heads
    trained on one class give) and machine scores; W7059 is W7039 again (its title in capitals, the same year); the first work's title and keywords carry injection and XSS payloads.
    Returns the frame rows."""
    base = real_frame_row(openalex_dir)
    frame, gemma, codex, preds, machine = [], [], [], [], []
    for i in range(n):
        wid = f"W{7000 + i}"
        ca_aff = i % 3 != 1
        title = SITE_TITLES[i % len(SITE_TITLES)].format(SITE_WORDS[i % len(SITE_WORDS)])
        if i == 59:  # the same work as W7039 (same year), its title in capitals: one work under two OpenAlex ids
            title = SITE_TITLES[39 % len(SITE_TITLES)].format(SITE_WORDS[39 % len(SITE_WORDS)]).upper()
        row = {
            **base,
            "id": wid,
            "title_text": ("'; DROP TABLE works; -- " + XSS) if i == 0 else title,
            "publication_year": 2005 + (i * 7) % 20,
            "language": SITE_LANGUAGES[i % len(SITE_LANGUAGES)],
            "type": SITE_TYPES[i % len(SITE_TYPES)],
            "venue_name": site_venue(i),
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
        if i % 7 == 3 and i % 4 != 0:  # heads trained on one class: a prediction without any score (and no decision)
            pred["category_scores_codex"] = pred["category_scores_gemma"] = [None] * 9
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
    """Materialize ``work_records`` (with its blocking checks) and ``site_database`` over what ``storage`` holds."""
    return dg.materialize(
        [work_records, records_may_ship, records_in_one_release_layer, site_database],
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


#: ``python`` arguments that run the ``metacan`` command line of this checkout.
CLI = ("-c", "from metacan_pipeline.cli import app; app()")


@dataclass
class Served:
    """A ``metacan serve`` subprocess: its URL, and once it has stopped, everything it printed."""

    url: str
    output: str = ""


@contextmanager
def metacan_serve(env: dict, *args: str, ready: str = "/api/v1/") -> Iterator[Served]:
    """``metacan serve ARGS`` as a subprocess on a free loopback port with ``env``; yields once ``GET ready``
    answers 200 (the test fails, with the server's output, if it exits or has not answered within 60 s), and stops
    it after, filling ``output``. The server writes to a temporary file, never to a pipe nobody reads while it runs
    (a full pipe would stop the server at its next log line)."""
    import httpx
    import pytest

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, *CLI, "serve", *args, "--port", str(port)]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        served = Served(f"http://127.0.0.1:{port}")

        def printed() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        try:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"metacan serve exited with {proc.returncode}: {printed()[-2000:]}")
                try:
                    if httpx.get(served.url + ready, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"metacan serve did not answer {ready} with 200 within 60 s")
                time.sleep(0.2)
            yield served
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            served.output = printed()
