"""Tests of metacan_pipeline.teachers.core.batches: the round proposals the label_batches asset adds to a batch."""

from metacan_pipeline.student.rounds import ACTIVE_BATCH


def test_label_batches_adds_every_round_proposal_once_and_leaves_other_batches(storage):
    from metacan_pipeline.teachers.core.batches import add_round_proposals

    with storage.connect() as con:
        con.execute("INSERT INTO label_batches VALUES ('by_hand', 'W1', now(), 'loaded by hand')")
        con.execute(
            "INSERT INTO machine_round_proposals VALUES (1, 'W1', 'largest arm spread', 0.9, 0.1, 0.8), "
            "(1, 'W2', 'random sentinel', 0.5, 0.5, 0.0)"
        )
        assert add_round_proposals(con) == 2 and add_round_proposals(con) == 0
        con.execute("INSERT INTO machine_round_proposals VALUES (2, 'W3', 'closest to 0.5', 0.4, 0.6, 0.2)")
        assert add_round_proposals(con) == 1
        rows = con.execute("SELECT batch, work_id, source FROM label_batches ORDER BY batch, work_id").fetchall()
    assert rows == [
        (ACTIVE_BATCH, "W1", "machine_scores round 1: largest arm spread"),
        (ACTIVE_BATCH, "W2", "machine_scores round 1: random sentinel"),
        (ACTIVE_BATCH, "W3", "machine_scores round 2: closest to 0.5"),
        ("by_hand", "W1", "loaded by hand"),
    ]


def test_the_newest_round_table_says_no_score_for_a_head_that_gives_none(storage):
    from metacan_pipeline.teachers.core.batches import newest_round_markdown

    with storage.connect() as con:
        assert newest_round_markdown(con) == "_(no round has proposed a work yet)_"
        con.execute(
            "INSERT INTO machine_round_proposals VALUES (1, 'W1', 'old round', 0.5, 0.5, 0.0), "
            "(2, 'W2', 'closest to 0.5', 0.4123, NULL, NULL)"
        )
        table = newest_round_markdown(con)
    assert table.startswith("round 2\n\n| work | reason | codex | gemma | spread |")
    assert table.endswith("| W2 | closest to 0.5 | 0.412 | no score | no score |\n") and "W1" not in table
