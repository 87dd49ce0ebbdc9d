"""Tests of metacan_pipeline.teachers.core.views: record view versions, the Canadian marks, label keys."""

from __future__ import annotations

import pytest

from metacan_pipeline.storage import MetacanStorage
from metacan_pipeline.teachers.core.views import marked_names, record_view, view_hash
from metacan_pipeline.teachers.labelling import label_works
from metacan_pipeline_tests.builders.teachers import RUN_LOG, frame_rows, spec_for
from metacan_pipeline_tests.stub_teacher.process import run_stub


def _work(**kw) -> dict:
    row = frame_rows(1)[0]
    row.update(kw)
    return row


def test_version_2_shows_institutions_and_funders_with_the_canadian_ones_marked_first():
    w = _work(
        ca_institutions=["McGill University"],
        other_institutions=["Harvard University", "McGill University"],
        funder_names=["National Institutes of Health", "Natural Sciences and Engineering Research Council"],
        ca_funder_names=["Natural Sciences and Engineering Research Council"],
    )
    v2 = record_view(w, "title_only")
    assert v2["institutions"] == ["McGill University (Canada)", "Harvard University"]
    assert v2["funders"] == [
        "Natural Sciences and Engineering Research Council (Canada)",
        "National Institutes of Health",
    ]
    v1 = record_view(w, "title_only", version=1)
    assert "institutions" not in v1 and "funders" not in v1
    assert {k: v2[k] for k in v1} == v1


def test_a_version_1_label_key_is_never_reused_for_version_2_even_without_names():
    w = _work(ca_institutions=[], other_institutions=[], funder_names=[], ca_funder_names=[])
    v1, v2 = record_view(w, "title_only", version=1), record_view(w, "title_only", version=2)
    assert v2["institutions"] == [] and v2["funders"] == []
    assert view_hash(v1) != view_hash(v2)


def test_a_5000_author_work_shows_ten_names_and_counts_the_rest():
    names = marked_names(["Université Laval"], [f"Institute {i}" for i in range(300)])
    assert len(names) == 11 and names[0] == "Université Laval (Canada)" and names[-1] == "... and 291 more"
    assert marked_names(["", " "], [None, "A", "A"]) == ["A"]


def test_unknown_version_or_view_is_refused():
    with pytest.raises(ValueError, match="record view version 3"):
        record_view(_work(), "title_only", version=3)
    with pytest.raises(ValueError, match="unknown record view"):
        record_view(_work(), "full_text")


def test_relabelling_under_a_new_view_version_buys_new_labels_and_keeps_the_old_ones(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    works = frame_rows(6)
    with run_stub() as (url, _):
        old = spec_for(url, prompt_version="v3", view_version=1)
        new = spec_for(url, prompt_version="v3", view_version=2)
        first = label_works(storage, old, works, run_id="a", log=RUN_LOG, base_url=lambda: url)
        second = label_works(storage, new, works, run_id="b", log=RUN_LOG, base_url=lambda: url)
        third = label_works(storage, old, works, run_id="c", log=RUN_LOG, base_url=lambda: url)
    assert first.sent == 6 and second.sent == 6 and second.reused == 0  # never reused across versions
    assert third.sent == 0 and third.reused == 6  # the old labels keep their key
    with storage.connect() as con:
        views = dict(con.execute("SELECT record_view, count(*) FROM teacher_labels GROUP BY 1").fetchall())
    assert views == {"title_only@v1": 6, "title_only@v2": 6}
