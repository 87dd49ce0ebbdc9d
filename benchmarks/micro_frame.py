"""Per-record cost of each piece of the frame build, on the exact record mix of the scale input.

Usage::

    .venv/bin/python benchmarks/micro_frame.py [--rounds 3] [--extra-path DIR]

The scale input re-emits every real work record under ../shared/data/openalex equally often, so the
mean cost over those records (each serialised exactly as make_scale_input.py writes it) is the
per-work cost at any scale. Measures, in microseconds per work: ``json.loads`` of the line, reader
classification, ``work_row`` and its parts (``deinvert``, ``find_hits``, ``markup_to_text``), Arrow +
Parquet staging, ``frame_row``. Also times two candidate speed-ups without touching the pipeline:
``orjson.loads`` (when importable, e.g. from ``--extra-path``) and a word-set pre-filter in front of
the lexicon regexes (checked to give identical hits on every record).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


def per_work_us(fn, items, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        best = min(best, time.perf_counter() - t0)
    return best / len(items) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extra-path", default=None, help="folder to import orjson from (not the project venv)")
    args = ap.parse_args()
    if args.extra_path:
        sys.path.append(args.extra_path)

    import pyarrow as pa
    import pyarrow.parquet as pq

    from make_scale_input import DEFAULT_SOURCE, work_templates
    from metacan_pipeline.frame import lexicon
    from metacan_pipeline.frame.entities import EntityLists
    from metacan_pipeline.frame.routes import AdmissionRule, frame_row
    from metacan_pipeline.openalex.abstract import deinvert, markup_to_text
    from metacan_pipeline.openalex.reader import Record, _classify
    from metacan_pipeline.openalex.works import WORKS_SCHEMA, _keywords, work_row

    lines = [b"https://openalex.org/W90000000001".join(t) for t in work_templates(DEFAULT_SOURCE)]
    n = len(lines)
    objs = [json.loads(l) for l in lines]
    recs = [_classify(o, "data/works/updated_date=2025-10-06/part_000.gz", f"line {i}", i) for i, o in enumerate(objs)]
    rows = [work_row(r) for r in recs]
    r = args.rounds
    res: dict[str, float] = {}
    res["json.loads (line -> dict)"] = per_work_us(json.loads, lines, r)
    try:
        import orjson

        res["  candidate: orjson.loads"] = per_work_us(orjson.loads, lines, r)
    except ImportError:
        pass
    res["_classify (id -> kind, Record)"] = per_work_us(lambda o: _classify(o, "f", "line 1", 1), objs, r)
    res["work_row total"] = per_work_us(work_row, recs, r)
    res["  deinvert(abstract_inverted_index)"] = per_work_us(lambda o: deinvert(o.get("abstract_inverted_index")), objs, r)
    abstracts = [deinvert(o.get("abstract_inverted_index")) for o in objs]
    titles = [row["title_text"] for row in rows]
    kws = ["; ".join(_keywords(o)) for o in objs]
    fields = [{"title": t, "abstract": a, "keywords": k} for t, a, k in zip(titles, abstracts, kws)]
    res["  find_hits (3 tier regexes x 3 fields)"] = per_work_us(lexicon.find_hits, fields, r)
    res["  markup_to_text(title)"] = per_work_us(lambda o: markup_to_text(o.get("title") if isinstance(o.get("title"), str) else None), objs, r)

    # candidate: run the tier regexes only when, for some term, the text has that term's longest word as
    # a whole word (a regex match implies it: the term's \w+ words are whole words of the text). Checked
    # below to give identical hits on every record.
    word_re = re.compile(r"\w+")
    common = {"university", "of", "new", "first", "health", "statistics", "foundation", "for", "de", "du", "the", "st"}

    def key_word(term: str) -> str:
        words = word_re.findall(term.lower())
        return max([w for w in words if w not in common] or words, key=len)

    key_words = {key_word(t) for t in lexicon.TIER_A + lexicon.TIER_B + lexicon.TIER_C}

    def find_hits_prefiltered(f: dict) -> list:
        for text in f.values():
            if text and not key_words.isdisjoint(word_re.findall(text.lower())):
                return lexicon.find_hits(f)
        return []

    same = all(find_hits_prefiltered(f) == lexicon.find_hits(f) for f in fields)
    res[f"  candidate: key-word prefilter + find_hits (identical hits: {same})"] = per_work_us(find_hits_prefiltered, fields, r)
    would_skip = sum(1 for f in fields
                     if not any(t and not key_words.isdisjoint(word_re.findall(t.lower())) for t in f.values()))

    big = (rows * (20_000 // n + 1))[:20_000]  # one staging batch, as openalex_works writes (_STAGE_ROWS)

    def from_pylist(_):
        return pa.Table.from_pylist(big, schema=WORKS_SCHEMA)

    table = from_pylist(None)
    res["Arrow Table.from_pylist (20k-row batch)"] = min(_timeit(from_pylist) for _ in range(r)) / len(big) * 1e6
    res["Parquet write of that batch"] = min(_timeit(lambda _: pq.write_table(table, io.BytesIO())) for _ in range(r)) / len(big) * 1e6
    ent = EntityLists({"F4320334593": "NSERC"}, {}, {}, {"funder": "x", "source": "x", "institution": "x"})
    rule = AdmissionRule()
    res["frame_row"] = per_work_us(lambda w: frame_row(w, ent, rule), rows, r)

    print(f"{n} distinct work records (the scale input's exact mix), mean of each, best of {r} rounds")
    print(f"{'piece':<72}{'us/work':>9}")
    for k, v in res.items():
        print(f"{k:<72}{v:>9.0f}")
    print(f"records where the key-word prefilter skips every regex: {would_skip}/{n}")
    one_pass = res["json.loads (line -> dict)"] + res["_classify (id -> kind, Record)"]
    print(f"=> canadian_entities pays ~{one_pass:.0f} us/work just to parse and discard each work; "
          f"openalex_works ~{one_pass + res['work_row total'] + res['Arrow Table.from_pylist (20k-row batch)'] + res['Parquet write of that batch']:.0f} us/work")


def _timeit(fn) -> float:
    t0 = time.perf_counter()
    fn(None)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
