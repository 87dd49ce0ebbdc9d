"""Tests of metacan_pipeline.frame.api_refresh: the weekly API refresh through the real Dagster assets."""

import copy
import datetime as dt
import gzip
import json
import logging
import shutil

import dagster as dg
import duckdb
import pytest

from metacan_pipeline.definitions import all_partitions_run_tags, build_resources, defs
from metacan_pipeline.frame import api_refresh
from metacan_pipeline.openalex.windows import Window, next_window
from metacan_pipeline_tests.builders.openalex import LoopbackOpenAlex

KEY = "sk-test-SECRET-4242"
FUNDER_FILES = (
    "choxos__MetaCan__funder_CIHR_F4320334506.json",
    "choxos__MetaCan__funder_NSERC_F4320334593.json",
    "choxos__MetaCan__funder_SSHRC_F4320334617.json",
    "choxos__MetaCan__funder_CFI_F4320319952.json",
)
TODAY = dt.datetime.now(dt.UTC).date()


@pytest.fixture(autouse=True)
def _today_held_still(monkeypatch):
    """The refresh's today is the tests' TODAY, so a run across midnight (UTC) expects the same windows."""
    monkeypatch.setattr(api_refresh, "utc_today", lambda: TODAY)


def _day(offset: int) -> str:
    return (TODAY + dt.timedelta(days=offset)).isoformat()


class FakeOpenAlex(LoopbackOpenAlex):
    """``/works`` answers by (route of the filter, from_updated_date); one page per query, with a cost."""

    def __init__(self) -> None:
        self.served: dict[tuple[str, str], list[dict]] = {}

        def answer(path: str, q: dict[str, str]) -> list[dict]:
            parts = dict(p.split(":", 1) for p in q.get("filter", "").split(","))
            route = q.get("filter", "").split(":", 1)[0]
            return self.served.get((route, parts.get("from_updated_date", "")), []) if path == "/works" else []

        super().__init__(answer)


@pytest.fixture()
def api():
    fake = FakeOpenAlex()
    yield fake
    fake.shutdown()


@pytest.fixture()
def setup(tmp_path, openalex_dir, monkeypatch):
    """Entity lists only in the input folder (the frame's works all come from the API), entities built: its four
    funders, no shipped list, and no source or institution on purpose (so the refresh asks no venue query)."""
    monkeypatch.setenv("OPENALEX_API_KEY", KEY)
    monkeypatch.setenv("METACAN_ENTITY_LIST_FILE", "none")
    monkeypatch.setenv("METACAN_EMPTY_ENTITY_KINDS", "source,institution")
    inp = tmp_path / "openalex"
    inp.mkdir()
    for name in FUNDER_FILES:
        shutil.copy(openalex_dir / name, inp / name)
    resources = build_resources(str(tmp_path / "data"), str(inp))
    instance = dg.DagsterInstance.ephemeral()
    assert defs.resolve_job_def("frame_refresh").execute_in_process(instance=instance, resources=resources).success
    return instance, resources, tmp_path / "data"


def _refresh(instance, resources, base_url, **cfg):
    return defs.resolve_job_def("api_refresh").execute_in_process(
        instance=instance,
        resources=resources,
        raise_on_error=False,
        run_config={"ops": {"openalex_api_refresh": {"config": {"base_url": base_url, **cfg}}}},
    )


def _build(instance, resources):
    res = defs.resolve_job_def("frame_build").execute_in_process(
        instance=instance, resources=resources, raise_on_error=False, tags=all_partitions_run_tags(instance)
    )
    assert res.success
    return res


def _frame(data):
    with duckdb.connect(str(data / "metacan.duckdb"), read_only=True) as con:
        return con.execute("SELECT id, title_text, ca_aff, ca_fund FROM frame ORDER BY id").fetchall()


def _meta(result):
    mat = result.asset_materializations_for_node("openalex_api_refresh")[0]
    return {k: v.value for k, v in mat.metadata.items()}


def _works(openalex_dir):
    lme4 = json.loads((openalex_dir / "choxos__MetaCan__works_funders_ca_12f7c05bde955270.json").read_text())[
        "payload"
    ]["results"][0]
    repro = json.loads((openalex_dir / "choxos__MetaCan__works_ca_reproducibility_3406695ce49cc852.json").read_text())
    repro = repro.get("payload", repro)["results"][0]
    return lme4, repro


def _failure_message(result) -> str:
    return " ".join(str(e.event_specific_data.error.message) for e in result.all_events if e.is_step_failure)


@pytest.mark.slow
def test_weekly_windows_upsert_newest_and_drop_a_work_that_lost_its_route(setup, api, openalex_dir, caplog):
    caplog.set_level(logging.DEBUG)
    instance, resources, data = setup
    lme4, repro = _works(openalex_dir)
    v1 = dict(lme4, updated_date=_day(-25) + "T08:00:00.000000")
    v2 = dict(
        lme4,
        updated_date=_day(-2) + "T08:00:00.000000",
        title="Fitting Linear Mixed-Effects Models, revised",
        display_name="Fitting Linear Mixed-Effects Models, revised",
    )
    # the newest version lost every Canadian route (funders and awards gone, no CA author, no lexicon hit)
    v3 = dict(
        copy.deepcopy(v2),
        updated_date=_day(0) + "T00:30:00.000000",
        funders=[],
        awards=[],
        abstract_inverted_index=None,
        keywords=[],
    )
    for a in v3["authorships"]:
        a.update(countries=[], institutions=[])
    w1 = (_day(-30), _day(-23))
    api.served[("funders.id", w1[0])] = [v1]
    api.served[("authorships.countries", w1[0])] = [repro]

    # (a) the first window is harvested and merged
    r1 = _refresh(instance, resources, api.base_url, from_updated_date=w1[0], to_updated_date=w1[1])
    assert r1.success
    m1 = _meta(r1)
    assert (
        m1["window"] == f"window={w1[0]}_{w1[1]}" and m1["queries"] == 4 and m1["works"] == 2 and m1["calls_made"] == 4
    )
    assert all(
        h["api_key"] == KEY and f"from_updated_date:{w1[0]},to_updated_date:{w1[1]}" in h["filter"] for h in api.hits
    )
    marker = json.loads((data / "openalex_api" / m1["window"] / "window.json").read_text())
    assert marker["from"] == w1[0] and marker["to"] == w1[1] and marker["pages"] == 4 and marker["calls_made"] == 4
    assert f"window={w1[0]}_{w1[1]}" in instance.get_dynamic_partitions("openalex_partitions")
    _build(instance, resources)
    assert [(i, ca_aff, ca_fund) for i, _, ca_aff, ca_fund in _frame(data)] == [
        ("W1951724000", True, True),
        ("W2997681568", True, False),
    ]

    # (d) a re-run of a completed window buys nothing
    n = len(api.hits)
    again = _refresh(instance, resources, api.base_url, from_updated_date=w1[0], to_updated_date=w1[1])
    assert (
        again.success
        and len(api.hits) == n
        and _meta(again)["calls_made"] == 0
        and _meta(again)["pages_from_archive"] == 4
    )

    # (b) + (e) the default window runs from the last completed window's `to` to today; the newer version wins
    api.served[("funders.id", w1[1])] = [v2]
    r2 = _refresh(instance, resources, api.base_url)
    assert r2.success and _meta(r2)["window"] == f"window={w1[1]}_{_day(0)}"
    assert all(f"from_updated_date:{w1[1]},to_updated_date:{_day(0)}" in h["filter"] for h in api.hits[n:])
    _build(instance, resources)
    rows = _frame(data)
    assert [r[:2] for r in rows] == [
        ("W1951724000", "Fitting Linear Mixed-Effects Models, revised"),
        ("W2997681568", repro["title"]),
    ]

    # (c) a newer version without any Canadian route, in a later window, takes the work out of the frame
    api.served[("funders.id", _day(0))] = [v3]
    r3 = _refresh(instance, resources, api.base_url)
    assert r3.success and _meta(r3)["window"] == f"window={_day(0)}_{_day(0)}"
    b3 = _build(instance, resources)
    assert [r[0] for r in _frame(data)] == ["W2997681568"]
    outcomes = b3.asset_materializations_for_node("frame")[0].metadata["outcomes"].value
    assert "newest_version_has_no_route | 1" in outcomes

    # (g) the API key is in no archived file, no marker, no metadata, no event and no log line
    for f in (data / "openalex_api").rglob("*"):
        if f.is_file():
            raw = f.read_bytes()
            assert KEY.encode() not in (gzip.decompress(raw) if f.name.endswith(".gz") else raw), f
    for res in (r1, again, r2, r3):
        assert KEY not in repr(_meta(res))
        assert not [e for e in instance.all_logs(res.run_id) if KEY in repr(e)]
    assert "HTTP Request" in caplog.text and KEY not in caplog.text


def test_budget_exhaustion_stops_the_window_and_a_rerun_buys_only_the_missing_pages(setup, api, openalex_dir):
    instance, resources, data = setup
    lme4, repro = _works(openalex_dir)
    w = (_day(-7), _day(0))
    api.served[("funders.id", w[0])] = [lme4]
    api.served[("authorships.countries", w[0])] = [repro]
    failed = _refresh(instance, resources, api.base_url, from_updated_date=w[0], to_updated_date=w[1], max_calls=2)
    assert not failed.success
    msg = _failure_message(failed)
    folder = data / "openalex_api" / f"window={w[0]}_{w[1]}"
    assert f"window={w[0]}_{w[1]} is incomplete" in msg and "resume later at" in msg
    assert f"from_updated_date={w[0]} and to_updated_date={w[1]}" in msg and KEY not in msg
    assert not (folder / "window.json").exists() and len(list(folder.rglob("*.json.gz"))) == 2 and len(api.hits) == 2
    # the default window resumes the incomplete one; the day's ledger (shared, at the archive root) still counts 2 calls
    assert next_window(data / "openalex_api", TODAY)[0] == Window(*w)
    assert json.loads(next((data / "openalex_api").glob("budget-*.json")).read_text())["calls"] == 2
    done = _refresh(instance, resources, api.base_url, max_calls=100)
    m = _meta(done)
    assert (
        done.success
        and m["window"] == f"window={w[0]}_{w[1]}"
        and m["calls_made"] == 2
        and m["pages_from_archive"] == 2
    )
    assert len(api.hits) == 4 and len({h["filter"] for h in api.hits}) == 4  # no page bought twice
    marker = json.loads((folder / "window.json").read_text())
    assert marker["pages"] == 4 and marker["works"] == 2 and marker["cost_usd"] == pytest.approx(0.0004)
    _build(instance, resources)
    assert [r[0] for r in _frame(data)] == ["W1951724000", "W2997681568"]


def test_refresh_without_entity_lists_names_the_asset_to_materialize(tmp_path):
    resources = build_resources(str(tmp_path / "data"), str(tmp_path))
    res = _refresh(dg.DagsterInstance.ephemeral(), resources, "http://127.0.0.1:9")
    assert not res.success and "materialize the asset canadian_entities first" in _failure_message(res)


def test_the_daily_schedule_asks_for_the_publication_window_ending_on_its_day(monkeypatch):
    from zoneinfo import ZoneInfo

    schedule = defs.resolve_schedule_def("daily_publication_refresh")
    assert schedule.job_name == "api_refresh" and schedule.cron_schedule == "0 5 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED and "buys API calls" in schedule.description
    # 05:00 in Toronto on 2026-03-01 is 10:00 UTC the same day; the window is the 30 days before it, the day included
    tick = dt.datetime(2026, 3, 1, 5, 0, tzinfo=ZoneInfo("America/Toronto"))
    [request] = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=tick)).run_requests
    want = {"window_by": "publication_date", "from_publication_date": "2026-01-30", "to_publication_date": "2026-03-01"}
    assert request.run_config == {"ops": {"openalex_api_refresh": {"config": want}}}
    assert request.run_key == "published-2026-03-01"
    # 23:30 in Toronto on 2026-12-31 is already 2027-01-01 in UTC: the Toronto day counts
    monkeypatch.setenv("METACAN_PUBLICATION_WINDOW_DAYS", "15")
    late = dt.datetime(2026, 12, 31, 23, 30, tzinfo=ZoneInfo("America/Toronto"))
    [request] = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=late)).run_requests
    config = request.run_config["ops"]["openalex_api_refresh"]["config"]
    assert (config["from_publication_date"], config["to_publication_date"]) == ("2026-12-16", "2026-12-31")
    monkeypatch.setenv("METACAN_PUBLICATION_WINDOW_DAYS", "0")
    skipped = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=late))
    assert not skipped.run_requests
    assert skipped.skip_message.startswith("METACAN_PUBLICATION_WINDOW_DAYS='0' must be a whole number of days")


@pytest.mark.slow
def test_a_publication_window_is_harvested_apart_from_the_updated_date_windows(setup, api, openalex_dir):
    instance, resources, data = setup
    lme4, repro = _works(openalex_dir)
    api.served[("authorships.countries", "")] = [repro]  # a publication-date query carries no from_updated_date
    config = defs.resolve_schedule_def("daily_publication_refresh").evaluate_tick(
        dg.build_schedule_context(scheduled_execution_time=dt.datetime.now(dt.UTC))
    )
    [request] = config.run_requests
    pub = request.run_config["ops"]["openalex_api_refresh"]["config"]
    frm, to = pub["from_publication_date"], pub["to_publication_date"]
    assert dt.date.fromisoformat(to) - dt.date.fromisoformat(frm) == dt.timedelta(days=30)
    r = _refresh(instance, resources, api.base_url, **pub)
    assert r.success, _failure_message(r)
    name = f"window=published-{frm}_{to}"
    m = _meta(r)
    assert m["window"] == name and m["window_by"] == "publication_date" and m["works"] == 1 and m["queries"] == 4
    assert (m["from_publication_date"], m["to_publication_date"]) == (frm, to)
    assert all(f"from_publication_date:{frm},to_publication_date:{to}" in h["filter"] for h in api.hits)
    assert not any("updated_date" in h["filter"] for h in api.hits)
    marker = json.loads((data / "openalex_api" / name / "window.json").read_text())
    assert (marker["from"], marker["to"], marker["by"], marker["works"]) == (frm, to, "publication_date", 1)
    assert name in instance.get_dynamic_partitions("openalex_partitions")
    _build(instance, resources)
    assert [row[0] for row in _frame(data)] == [repro["id"].rsplit("/", 1)[-1]]
    # the weekly refresh's next window does not take the publication window for one of its own
    window, why = next_window(data / "openalex_api", TODAY)
    assert window == Window(_day(-7), _day(0)) and "no completed window yet" in why
