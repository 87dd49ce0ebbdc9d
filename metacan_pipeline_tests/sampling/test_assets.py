"""Tests of metacan_pipeline.sampling.assets: the sample_design asset and its blocking check, through Dagster."""

import dagster as dg
import pyarrow as pa

from metacan_pipeline.sampling.assets import sample_design
from metacan_pipeline.sampling.checks import sample_design_partitions_frame
from metacan_pipeline.sampling.design import META_SIGNALS, StrataSpec, draw_sample
from metacan_pipeline.storage import MetacanStorage


def test_sample_design_writes_the_drawn_design_and_its_check_passes(tmp_path):
    """The asset (the frame streamed in batches, DuckDB ranking the strata) writes the rows draw_sample gives over the
    sampling frame, in order, with its counts in the metadata; the partition check passes."""
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    frame = [
        {
            "id": f"W{i:05d}",
            "route_key": ("ca_aff", "ca_fund")[i % 2],
            "has_abstract": i % 3 != 0,
            "language": "en",
            "title_text": "Peer review of grants" if i % 13 == 0 else f"Soil study {i}",
            "venue_id": "S1",
            "in_sampling_frame": i % 7 != 0,
        }
        for i in range(120_000)  # more than one 50,000-row batch
    ]
    storage.write_table("frame", pa.Table.from_pylist(frame))
    result = dg.materialize(
        [sample_design, sample_design_partitions_frame],
        resources={"storage": storage},
        run_config={"ops": {"sample_design": {"config": {"fraction": 0.01}}}},
    )
    assert result.success
    expected = draw_sample(
        [r for r in frame if r["in_sampling_frame"]],
        0.01,
        1,
        "metacan-sample-v1",
        StrataSpec(enrichment=(META_SIGNALS,)),
    )
    assert storage.read_table("sample_design").to_pylist() == expected
    md = result.asset_materializations_for_node("sample_design")[0].metadata
    assert md["dagster/row_count"].value == len(expected)
    assert md["sample_size"].value == sum(r["in_sample"] for r in expected)
    [check] = result.get_asset_check_evaluations()
    assert check.passed
