"""The blocking checks of ``work_records`` on a large table: the code before (every record's JSON parsed
in the step process by both) against this checkout (``records_human_layers_backed`` parses only the records whose
text holds a human-layer key; ``records_may_ship`` checks the files in worker processes, parsing with orjson).

Reads the ``work_records`` of a data folder (e.g. one ``rehearsal.py`` wrote, ``--data <scratch>/run_<N>/data``)
and invokes the two asset checks' functions on it in a fresh child per stage (``_common.run_stage``): ``before`` on
the code of ``--before`` (unpacked with ``_common.code_tree``), ``after`` on this checkout. Printed per check:
seconds inside the child, records checked and the verdict (the same in both); the child's peak RSS (its worker
processes included); the ratios after / before.

The figure: after / before seconds and peak RSS (to beat: below 1, the same verdicts). Writes
``benchmarks/out/records_check.json``.

Usage: nice .venv/bin/python benchmarks/bench_records_check.py --data DIR --before REV
       .venv/bin/python benchmarks/bench_records_check.py --smoke   (300 records of pages_records, HEAD as before)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    REPO,
    add_child_args,
    add_smoke_arg,
    code_tree,
    machine,
    machine_line,
    ratio,
    record,
    run_stage,
    use_code,
    write_child_result,
)


def stage_child(data: Path) -> dict:
    from metacan_pipeline.publish.checks import records_human_layers_backed, records_may_ship
    from metacan_pipeline.storage import MetacanStorage

    storage = MetacanStorage(data_dir=str(data))
    out = {}
    for name, check in (("human_layers", records_human_layers_backed), ("may_ship", records_may_ship)):
        t0 = time.perf_counter()
        result = check(storage=storage)  # the asset check's own function, invoked directly
        out[name] = {
            "seconds": time.perf_counter() - t0,
            "passed": result.passed,
            "checked": result.metadata["records_checked"].value,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="the data folder whose work_records is checked (required)")
    ap.add_argument("--before", help="the commit whose code is the baseline (required)")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/metacan-records-check"))
    add_smoke_arg(ap, "300 records written to a temporary folder, HEAD as the baseline")
    add_child_args(ap, ("code", "datadir"))
    args = ap.parse_args()
    if args._stage:
        use_code(args.code)
        write_child_result(stage_child(Path(args.datadir)), args.result)
        return
    with tempfile.TemporaryDirectory(prefix="metacan-records-check-") as tmp:
        if args.smoke:
            from pages_records import write_release_inputs

            args.before = args.before or "HEAD"
            args.scratch = Path(tmp) / "scratch"
            if args.data is None:
                args.data = Path(tmp) / "data"
                write_release_inputs(args.data, 300)
        if args.data is None or args.before is None:
            ap.error("--data and --before are required")
        measure(args)


def measure(args: argparse.Namespace) -> None:
    started = machine()
    print(machine_line())
    args.scratch.mkdir(parents=True, exist_ok=True)
    results = {}
    for stage, code in (("before", str(code_tree(args.before, args.scratch))), ("after", "")):
        extra = ["--datadir", str(args.data), "--code", code]
        res, _, _ = run_stage(Path(__file__), stage, stage, args.scratch, extra, args.scratch / f"{stage}.log")
        results[stage] = res
        for check in ("human_layers", "may_ship"):
            r = res[check]
            print(
                f"{stage:<6} ({args.before if code else 'this checkout'}) {check:<12} {r['seconds']:7.1f} s, "
                f"{r['checked']:,} records checked, passed {r['passed']}; load {res['load_before']} -> {res['load_after']}",
                flush=True,
            )
        print(f"{stage:<6} peak RSS {res['peak_rss_mib']:,.0f} MiB ({res['max_processes']} processes)", flush=True)
    ratios = {}
    for check in ("human_layers", "may_ship"):
        ratios[f"{check}_seconds/before"] = ratio(
            results["after"][check]["seconds"], results["before"][check]["seconds"]
        )
        print(f"after / before: {check} seconds {ratios[f'{check}_seconds/before']}")
    ratios["peak_rss/before"] = ratio(results["after"]["peak_rss_mib"], results["before"]["peak_rss_mib"])
    figures = {"data": str(args.data), "before": args.before, "stages": results}
    record("records_check", figures, ratios=ratios, started=started, smoke=args.smoke)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
