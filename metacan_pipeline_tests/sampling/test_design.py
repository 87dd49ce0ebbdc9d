"""Tests of metacan_pipeline.sampling.design: strata, enrichment and inclusion probabilities of the sample design."""

import pytest

from metacan_pipeline.sampling.design import META_SIGNALS, EnrichmentRule, StrataSpec, draw_sample


def _rows(n, route="ca_aff", abstract=True, start=0):
    return [{"id": f"W{i}", "route_key": route, "has_abstract": abstract} for i in range(start, start + n)]


def test_design_partitions_and_every_pi_positive():
    rows = _rows(100) + _rows(7, "ca_fund", start=100) + _rows(1, "about_ca", False, start=200)
    d = draw_sample(rows, fraction=0.1, min_per_stratum=1, salt="s")
    assert len(d) == len(rows)
    sizes = {r["stratum"]: r["stratum_size"] for r in d}
    assert sum(sizes.values()) == len(rows)
    assert all(r["selection_probability"] > 0 for r in d)
    by = {r["stratum"]: r for r in d}
    assert by["ca_aff|abstract"]["stratum_sample_size"] == 10 and by["ca_aff|abstract"]["design_weight"] == 10.0
    assert by["ca_fund|abstract"]["stratum_sample_size"] == 1 and by["ca_fund|abstract"][
        "selection_probability"
    ] == pytest.approx(1 / 7)
    assert by["about_ca|no_abstract"]["design_weight"] == 1.0
    assert sum(r["in_sample"] for r in d) == 12
    # deterministic for a salt, different for another
    again = draw_sample(list(reversed(rows)), 0.1, 1, "s")
    assert {r["id"] for r in d if r["in_sample"]} == {r["id"] for r in again if r["in_sample"]}
    other = draw_sample(rows, 0.1, 1, "other-salt")
    assert {r["id"] for r in d if r["in_sample"]} != {r["id"] for r in other if r["in_sample"]}


def test_configured_strata_enrichment_first_then_dimensions():
    rows = [
        {
            "id": f"W{i}",
            "route_key": "ca_aff",
            "has_abstract": True,
            "language": "fr" if i % 2 else "en",
            "title_text": "Publication bias in Canadian trials" if i < 4 else f"Soil study {i}",
            "venue_id": "S9" if i == 10 else "S1",
        }
        for i in range(40)
    ]
    spec = StrataSpec(("route", "language"), (META_SIGNALS, EnrichmentRule("venue", venue_ids=("S9",), fraction=1.0)))
    d = draw_sample(rows, fraction=0.25, min_per_stratum=1, salt="s", spec=spec)
    sizes = {r["stratum"]: r["stratum_size"] for r in d}
    # 4 titles with meta-research vocabulary (all taken), 1 work of venue S9 (taken), the rest by route x language
    assert sizes == {"enrich:meta_signal": 4, "enrich:venue": 1, "ca_aff|en": 17, "ca_aff|fr": 18}
    assert sum(sizes.values()) == len(rows) and all(r["selection_probability"] > 0 for r in d)
    by = {r["stratum"]: r for r in d}
    assert (
        by["enrich:meta_signal"]["design_weight"] == 1.0 and by["ca_aff|en"]["stratum_sample_size"] == 4
    )  # round(0.25 x 17)
    with pytest.raises(ValueError, match="stratify_by \\['venue'\\] unknown"):
        StrataSpec(("venue",))
    with pytest.raises(ValueError, match="neither a title_pattern nor venue_ids"):
        StrataSpec(enrichment=(EnrichmentRule("empty"),))
    with pytest.raises(ValueError, match="not a regular expression"):
        StrataSpec(enrichment=(EnrichmentRule("bad", title_pattern="(unclosed"),))


@pytest.mark.parametrize("fraction, minimum", [(0.0, 1), (1.5, 1), (0.2, 0)])
def test_design_refuses_settings_that_allow_pi_zero(fraction, minimum):
    with pytest.raises(ValueError):
        draw_sample(_rows(5), fraction, minimum, "s")


def test_the_streamed_design_equals_the_design_drawn_in_memory(tmp_path):
    """stream_design (what sample_design runs: the frame read in batches, strata staged to Parquet, DuckDB ranking
    each stratum) gives draw_sample's rows, values and order, whatever the batches; work outside the sampling frame
    is left out first; the same refusals."""
    import pyarrow as pa

    from metacan_pipeline.sampling.design import DESIGN_INPUT_COLUMNS, stream_design
    from metacan_pipeline.tables.sampling import DESIGN_SCHEMA

    rows = [
        {
            "id": f"W{i}",
            "route_key": ("ca_aff", "ca_fund", "about_ca|ca_aff")[i % 3],
            "has_abstract": i % 4 != 0,
            "language": "fr" if i % 5 == 0 else "en",
            "title_text": "Publication bias in Canadian trials" if i % 17 == 0 else f"Soil study {i}",
            "venue_id": "S9" if i == 10 else "S1",
            "in_sampling_frame": i % 11 != 0,
        }
        for i in range(500)
    ]
    spec = StrataSpec(("route", "abstract"), (META_SIGNALS, EnrichmentRule("venue", venue_ids=("S9",), fraction=0.5)))
    table = pa.Table.from_pylist(rows).select(DESIGN_INPUT_COLUMNS)
    expected = draw_sample([r for r in rows if r["in_sampling_frame"]], 0.13, 2, "s", spec)
    streamed = stream_design(table.to_batches(max_chunksize=37), 0.13, 2, "s", spec, tmp_path / "work")
    got = pa.Table.from_batches(list(streamed)).cast(DESIGN_SCHEMA).to_pylist()
    assert got == expected and len(got) == sum(r["in_sampling_frame"] for r in rows)
    with pytest.raises(ValueError, match="min_per_stratum"):
        list(stream_design(table.to_batches(), 0.1, 0, "s", spec, tmp_path / "bad"))
