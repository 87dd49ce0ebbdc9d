"""Tests of metacan_pipeline.storage: scratch folders named for their process, and the sweep of a killed one's."""

import os
import socket
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (pa.parquet)

from metacan_pipeline.storage import MetacanStorage, process_tag, scratch_path, sweep_dead


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_sweep_removes_this_hosts_dead_processes_scratch_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "node-7.lab")  # '-' would split the tag: it becomes '_'
    assert process_tag() == f"node_7.lab-pid{os.getpid()}"
    dead = _dead_pid()
    gone = [tmp_path / f".t.tmp-node_7.lab-pid{dead}-aa", tmp_path / f".t.tmp-node_7.lab-pid{dead}-bb.parquet"]
    kept = [
        tmp_path / f".t.tmp-node_7.lab-pid{os.getpid()}-cc",  # this live process's
        tmp_path / f".t.tmp-other-pid{dead}-dd",  # another host's (a shared file system)
        tmp_path / f".u.tmp-node_7.lab-pid{dead}-ee",  # another prefix
        tmp_path / ".t.tmp-1a2b3c4d",  # a name without host and pid: no owner to ask
    ]
    for p in (gone[0], kept[0], kept[1], kept[2], kept[3]):
        p.mkdir()
        (p / "part-00000.parquet").write_bytes(b"x" * 10)
    gone[1].write_bytes(b"x")
    assert sweep_dead(tmp_path, ".t.tmp-") == 2
    assert not any(p.exists() for p in gone) and all(p.exists() for p in kept)
    new = scratch_path(tmp_path, ".t.tmp-")
    assert new.parent == tmp_path and new.name.startswith(f".t.tmp-node_7.lab-pid{os.getpid()}-") and not new.exists()


def test_a_table_write_removes_the_folder_a_killed_write_left(tmp_path):
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    storage.write_table("frame_sample", pa.table({"id": ["W1"]}))
    left = storage.warehouse / f".frame_sample.tmp-{process_tag().rsplit('-pid', 1)[0]}-pid{_dead_pid()}-0badf00d"
    left.mkdir()
    (left / "part-00000.parquet").write_bytes(b"half a file")
    assert storage.write_table("frame_sample", pa.table({"id": ["W1", "W2"]})) == 2
    assert not left.exists()
    assert sorted(p.name for p in storage.warehouse.iterdir() if p.name.startswith(".frame_sample")) == []
    assert storage.read_table("frame_sample")["id"].to_pylist() == ["W1", "W2"]


def test_a_name_whose_pid_is_no_pid_stops_no_write_and_is_left_alone(tmp_path):
    """A pid part that ``str.isdigit`` accepts but that is no pid (``'²'``, digits past pid_t) raises nothing out
    of the write: no process of ours has such a pid, so the entry is not ours, and stays."""
    storage = MetacanStorage(data_dir=str(tmp_path / "data"))
    storage.write_table("frame_sample", pa.table({"id": ["W1"]}))
    host = process_tag().rsplit("-pid", 1)[0]
    odd = [
        storage.warehouse / f".frame_sample.tmp-{host}-pid{pid}-0badf00d"
        for pid in ("²", "99999999999999999999", "4294967296", "2147483648")
    ]
    dead = storage.warehouse / f".frame_sample.tmp-{host}-pid{_dead_pid()}-0badf00d"
    for path in (*odd, dead):
        path.mkdir()
    assert storage.write_table("frame_sample", pa.table({"id": ["W1", "W2"]})) == 2
    assert storage.read_table("frame_sample")["id"].to_pylist() == ["W1", "W2"]
    assert all(p.is_dir() for p in odd) and not dead.exists()
    assert sweep_dead(storage.warehouse, ".frame_sample.tmp-") == 0


def test_a_copied_or_moved_data_folder_reads_its_own_tables_not_the_originals(tmp_path):
    import shutil

    original = MetacanStorage(data_dir=str(tmp_path / "original"))
    original.write_table("frame", pa.table({"id": ["W1", "W2"]}))
    copy = MetacanStorage(data_dir=str(tmp_path / "copy"))
    shutil.copytree(original.root, copy.root)
    for old in copy.table_dir("frame").glob("*.parquet"):  # the copy's frame changes, by files alone
        old.unlink()
    pa.parquet.write_table(pa.table({"id": ["W1", "W2", "W3"]}), copy.table_dir("frame") / "part-0.parquet")

    def ids(storage: MetacanStorage, read_only: bool) -> list[str]:
        with storage.connect(read_only=read_only) as con:
            return sorted(r[0] for r in con.execute("SELECT id FROM frame").fetchall())

    def stored(storage: MetacanStorage) -> str:
        with storage.connect(read_only=True) as con:
            return con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'frame' AND NOT temporary").fetchone()[
                0
            ]

    # the copy's catalog holds the original's absolute path: a read-only connection shadows it, a writing one replaces it
    assert str(original.warehouse) in stored(copy)
    assert ids(copy, read_only=True) == ["W1", "W2", "W3"] and ids(original, read_only=True) == ["W1", "W2"]
    assert str(original.warehouse) in stored(copy)  # read-only: the catalog is left as it is
    assert ids(copy, read_only=False) == ["W1", "W2", "W3"]
    assert str(copy.warehouse) in stored(copy) and str(original.warehouse) not in stored(copy)
    shutil.rmtree(original.root)  # moved: the original is gone, the copy still answers
    assert ids(copy, read_only=True) == ["W1", "W2", "W3"]


def test_a_reader_of_a_folder_where_no_lock_file_can_be_made_reads_without_it(storage, monkeypatch):
    """A read-only mount refuses the lock file (EROFS; as root the test cannot make a folder unwritable, so the lock's
    own refusal is what is planted): reading still works, writing still refuses."""
    import errno

    import pytest

    from metacan_pipeline import storage as storage_module

    storage.write_table("frame", pa.Table.from_pylist([{"id": "W1"}, {"id": "W2"}]))

    class ReadOnlyMountLock:
        def __init__(self, path):
            self.path = path

        def acquire(self):
            raise OSError(errno.EROFS, "Read-only file system", self.path)

        def release(self):  # pragma: no cover - never acquired
            raise AssertionError("released a lock never acquired")

    monkeypatch.setattr(storage_module, "FileLock", ReadOnlyMountLock)
    with storage.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM frame").fetchone() == (2,)
    with pytest.raises(OSError, match="Read-only file system"), storage.connect() as con:
        pass
