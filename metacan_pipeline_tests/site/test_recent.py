"""The rolling layer in view: ``/recent``, ``/fr/recent`` and ``/api/v1/recent`` over a planted store: a release cut
over the 60-work site world, then four works that arrived after it through two API refresh windows and a snapshot
folder, and the API archive's windows (two complete, one stopped)."""

from __future__ import annotations

import html
import json
import re

import dagster as dg
import pyarrow as pa
import pytest
from starlette.testclient import TestClient

from metacan_pipeline.publish.assets import work_records
from metacan_pipeline.publish.checks import records_may_ship
from metacan_pipeline.release.assets import ReleaseConfig, release
from metacan_pipeline.site.web.app import create_app
from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.tables.frame import FRAME_SCHEMA
from metacan_pipeline.tables.student import PRED_SCHEMA
from metacan_pipeline_tests.builders.site import build_site, site_world
from metacan_pipeline_tests.builders.student import prediction_row

WEEKLY = "window=2026-11-30_2026-12-07"
DAILY = "window=published-2026-11-07_2026-12-07"
STOPPED = "window=2026-12-07_2026-12-08"
#: id -> (source file, updated_date, classifier calls): the works that arrived after the release
ARRIVED = {
    "W8001": (f"api/{WEEKLY}/pages/funders/a1.json.gz", "2026-12-03T10:00:00", ["metaresearch"]),
    "W8002": (f"api/{WEEKLY}/pages/countries/b2.json.gz", "2026-12-05T10:00:00", ["metaresearch", "sts"]),
    "W8003": (f"api/{DAILY}/pages/countries/c3.json.gz", "2026-12-06T10:00:00", None),  # no prediction
    "W8004": ("data/works/updated_date=2026-12-01/part_000.gz", "2026-12-01T10:00:00", ["sts"]),
}


def _window(root, name: str, works: int | None) -> None:
    folder = root / name
    (folder / "pages").mkdir(parents=True)
    if works is not None:
        frm, to = name.removeprefix("window=").removeprefix("published-").split("_")
        by = "publication_date" if "published-" in name else "updated_date"
        marker = {"from": frm, "to": to, "by": by, "completed_at": f"{to}T09:00:00+00:00", "works": works}
        (folder / "window.json").write_text(json.dumps(marker | {"pages": 3, "calls_made": 3, "cost_usd": 0.0}))


@pytest.fixture(scope="module")
def rolling(tmp_path_factory, openalex_dir):
    storage = MetacanStorage(data_dir=str(tmp_path_factory.mktemp("recent") / "data"))
    frame = site_world(storage, openalex_dir)
    cut = dg.materialize(
        [work_records, records_may_ship, release],
        resources={"storage": storage},
        run_config=dg.RunConfig({"release": ReleaseConfig(cut=True, citation_authors=["MetaCan research group"])}),
        instance=dg.DagsterInstance.ephemeral(),
    )
    version = cut.asset_materializations_for_node("release")[0].metadata["release_version"].value
    new = [
        {**frame[1], "id": wid, "source_file": src, "updated_date": upd, "title_text": f"Arrived {wid}"}
        for wid, (src, upd, _) in ARRIVED.items()
    ]
    storage.write_table("frame", pa.Table.from_pylist([*frame, *new], schema=FRAME_SCHEMA))
    preds = storage.read_table("predictions").to_pylist()
    preds += [
        prediction_row(wid) | {"candidate_categories": cats, "consensus_categories": cats[:1]}
        for wid, (_, _, cats) in ARRIVED.items()
        if cats is not None
    ]
    storage.write_table("predictions", pa.Table.from_pylist(preds, schema=PRED_SCHEMA))
    archive = storage.root / "openalex_api"
    _window(archive, WEEKLY, 41)
    _window(archive, DAILY, 17)
    _window(archive, STOPPED, None)
    assert build_site(storage).success
    with TestClient(create_app(storage.root, rate_limit="off")) as client:
        yield storage, version, client


def test_recent_lists_exactly_the_rolling_works_with_their_categories_withheld(rolling):
    storage, version, client = rolling
    records = {r["id"]: json.loads(r["record_json"]) for r in storage.read_table("work_records").to_pylist()}
    assert {w for w, r in records.items() if r["layer"] == "rolling"} == set(ARRIVED)  # the planted store's
    body = client.get("/api/v1/recent").json()
    assert body["frozen_release"] == version and body["count"] == 4 and body["pages"] == 1
    works = {w["id"]: w for w in body["works"]}
    assert [w["id"] for w in body["works"]] == ["W8003", "W8002", "W8001", "W8004"]  # newest updated_date first
    assert {w: works[w]["arrived_in"] for w in works} == {
        "W8001": WEEKLY,
        "W8002": WEEKLY,
        "W8003": DAILY,
        "W8004": "updated_date=2026-12-01",
    }
    # SPEC section 8: no head passed human validation, so no classifier category shows on any of them
    for wid in ("W8001", "W8002", "W8004"):
        c = works[wid]["classifier"]
        assert c["candidate_categories"] == [] and c["consensus_categories"] == [] and c["withheld"] is True
        assert records[wid]["prediction"]["candidate_categories"] == []
    assert works["W8003"]["classifier"]["model_version"] is None and works["W8003"]["classifier"]["withheld"] is False
    # the sync status: the last complete window, the works each window added, the window that stopped
    sync = body["sync"]
    assert [w["name"] for w in sync["windows"]] == [STOPPED, WEEKLY, DAILY]
    assert sync["last_window"]["name"] == WEEKLY and sync["last_window"]["works"] == 41
    assert (sync["last_window"]["from"], sync["last_window"]["to"]) == ("2026-11-30", "2026-12-07")
    assert {w["name"]: w["added"] for w in sync["windows"]} == {STOPPED: 0, WEEKLY: 2, DAILY: 1}
    assert [w["name"] for w in sync["failures"]] == [STOPPED] and sync["added_outside_windows"] == 1
    assert sync["windows_total"] == 3
    assert {w["name"]: w["by"] for w in sync["windows"]}[DAILY] == "publication_date"


def test_recent_page_in_english_and_french(rolling):
    _, version, client = rolling
    en = client.get("/recent")
    assert en.status_code == 200
    listed = re.findall(r'class="recent-work" data-id="(W\d+)"', en.text)
    assert listed == ["W8003", "W8002", "W8001", "W8004"]
    assert f"after the newest frozen release, {version}." in en.text
    assert "Consensus prediction" not in en.text and "Candidate prediction" not in en.text
    assert en.text.count("withheld until human validation.") == 3
    assert "4 works in the rolling layer" in en.text and f"<code>{STOPPED}</code>" in en.text
    assert f"Last complete window: {WEEKLY}, by updated date from 2026-11-30 to 2026-12-07" in en.text
    assert "41 works harvested, 2 added to this release" in en.text
    fr = client.get("/fr/recent")
    assert fr.status_code == 200 and 'lang="fr"' in fr.text
    assert re.findall(r'class="recent-work" data-id="(W\d+)"', fr.text) == listed
    text = html.unescape(fr.text)
    assert "4 travaux dans la couche courante" in text
    assert text.count("retenues jusqu'à la validation humaine.") == 3
    assert f"Dernière fenêtre complète : {WEEKLY}, par date de mise à jour du 2026-11-30 au 2026-12-07" in text
    assert "withheld until" not in text and "Sync status" not in text
    assert client.get("/recent?page=0").status_code == 400 and client.get("/recent?x=1").status_code == 400


def test_the_recent_api_is_not_answered_304_once_a_window_changed(rolling, monkeypatch):
    from metacan_pipeline.site.web import recent

    storage, _, client = rolling
    first = client.get("/api/v1/recent")
    tag = first.headers["etag"]
    assert client.get("/api/v1/recent", headers={"If-None-Match": tag}).status_code == 304
    _window(storage.root / "openalex_api", "window=2026-12-08_2026-12-08", 5)
    again = client.get("/api/v1/recent", headers={"If-None-Match": tag})
    assert again.status_code == 200 and again.json()["sync"]["last_window"]["name"] == "window=2026-12-08_2026-12-08"
    # a long archive: the newest windows are listed, and the page says how many there are
    monkeypatch.setattr(recent, "SHOWN_WINDOWS", 2)
    sync = client.get("/api/v1/recent").json()["sync"]
    assert sync["windows_total"] == 4 and [w["name"] for w in sync["windows"]] == [
        "window=2026-12-08_2026-12-08",
        STOPPED,
    ]
    assert [w["name"] for w in sync["failures"]] == [STOPPED]
    assert "The 2 newest of 4 windows." in client.get("/recent").text
    assert "Les 2 fenêtres les plus récentes sur 4." in client.get("/fr/recent").text
