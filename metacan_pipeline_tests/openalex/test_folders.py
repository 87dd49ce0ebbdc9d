"""Tests of metacan_pipeline.openalex.folders (and the setting and resource that give the folders): several
OpenAlex input folders read together, with source_file names that say which folder a file is in."""

from __future__ import annotations

import os
import shutil

import pytest

from metacan_pipeline import settings
from metacan_pipeline.definitions import build_resources
from metacan_pipeline.openalex.folders import input_folders, locate
from metacan_pipeline.openalex.inventory import take_inventory

SEP = os.pathsep


def test_the_setting_is_a_pathsep_separated_list(monkeypatch):
    monkeypatch.delenv(settings.OPENALEX_DIR_ENV, raising=False)
    assert settings.openalex_dirs() == ["../shared/data/openalex", "../shared/data/openalex_more"]  # both folders
    monkeypatch.setenv(settings.OPENALEX_DIR_ENV, f"../shared/data/openalex{SEP} ../shared/data/openalex_more{SEP}")
    assert settings.openalex_dirs() == ["../shared/data/openalex", "../shared/data/openalex_more"]
    assert build_resources("data")["openalex"].input_dirs == ["../shared/data/openalex", "../shared/data/openalex_more"]
    monkeypatch.setenv(settings.OPENALEX_DIR_ENV, "")
    assert settings.openalex_dirs() == ["../shared/data/openalex", "../shared/data/openalex_more"]  # empty = unset
    monkeypatch.setenv(settings.OPENALEX_DIR_ENV, SEP)
    with pytest.raises(ValueError, match=f"METACAN_OPENALEX_DIR='{SEP}' names no folder"):
        settings.openalex_dirs()
    # the resources take one folder, a pathsep list or a list
    assert build_resources("data", f"a{SEP}b")["openalex"].input_dirs == ["a", "b"]
    assert build_resources("data", ["a", "b"])["openalex"].input_dirs == ["a", "b"]


def test_the_first_folder_keeps_its_names_and_the_others_are_named_by_folder(tmp_path):
    a, b = tmp_path / "openalex", tmp_path / "elsewhere" / "openalex_more"
    folders = input_folders([a, b])
    assert [(f.root, f.prefix) for f in folders] == [(a, ""), (b, "openalex_more/")]
    assert folders[1].source_file(b / "x" / "page.json") == "openalex_more/x/page.json"
    api = tmp_path / "data" / "openalex_api"
    assert locate(folders, api, "openalex_more/x/page.json") == b / "x" / "page.json"
    assert locate(folders, api, "x/page.json") == a / "x" / "page.json"
    assert locate(folders, api, "api/window=a_b/pages/p.json.gz") == api / "window=a_b" / "pages" / "p.json.gz"


@pytest.mark.parametrize(
    ("dirs", "message"),
    [
        ([], "no OpenAlex input folder given"),
        (["a", "a/"], "is listed twice"),
        (["a", "a/sub"], "lies inside"),
        (["a/sub", "a"], "lies inside"),
        (["a", "x/c", "y/c"], "share the name 'c'"),
        (["a", "x/api"], "is named 'api'"),
    ],
)
def test_a_folder_list_whose_names_would_be_ambiguous_is_refused_naming_the_folders(tmp_path, dirs, message):
    with pytest.raises(ValueError, match=message) as err:
        input_folders([tmp_path / d for d in dirs] if dirs else [" "])
    for d in dirs[1:]:
        assert str((tmp_path / d).resolve()) in str(err.value)


def test_two_real_folders_are_inventoried_together(tmp_path, openalex_dir, openalex_more_dir):
    data = tmp_path / "data" / "openalex_api"
    inv = take_inventory([openalex_dir, openalex_more_dir], data)
    rows = inv.present()
    more = [r for r in rows if r["source_file"].startswith("openalex_more/")]
    # the 11 work files and funders.txt of the second folder, in the partition of loose files
    assert len(more) == 12 and {r["partition_key"] for r in more} == {"files"}
    assert "openalex_more/herreio__openalex-client-review__tu9_type_selection_py_diophila.tar.gz" in {
        r["source_file"] for r in more
    }
    # the first folder's files keep the names a single-folder inventory gives them
    alone = take_inventory(openalex_dir, data)
    assert [r for r in inv.rows if not r["source_file"].startswith("openalex_more/")] == alone.rows
    files = build_resources(str(tmp_path / "data"), [str(openalex_dir), str(openalex_more_dir)])["openalex"]
    for r in rows:
        assert files.path_of(r["source_file"]).stat().st_size == r["bytes"]


def test_a_first_folder_holding_another_folders_name_is_refused(tmp_path, openalex_more_dir):
    first, second = tmp_path / "first", tmp_path / "more"
    (first / "more").mkdir(parents=True)
    shutil.copy(openalex_more_dir / "samiullah07__FYP-LLM__openalex_results.json", first / "more" / "page.json")
    second.mkdir()
    shutil.copy(openalex_more_dir / "samiullah07__FYP-LLM__openalex_results.json", second / "page.json")
    with pytest.raises(ValueError, match="source_file more/... would name two files") as err:
        take_inventory([first, second])
    assert str(first) in str(err.value) and str(second) in str(err.value)
    (first / "api").mkdir()
    with pytest.raises(ValueError, match="'api'"):
        take_inventory([first], tmp_path / "data" / "openalex_api")


def test_a_missing_folder_is_named(tmp_path, openalex_more_dir):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'nowhere'} does not exist"):
        take_inventory([openalex_more_dir, tmp_path / "nowhere"])


def test_a_file_or_an_empty_further_folder_in_the_list_is_refused_not_read_as_empty(tmp_path, openalex_more_dir):
    """An unmounted disk or a wrong path would otherwise drop its partitions and frame rows silently."""
    a_file = tmp_path / "works.json"
    a_file.write_text("[]")
    with pytest.raises(NotADirectoryError, match=f"{a_file} is a file, not a folder"):
        input_folders([openalex_more_dir, a_file])
    empty = tmp_path / "mnt"
    empty.mkdir()
    (empty / "README.md").write_text("not a work file")
    with pytest.raises(ValueError, match=f"{empty} holds no OpenAlex work files"):
        take_inventory([openalex_more_dir, empty])
