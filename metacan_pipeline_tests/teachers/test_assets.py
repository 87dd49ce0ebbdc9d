"""Tests of metacan_pipeline.teachers.assets: the direct_labels_<teacher> factory, its keys, dependencies and
checks."""


def test_the_role_assets_are_the_teachers_the_registry_names_and_depend_on_the_frame_by_key():
    """census_direct_labels / sample_direct_labels follow [roles]; each direct-label asset reads frame (and the
    sample teacher sample_design) by key, and its coverage check is attached to the table it reads."""
    import dagster as dg

    from metacan_pipeline.teachers.assets import ROLES, TEACHER_CHECKS, census_direct_labels, sample_direct_labels
    from metacan_pipeline.teachers.registry import direct_labels_table, load_roles

    assert ROLES == load_roles() == {"census": "gemma", "sample": "codex"}
    assert (
        census_direct_labels.key
        == dg.AssetKey(direct_labels_table(ROLES["census"]))
        == dg.AssetKey("direct_labels_gemma")
    )
    assert {k.path[-1] for k in census_direct_labels.asset_deps[census_direct_labels.key]} == {"frame"}
    assert {k.path[-1] for k in sample_direct_labels.asset_deps[sample_direct_labels.key]} == {"frame", "sample_design"}
    assert {spec.asset_key.path[-1] for check in TEACHER_CHECKS for spec in check.check_specs} == {
        "direct_labels_gemma",
        "direct_labels_codex",
    }
