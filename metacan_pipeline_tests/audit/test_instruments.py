"""Filter recall and known-item venue recall (the original protocol's instruments ii and iii) on a small planted
world: which works each filter keeps, which teacher is qualified, which works each system puts in metaresearch are
planted; every count and interval is computed again here from the planted rows (intervals from the beta quantiles
of the Clopper-Pearson definition), and the assets are materialized through Dagster on a real warehouse."""

from __future__ import annotations

import math

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import beta

from metacan_pipeline.audit.assets import filter_recall, venue_known_item_recall
from metacan_pipeline.audit.instruments.filters import DEFAULT_TOPICS, recall_filters
from metacan_pipeline.audit.instruments.recall import (
    FILTER_RECALL_MEANS,
    KNOWN_ITEM_MEANS,
    NO_POSITIVES,
    NO_REFERENCE,
    NO_RULE_DECISIONS,
    NON_PROBABILITY,
    RECALL_CATEGORIES,
    recall_interval,
)
from metacan_pipeline.audit.instruments.venues import DEFAULT_VENUES_FILE, load_venue_list
from metacan_pipeline.cli.run_summary import instrument_lines
from metacan_pipeline.openalex.ids import short_id
from metacan_pipeline.openalex.reader import Record, iter_records
from metacan_pipeline.release.bundle import freeze_tables, readme_text
from metacan_pipeline.settings import REFERENCE_VENUES_FILE_ENV
from metacan_pipeline.tables.audit import FILTER_RECALL_SCHEMA, HUMAN_CODES_SCHEMA, VENUE_RECALL_SCHEMA
from metacan_pipeline.tables.teachers import LABELS_SCHEMA
from metacan_pipeline_tests.builders.common import metadata
from metacan_pipeline_tests.builders.student import record_qualification
from metacan_pipeline_tests.builders.teachers import label_row

N = 20
SCIENTOMETRICS, RESEARCH_EVALUATION, NOT_LISTED = "S148561398", "S16793705", "S68632876"


def wid(i: int) -> str:
    return f"W{900 + i}"


def evidence(i: int) -> list[str]:
    if i % 10 == 0:
        return ["tier B 'McGill' in title"]
    if i % 5 == 0:
        return ["tier A 'Ontario' in title", "tier C 'London' in abstract"]
    return []


def planted_frame() -> list[dict]:
    venues = {0: SCIENTOMETRICS, 1: SCIENTOMETRICS, 2: SCIENTOMETRICS, 3: SCIENTOMETRICS}
    venues |= {6: f"https://openalex.org/{RESEARCH_EVALUATION}", 8: NOT_LISTED}
    topics = {1: DEFAULT_TOPICS[0], 2: DEFAULT_TOPICS[0], 3: DEFAULT_TOPICS[0], 7: DEFAULT_TOPICS[2]}
    return [
        {
            "id": wid(i),
            "ca_aff": i % 2 == 0,
            "ca_fund": i % 3 == 0,
            "ca_venue": i in (4, 5),
            "about_ca": i % 5 == 0,
            "about_ca_evidence": evidence(i),
            "topic": topics.get(i, "Ocean acidification"),
            "venue_id": venues.get(i, "S1"),
            "language": None if i == 2 else ("fr" if i % 4 == 3 else "en"),
            "has_abstract": i % 3 != 1,
        }
        for i in range(N)
    ]


#: What each teacher labels and puts in each category (gemma: qualified; codex: not, so never a reference).
GEMMA = {i: (["metaresearch"] if i in (0, 1, 2, 3, 5, 6, 9, 12, 15) else []) for i in range(N)}
for _i in (1, 2, 3):
    GEMMA[_i] = [*GEMMA[_i], "bibliometrics"]
CODEX = {0: ["metaresearch"], 1: ["metaresearch"], 2: [], 3: [], 4: ["metaresearch"]}
HUMAN = {0: ["metaresearch"], 4: ["metaresearch", "sts"], 7: []}
CANDIDATE, CONSENSUS = {0, 1, 2, 6}, {0, 6}


def labels(teacher: str, by_index: dict[int, list[str]], extra: list[dict] = ()) -> pa.Table:
    rows = [{**label_row(wid(i), teacher, cats), "label_id": f"{teacher}-{i}"} for i, cats in by_index.items()]
    return pa.Table.from_pylist([*rows, *extra], schema=LABELS_SCHEMA)


def scores(i: int, teacher: str) -> list[float] | None:
    if teacher == "codex":
        top = {3: 0.99, 6: 0.98}
        return [top.get(i, i / 100)] + [0.0] * 8
    return None if i == 1 else [(N - i) / 100] + [0.0] * 8


def plant(storage, *, human: bool = True, predictions: bool = True) -> list[dict]:
    frame = planted_frame()
    storage.write_table("frame", pa.Table.from_pylist(frame))
    failed = {**label_row(wid(19), "gemma", ["metaresearch"], status="failed"), "label_id": "gemma-failed"}
    gone = {**label_row("W999", "gemma", ["metaresearch"]), "label_id": "gemma-gone"}  # left the frame
    gemma = {i: c for i, c in GEMMA.items() if i != 19}
    storage.write_table("direct_labels_gemma", labels("gemma", gemma, [failed, gone]))
    storage.write_table("direct_labels_codex", labels("codex", CODEX))
    record_qualification(storage, "gemma", agree=True)
    record_qualification(storage, "codex", agree=False)
    if human:
        rows = [
            {"protocol_id": "protocol-x", "id": wid(i), "basis": "adjudicated", "categories": c}
            for i, c in HUMAN.items()
        ]
        rows.append({"protocol_id": "protocol-x", "id": wid(8), "basis": "agreed", "categories": None})
        storage.write_table("human_codes", pa.Table.from_pylist(rows, schema=HUMAN_CODES_SCHEMA))
    if predictions:
        preds = [
            {
                "id": wid(i),
                "candidate_categories": ["metaresearch"] if i in CANDIDATE else [],
                "consensus_categories": ["metaresearch"] if i in CONSENSUS else [],
                "category_scores_codex": scores(i, "codex"),
                "category_scores_gemma": scores(i, "gemma"),
            }
            for i in range(N)
        ]
        storage.write_table("predictions", pa.Table.from_pylist(preds))
    return frame


def exact_interval(k: int, n: int) -> tuple[float, float]:
    """The 95% Clopper-Pearson interval from its definition (beta quantiles)."""
    lower = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
    upper = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
    return lower, upper


def run(storage, asset, config: dict | None = None) -> dg.ExecuteInProcessResult:
    run_config = {"ops": {asset.key.to_user_string(): {"config": config}}} if config else None
    return dg.materialize([asset], resources={"storage": storage}, run_config=run_config)


# ---- the interval ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n"), [(7, 10), (0, 5), (5, 5), (1, 1), (33, 120)])
def test_recall_interval_is_clopper_pearson(k, n):
    value, lower, upper = recall_interval(k, n)
    assert value == k / n
    assert (lower, upper) == pytest.approx(exact_interval(k, n), abs=1e-9)


def test_recall_interval_without_cases_and_with_a_bad_count():
    assert recall_interval(0, 0) == (None, None, None)
    with pytest.raises(ValueError, match="3 hits out of 2 works"):
        recall_interval(3, 2)


# ---- filter recall ----------------------------------------------------------------------------------------------


def keeps(name: str, row: dict, topics=DEFAULT_TOPICS) -> bool:
    """Which planted works each filter keeps, from the planted columns."""
    kind, _, what = name.partition(":")
    if kind == "route":
        return bool(row[what])
    if kind == "lexicon":
        tier = what[-1].upper()
        return any(e.startswith(f"tier {tier} ") for e in row["about_ca_evidence"])
    return row["topic"] in topics


def expected_filter_rows(frame: list[dict]) -> dict[tuple[str, str, str], tuple[int, int]]:
    """``{(reference, filter, category): (n, kept)}`` from the planted labels, codes and frame."""
    by_id = {r["id"]: r for r in frame}
    references = {
        "teacher:gemma": {wid(i): c for i, c in GEMMA.items() if i != 19} | {"W999": ["metaresearch"]},
        "human": {wid(i): c for i, c in HUMAN.items()},
    }
    out = {}
    for source, codes in references.items():
        for flt in recall_filters():
            for category in RECALL_CATEGORIES:
                positives = [w for w, cats in codes.items() if category in cats and w in by_id]
                out[(source, flt.name, category)] = (len(positives), sum(keeps(flt.name, by_id[w]) for w in positives))
    return out


def test_filter_recall_counts_what_each_filter_drops(storage):
    frame = plant(storage)
    result = run(storage, filter_recall)
    rows = storage.read_table("filter_recall").to_pylist()
    assert storage.read_table("filter_recall").schema.names == FILTER_RECALL_SCHEMA.names
    expected = expected_filter_rows(frame)
    got = {(r["reference_source"], r["filter_name"], r["category"]): r for r in rows}
    assert set(got) == set(expected)  # codex is not qualified: never a reference
    for key, (n, kept) in expected.items():
        r = got[key]
        assert (r["n"], r["kept"], r["dropped"]) == (n, kept, n - kept), key
        if n:
            assert r["recall"] == pytest.approx(kept / n)
            assert (r["lower"], r["upper"]) == pytest.approx(exact_interval(kept, n), abs=1e-9)
        else:
            assert r["recall"] is None and r["lower"] is None and NO_POSITIVES in r["note"]
    # the planted cells, by hand: gemma's 9 metaresearch works in the frame; ca_aff keeps W900, W902, W906, W912
    aff = got[("teacher:gemma", "route:ca_aff", "metaresearch")]
    assert (aff["n"], aff["kept"], aff["dropped"]) == (9, 4, 5)
    assert aff["note"] == "1 reference positives outside the frame left out"
    tier_c = got[("teacher:gemma", "lexicon:tier_c", "metaresearch")]  # W905, W915 (tier C beside tier A)
    assert (tier_c["kept"], tier_c["n"]) == (2, 9)
    topic = got[("teacher:gemma", "topic:openalex_primary_topic", "bibliometrics")]
    assert (topic["kept"], topic["n"], topic["recall"]) == (3, 3, 1.0)
    human = got[("human", "route:ca_fund", "metaresearch")]  # W900 and W904: ca_fund keeps W900 only
    assert (human["n"], human["kept"]) == (2, 1)
    md = metadata(result, "filter_recall")
    assert md["references"] == "teacher:gemma, human"
    assert FILTER_RECALL_MEANS in md["filter_recall"]
    assert md["teacher_standing"]["codex"]["qualified"] is False


def test_filter_recall_without_a_reference_says_so_per_filter(storage):
    plant(storage, human=False)
    record_qualification(storage, "gemma", agree=False)  # the newest row counts: gemma is no longer qualified
    result = run(storage, filter_recall)
    rows = storage.read_table("filter_recall").to_pylist()
    assert len(rows) == len(recall_filters()) * len(RECALL_CATEGORIES)
    assert {r["reference_source"] for r in rows} == {"none"}
    assert all(r["n"] == 0 and r["kept"] == 0 and r["recall"] is None and r["note"] == NO_REFERENCE for r in rows)
    text = metadata(result, "filter_recall")["filter_recall"]
    assert all(f"- {f.name}: n = 0, {NO_REFERENCE}" in text for f in recall_filters())


def test_filter_recall_topic_filter_is_configurable(storage):
    frame = plant(storage)
    run(storage, filter_recall, {"topic_filter": ["Ocean acidification"]})
    rows = storage.read_table("filter_recall").to_pylist()
    row = next(
        r
        for r in rows
        if (r["reference_source"], r["filter_name"], r["category"])
        == ("teacher:gemma", "topic:openalex_primary_topic", "metaresearch")
    )
    positives = [r for r in frame if "metaresearch" in GEMMA[int(r["id"][1:]) - 900] and r["id"] != wid(19)]
    assert row["kept"] == sum(r["topic"] == "Ocean acidification" for r in positives) == 6
    assert row["filter_definition"].endswith("Ocean acidification")
    with pytest.raises(ValueError, match="topic_filter must name at least one OpenAlex topic"):
        recall_filters([" "])


# ---- known-item recall on the venue reference set ------------------------------------------------------------------


def expected_known_items(frame: list[dict], decisions: dict[str, dict[str, bool]]) -> dict:
    """``{(system, group_by, group): (reference works, n, detected)}`` from the planted rows."""
    names = {SCIENTOMETRICS: "Scientometrics", RESEARCH_EVALUATION: "Research Evaluation"}
    reference = [
        {
            "id": r["id"],
            "venue": names[r["venue_id"].removeprefix("https://openalex.org/")],
            "language": r["language"] or "(unknown)",
            "has_abstract": str(r["has_abstract"]).lower(),
        }
        for r in frame
        if r["venue_id"].removeprefix("https://openalex.org/") in names
    ]
    out = {}
    for system, decided in decisions.items():
        for group_by in ("all", "language", "has_abstract", "venue"):
            groups = {"all"} if group_by == "all" else {w[group_by] for w in reference}
            for g in groups:
                part = [w for w in reference if group_by == "all" or w[group_by] == g]
                on = [w for w in part if w["id"] in decided]
                out[(system, group_by, g)] = (len(part), len(on), sum(decided[w["id"]] for w in on))
    return out


def planted_decisions() -> dict[str, dict[str, bool]]:
    def top_two(teacher):
        scored = sorted((-scores(i, teacher)[0], wid(i)) for i in range(N) if scores(i, teacher))
        k = math.ceil(len(scored) / 10)
        return {w: rank < k for rank, (_, w) in enumerate(scored)}

    return {
        "candidate": {wid(i): i in CANDIDATE for i in range(N)},
        "consensus": {wid(i): i in CONSENSUS for i in range(N)},
        "student:codex:top_decile": top_two("codex"),
        "student:gemma:top_decile": top_two("gemma"),
        "teacher:gemma": {wid(i): "metaresearch" in c for i, c in GEMMA.items() if i != 19},
        "teacher:codex": {wid(i): "metaresearch" in c for i, c in CODEX.items()},
    }


def test_known_item_recall_on_the_pinned_venues(storage):
    frame = plant(storage)
    result = run(storage, venue_known_item_recall)
    table = storage.read_table("venue_known_item_recall")
    assert table.schema.names == VENUE_RECALL_SCHEMA.names
    rows = {(r["system"], r["group_by"], r["group"]): r for r in table.to_pylist()}
    expected = expected_known_items(frame, planted_decisions())
    assert set(rows) == set(expected)
    for key, (works, n, detected) in expected.items():
        r = rows[key]
        assert (r["reference_works"], r["n"], r["detected"]) == (works, n, detected), key
        assert (r["missed"], r["undecided"]) == (n - detected, works - n)
        if n:
            assert r["recall"] == pytest.approx(detected / n)
            assert (r["lower"], r["upper"]) == pytest.approx(exact_interval(detected, n), abs=1e-9)
        else:  # the system decided on none of the group's works (codex on W906)
            assert (r["recall"], r["lower"], r["upper"]) == (None, None, None)
        assert r["estimate_kind"] == NON_PROBABILITY and r["category"] == "metaresearch"
    # by hand: the reference set is W900-W903 (Scientometrics) and W906 (Research Evaluation, a URL id); W908's venue
    # is not on the list
    assert rows[("candidate", "all", "all")]["detected"] == 4
    assert (rows[("consensus", "all", "all")]["detected"], rows[("consensus", "all", "all")]["n"]) == (2, 5)
    assert rows[("student:codex:top_decile", "all", "all")]["detected"] == 2  # W903 and W906: the two top scores
    assert rows[("teacher:gemma", "has_abstract", "false")]["reference_works"] == 1  # W901
    codex = rows[("teacher:codex", "all", "all")]
    assert (codex["n"], codex["detected"], codex["undecided"]) == (4, 2, 1)  # W906 is outside codex's sample
    assert codex["note"].startswith("teacher not qualified")
    assert rows[("teacher:gemma", "all", "all")]["note"] is None
    assert {r["venue_list_version"] for r in table.to_pylist()} == {"reference-venues-v1"}
    md = metadata(result, "venue_known_item_recall")
    assert md["reference_works"] == 5
    text = md["known_item_recall"]
    assert KNOWN_ITEM_MEANS in text and "NON-PROBABILITY" in text and "Social Studies of Science" in text


def test_known_item_recall_reads_a_replaced_venue_list(storage, tmp_path, monkeypatch):
    plant(storage, predictions=False)
    venues = tmp_path / "venues.toml"
    venues.write_text(
        'version = "local-2"\n[[venue]]\nname = "A venue"\nsource_id = "S68632876"\nissn_l = ""\nevidence = "test"\n'
    )
    monkeypatch.setenv(REFERENCE_VENUES_FILE_ENV, str(venues))
    run(storage, venue_known_item_recall)
    rows = storage.read_table("venue_known_item_recall").to_pylist()
    overall = {r["system"]: r for r in rows if r["group_by"] == "all"}
    assert set(overall) == {"teacher:gemma", "teacher:codex"}  # no predictions yet: only the teachers
    assert overall["teacher:gemma"]["reference_works"] == 1 and overall["teacher:gemma"]["detected"] == 0  # W908
    assert {r["venue_list_version"] for r in rows} == {"local-2"}


def test_venue_list_refuses_what_it_cannot_use(tmp_path):
    default = load_venue_list(DEFAULT_VENUES_FILE)
    assert default.pinned[SCIENTOMETRICS] == "Scientometrics" and len(default.venues) == 9
    bad = tmp_path / "bad.toml"
    cases = {
        '[[venue]]\nname = "X"\nsource_id = "S1"\n': "give the list a version",
        'version = "v"\n': r"no \[\[venue\]\] table",
        'version = "v"\n[[venue]]\nname = "X"\nsource_id = "V123"\n': "is not an OpenAlex source id",
        'version = "v"\n[[venue]]\nname = "X"\nsource_id = "S1"\n[[venue]]\nname = "Y"\nsource_id = "S1"\n': "twice",
        'version = "v"\n[[venue]]\nname = "X"\nsource = "S1"\n': "unknown keys",
    }
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_venue_list(bad)
    with pytest.raises(ValueError, match="cannot be read"):
        load_venue_list(tmp_path / "missing.toml")


def test_summary_shows_both_instruments_apart(storage):
    plant(storage)
    run(storage, filter_recall)
    run(storage, venue_known_item_recall)
    with storage.connect(read_only=True) as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        lines = instrument_lines(con, views)
    gemma = next(line for line in lines if line.startswith("  against teacher:gemma: "))
    ca_aff = recall_interval(4, 9)
    assert (
        gemma.split("; ")[0]
        == f"  against teacher:gemma: route:ca_aff {ca_aff[0]:.3f} [{ca_aff[1]:.3f}, {ca_aff[2]:.3f}] (4/9)"
    )
    assert any(line.startswith("  against human: route:ca_aff 1.000") for line in lines)
    heading = next(i for i, line in enumerate(lines) if line.startswith("Known-item recall"))
    assert "reference-venues-v1 (5 frame works" in lines[heading] and "non-probability bound" in lines[heading]
    assert lines[heading + 1].startswith("  candidate 0.800 [") and "teacher:codex 0.500" in lines[heading + 1]


def test_a_release_freezes_both_instruments_without_their_run_columns(storage, tmp_path):
    plant(storage, human=False)  # human codes would need the study they rest on frozen too
    storage.write_table("machine_scores", pa.table({"id": pa.array([], pa.string())}))
    run(storage, filter_recall)
    run(storage, venue_known_item_recall)
    folder = tmp_path / "bundle"
    counts = freeze_tables(storage, ["direct_labels_gemma", "direct_labels_codex"], folder)
    assert counts["filter_recall"] == len(recall_filters()) * len(RECALL_CATEGORIES)  # gemma the only reference
    frozen = pq.read_table(folder / "tables" / "venue_known_item_recall.parquet")
    assert frozen.schema.names == [n for n in VENUE_RECALL_SCHEMA.names if n not in ("run_id", "computed_at")]
    keys = [(r["system"], r["group_by"], r["group"]) for r in frozen.to_pylist()]
    assert keys == sorted(keys) and len(keys) == counts["venue_known_item_recall"]
    readme = readme_text("v-test", folder)
    assert "| `tables/filter_recall.parquet` | the recall of one filter" in readme
    assert KNOWN_ITEM_MEANS in readme and FILTER_RECALL_MEANS in readme


def test_pinned_venue_ids_name_their_venue_in_the_real_records(openalex_dir, openalex_more_dir):
    """Every real work record whose primary source is a pinned id names that venue (the ids are not invented): the
    shared records hold Scientometrics, Quantitative Science Studies and JASIST works."""
    pinned = load_venue_list(DEFAULT_VENUES_FILE).pinned
    seen: dict[str, set[str]] = {}
    for folder in (openalex_dir, openalex_more_dir):
        for r in iter_records(folder, {"works"}):
            source = (r.data.get("primary_location") or {}).get("source") if isinstance(r, Record) else None
            if isinstance(source, dict) and short_id(source.get("id")) in pinned:
                seen.setdefault(short_id(source["id"]), set()).add(source.get("display_name"))
    assert seen == {sid: {pinned[sid]} for sid in ("S148561398", "S4210195326", "S4210197613")}


def test_a_rule_that_decides_nothing_says_so_beside_its_misses(storage):
    plant(storage)
    preds = storage.read_table("predictions").to_pylist()
    storage.write_table("predictions", pa.Table.from_pylist([{**p, "candidate_categories": []} for p in preds]))
    run(storage, venue_known_item_recall)
    rows = {(r["system"], r["group_by"]): r for r in storage.read_table("venue_known_item_recall").to_pylist()}
    candidate = rows[("candidate", "all")]
    assert (candidate["n"], candidate["detected"], candidate["missed"]) == (5, 0, 5)
    assert candidate["note"] == NO_RULE_DECISIONS.format(rule="candidate")
    assert rows[("consensus", "all")]["note"] is None  # consensus still decides W900 and W906
