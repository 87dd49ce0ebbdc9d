"""The blocking checks of ``work_records`` on a large table (issue 17): the code before (every record's JSON parsed
in the step process by both) against this checkout (``records_human_layers_backed`` parses only the records whose
text holds a human-layer key; ``records_may_ship`` checks the files in worker processes, parsing with orjson).

Reads the ``work_records`` of a data folder (e.g. a rehearsal's, ``--data /tmp/reh43/run_4300000_admitted/data``)
and invokes the two asset checks' functions on it in a fresh child per stage (``_common.run_stage``): ``before`` on
the code of ``--before`` (unpacked with ``_common.code_tree``), ``after`` on this checkout. Printed per check:
seconds inside the child, records checked and the verdict (the same in both); the child's peak RSS (its worker
processes included); the ratios after / before.

Usage: nice .venv/bin/python benchmarks/bench_records_check.py --data DIR --before REV
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import REPO, add_child_args, code_tree, machine_line, run_stage, use_code, write_child_result


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
    add_child_args(ap, ("code", "datadir"))
    args = ap.parse_args()
    if args._stage:
        use_code(args.code)
        write_child_result(stage_child(Path(args.datadir)), args.result)
        return
    if args.data is None or args.before is None:
        ap.error("--data and --before are required")
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
    for check in ("human_layers", "may_ship"):
        ratio = results["after"][check]["seconds"] / max(results["before"][check]["seconds"], 1e-9)
        print(f"after / before: {check} seconds {ratio:.4f}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
