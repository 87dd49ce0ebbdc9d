"""Tests of metacan_pipeline.teachers.core.store: label keys and the migrations of earlier store layouts."""

import duckdb

from metacan_pipeline.tables import create_tables
from metacan_pipeline.teachers.core.rubric import prompt_lock
from metacan_pipeline.teachers.core.store import append_rows, current_labels_sql, existing_keys


def _label(wid, status="labelled", error=None, sha="s1", label_id=None, created="2026-01-01 00:00:00"):
    import datetime as dt

    return {
        "label_id": label_id or f"{wid}-{status}-{sha}-{created}",
        "work_id": wid,
        "teacher": "gemma",
        "model": "m",
        "prompt_version": "v2",
        "prompt_sha": sha,
        "view_hash": "vh",
        "status": status,
        "error": error,
        "categories": [] if status == "labelled" else None,
        "created_at": dt.datetime.fromisoformat(created),
    }


def test_an_unavailable_endpoint_is_asked_again_an_invalid_reply_is_not_and_a_new_prompt_text_is_a_new_key():
    con = duckdb.connect()
    create_tables(con)
    append_rows(
        con,
        [],
        [
            _label("W1", "failed", "endpoint unavailable after 6 attempts: ReadTimeout"),
            _label("W2", "failed", "invalid reply: W2: genre='novel' is not in the vocabulary (after 3 attempts)"),
            _label("W3"),
        ],
    )
    assert existing_keys(con, "gemma", "m", "v2", "s1") == {("W2", "vh"), ("W3", "vh")}
    assert existing_keys(con, "gemma", "m", "v2", "s2") == set()  # same version name, other text: nothing reused
    append_rows(con, [], [_label("W1", created="2026-01-02 00:00:00")])
    current = dict(
        con.execute(f"SELECT work_id, status FROM ({current_labels_sql()})", ["gemma", "m", "v2", "s1"]).fetchall()
    )
    assert current == {"W1": "labelled", "W2": "failed", "W3": "labelled"}
    # a replayed archive inserts nothing twice
    call = {"call_id": "c1", "teacher": "gemma", "cost_usd": 0.5, "work_ids": ["W1"]}
    append_rows(con, [call], [_label("W4", label_id="L4")])
    append_rows(con, [call], [_label("W4", label_id="L4")])
    assert con.execute("SELECT count(*), sum(cost_usd) FROM teacher_calls").fetchone() == (1, 0.5)
    assert con.execute("SELECT count(*) FROM teacher_labels WHERE work_id = 'W4'").fetchone()[0] == 1


def test_a_store_of_the_first_layout_is_migrated_without_loss():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE teacher_calls (call_id VARCHAR PRIMARY KEY, run_id VARCHAR, request_json VARCHAR, response_text VARCHAR)"
    )
    con.execute("INSERT INTO teacher_calls VALUES ('c0', 'r0', '{}', 'reply')")
    con.execute(
        "CREATE TABLE teacher_labels (label_id VARCHAR PRIMARY KEY, work_id VARCHAR, teacher VARCHAR, model VARCHAR, "
        "prompt_version VARCHAR, record_view VARCHAR, view_hash VARCHAR, status VARCHAR, categories VARCHAR[], domain VARCHAR, "
        "study_design VARCHAR, genre VARCHAR, about_ca_system BOOLEAN, about_ca_topic BOOLEAN, confidence VARCHAR, "
        "reason VARCHAR, error VARCHAR, attempts INTEGER, call_id VARCHAR, run_id VARCHAR, source VARCHAR, created_at TIMESTAMP)"
    )
    con.execute(
        "INSERT INTO teacher_labels (label_id, work_id, teacher, model, prompt_version, view_hash, status, categories) "
        "VALUES ('L0', 'W9', 'gemma', 'm', 'v1', 'vh', 'labelled', ['sts'])"
    )
    create_tables(con, legacy_prompt_shas={"v1": prompt_lock()["v1"]})
    assert con.execute("SELECT response_text FROM teacher_calls_v1").fetchone()[0] == "reply"
    assert con.execute("SELECT count(*) FROM teacher_calls").fetchone()[0] == 0
    assert existing_keys(con, "gemma", "m", "v1", prompt_lock()["v1"]) == {("W9", "vh")}
    assert con.execute("SELECT categories FROM teacher_labels").fetchone()[0] == ["sts"]
    create_tables(con)  # idempotent
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone()[0] == 1


def test_a_store_without_the_endpoint_column_is_migrated_in_place_when_storage_opens(tmp_path):
    """A store of the layout before teacher_calls had ``endpoint`` (every table there, teacher_calls without
    it): the next ``storage.connect()`` adds the column in place (last, where the catalog declares it), every old
    call is kept with endpoint NULL, new calls name their endpoint, and a replayed archive of an old run still fits."""
    import pyarrow as pa

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables import Table, catalog, layout_is_current
    from metacan_pipeline.tables.teachers import CALLS_SCHEMA

    storage = MetacanStorage(data_dir=str(tmp_path))
    old_calls = Table(
        "teacher_calls", "", "", pa.schema([f for f in CALLS_SCHEMA if f.name != "endpoint"]), ("call_id",), "duckdb"
    )
    con = duckdb.connect(str(storage.duckdb_path))
    create_tables(con)
    con.execute("DROP TABLE teacher_calls")
    con.execute(old_calls.ddl())
    con.execute(
        "INSERT INTO teacher_calls (call_id, run_id, teacher, work_ids, n_works, cost_usd, created_at) "
        "VALUES ('c0', 'r0', 'gemma', ['W1', 'W2'], 2, 0.25, TIMESTAMP '2026-01-01 00:00:00')"
    )
    assert not layout_is_current(con)
    con.close()

    with storage.connect() as con:
        cols = [r[0] for r in con.execute("DESCRIBE teacher_calls").fetchall()]
        assert cols == [f.name for f in catalog()["teacher_calls"].schema] and cols[-1] == "endpoint"
        assert con.execute("SELECT call_id, work_ids, cost_usd, endpoint FROM teacher_calls").fetchall() == [
            ("c0", ["W1", "W2"], 0.25, None)
        ]
        append_rows(con, [{"call_id": "c1", "teacher": "gemma", "endpoint": "gpu1"}, {"call_id": "c2"}], [])
        assert layout_is_current(con)
    with storage.connect() as con:  # nothing left to migrate: the second open changes nothing
        assert con.execute("SELECT call_id, endpoint FROM teacher_calls ORDER BY 1").fetchall() == [
            ("c0", None),
            ("c1", "gpu1"),
            ("c2", None),
        ]


def test_new_keys_are_unique_and_sort_in_the_order_they_were_made():
    """Time-ordered ids land at the right edge of the ``teacher_calls`` key index (benchmarks/bench_label_store.py)."""
    from metacan_pipeline.teachers.core.store import new_key

    keys = [new_key() for _ in range(5000)]
    assert len(set(keys)) == 5000 and keys == sorted(keys)
    assert all(len(k) == 32 and int(k, 16) >= 0 for k in keys)


def test_a_label_store_with_a_key_index_is_rebuilt_without_it_when_storage_opens(tmp_path):
    """A store of the layout where ``teacher_labels`` had a primary key (each flush's checkpoint wrote the
    index) is rebuilt in place when storage opens: every row kept in order, no primary key left, the other
    tables' keys untouched, and append_rows still stores a replayed label once."""
    import dataclasses

    from metacan_pipeline.storage import MetacanStorage
    from metacan_pipeline.tables import catalog, layout_is_current

    storage = MetacanStorage(data_dir=str(tmp_path))
    con = duckdb.connect(str(storage.duckdb_path))
    create_tables(con)
    con.execute("DROP TABLE teacher_labels")
    con.execute(dataclasses.replace(catalog()["teacher_labels"], key_index=True).ddl())
    rows = [_label(f"W{i}", label_id=f"L{i}") for i in range(3)]
    append_rows(con, [], rows)
    assert not layout_is_current(con)
    con.close()

    def primary_keys(con):
        q = "SELECT table_name FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' ORDER BY 1"
        return [r[0] for r in con.execute(q).fetchall()]

    with storage.connect() as con:
        assert "teacher_labels" not in primary_keys(con) and "teacher_calls" in primary_keys(con)
        assert con.execute("SELECT label_id, work_id, status FROM teacher_labels ORDER BY label_id").fetchall() == [
            (f"L{i}", f"W{i}", "labelled") for i in range(3)
        ]
        assert layout_is_current(con)
        append_rows(con, [], [rows[0], _label("W9", label_id="L9")])
        append_rows(con, [], [rows[0]])
        assert con.execute("SELECT count(*), count(DISTINCT label_id) FROM teacher_labels").fetchone() == (4, 4)
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "teacher_labels_keyed" not in tables


_FIRST_LAYOUT_LABELS = (
    "CREATE TABLE teacher_labels (label_id VARCHAR PRIMARY KEY, work_id VARCHAR, teacher VARCHAR, model VARCHAR, "
    "prompt_version VARCHAR, record_view VARCHAR, view_hash VARCHAR, status VARCHAR, categories VARCHAR[], domain VARCHAR, "
    "study_design VARCHAR, genre VARCHAR, about_ca_system BOOLEAN, about_ca_topic BOOLEAN, confidence VARCHAR, "
    "reason VARCHAR, error VARCHAR, attempts INTEGER, call_id VARCHAR, run_id VARCHAR, source VARCHAR, created_at TIMESTAMP)"
)

# Opens the store of argv[1] as storage does, and is SIGKILLed by the migration of the first layout once its labels
# are copied, before their prompt_sha is set (a process killed or OOM-killed half way: the copy of millions of labels
# takes seconds).
_KILLED_MIGRATION = """
import os, signal, sys

import duckdb

from metacan_pipeline.tables import create_tables
from metacan_pipeline.teachers.core.rubric import prompt_lock


class KilledHalfWay(dict):
    def items(self):
        os.kill(os.getpid(), signal.SIGKILL)


create_tables(duckdb.connect(sys.argv[1]), legacy_prompt_shas=KilledHalfWay(prompt_lock()))
"""


def test_a_first_layout_migration_killed_half_way_is_done_again_by_the_next_open(tmp_path):
    """Killed between the copy of the labels and their prompt_sha, the migration of the first layout left every label
    without it (or, killed sooner, in ``teacher_labels_old``), and the next open saw a current layout: the old labels
    were never reused. It is one transaction: the next open finds the first layout and migrates it whole."""
    import os
    import subprocess
    import sys

    from metacan_pipeline.storage import MetacanStorage

    storage = MetacanStorage(data_dir=str(tmp_path))
    con = duckdb.connect(str(storage.duckdb_path))
    con.execute("CREATE TABLE teacher_calls (call_id VARCHAR PRIMARY KEY, request_json VARCHAR, response_text VARCHAR)")
    con.execute("INSERT INTO teacher_calls VALUES ('c0', '{}', 'reply')")
    con.execute(_FIRST_LAYOUT_LABELS)
    con.execute(
        "INSERT INTO teacher_labels (label_id, work_id, teacher, model, prompt_version, view_hash, status, categories) "
        "SELECT 'L' || i, 'W' || i, 'gemma', 'm', 'v1', 'vh', 'labelled', ['sts'] FROM range(3000) t(i)"
    )
    con.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    killed = subprocess.run([sys.executable, "-c", _KILLED_MIGRATION, str(storage.duckdb_path)], env=env)
    assert killed.returncode == -9

    with storage.connect() as con:
        tables = sorted(r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall())
        assert "teacher_labels_old" not in tables and "teacher_calls_v1" in tables
        assert con.execute("SELECT response_text FROM teacher_calls_v1").fetchall() == [("reply",)]
        assert con.execute(
            "SELECT count(*), count(DISTINCT label_id), count(prompt_sha) FROM teacher_labels"
        ).fetchone() == (3000, 3000, 3000)
        assert len(existing_keys(con, "gemma", "m", "v1", prompt_lock()["v1"])) == 3000


def test_a_label_or_call_given_twice_in_one_batch_is_stored_once(tmp_path):
    """``teacher_labels`` has no key index: the anti join against the stored rows was all that kept ``label_id``
    unique, and a batch holding the same label twice (an archive line written twice, a caller adding a row
    again) stored it twice. A call given twice failed the whole batch on the ``call_id`` key instead."""
    from metacan_pipeline.storage import MetacanStorage

    storage = MetacanStorage(data_dir=str(tmp_path))
    first = _label("W1", label_id="L1")
    again = {**first, "reason": "the same id, written again"}
    call = {"call_id": "c1", "teacher": "gemma", "cost_usd": 0.5, "work_ids": ["W1"]}
    with storage.connect() as con:
        append_rows(con, [call, call], [first, _label("W2", label_id="L2"), again])
        append_rows(con, [call], [again, again])
        assert con.execute("SELECT label_id, work_id, reason FROM teacher_labels ORDER BY label_id").fetchall() == [
            ("L1", "W1", None),
            ("L2", "W2", None),
        ]
        assert con.execute("SELECT count(*), sum(cost_usd) FROM teacher_calls").fetchone() == (1, 0.5)


def test_a_label_without_its_id_is_refused_with_the_whole_batch():
    """``teacher_labels`` lost its key index, which also refused a NULL ``label_id``: append_rows refuses it now."""
    import pytest

    con = duckdb.connect()
    create_tables(con)
    with pytest.raises(ValueError, match="a teacher_labels row without its label_id: nothing of this batch was stored"):
        append_rows(con, [], [_label("W1", label_id="L1"), {**_label("W2"), "label_id": None}])
    assert con.execute("SELECT count(*) FROM teacher_labels").fetchone() == (0,)
