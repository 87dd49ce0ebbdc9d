"""The JSON API's contract held by a client nobody here wrote: Schemathesis reads the served OpenAPI document and
sends generated requests, valid and invalid, to every operation of ``metacan serve`` on loopback (a release with a
published student model, so ``POST /api/v1/score`` scores), with every check but one: no server error, every status
code and response documented, responses valid against their schemas, required headers present (``Allow`` on a 405),
no schema-violating request accepted, and more.

The check left out is ``positive_data_acceptance`` (a schema-valid request must not be refused). The cohort
filters have rules between parameters that OpenAPI 3.1 cannot state (a qualifier without what it qualifies, such as
``classifier_mode`` without ``classifier_category``; ``year_min`` after ``year_max``; a cursor this site did not
give), and the API refuses them with a 400 and one sentence saying which rule; that check would flag each one.
The refusals it found that were not such rules are fixed and tested where they live: ``score_arm`` alone
(:mod:`.test_cohort`), ``pair`` enumerated from the release (:mod:`.test_statistics`), the body rules of ``POST
/api/v1/score`` (:mod:`.test_score_api`).

Bounded: a fixed seed and number of examples per operation, so the run repeats and takes about a minute."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from metacan_pipeline_tests.builders.site import metacan_serve

EXAMPLES = 15
SEED = "20261207"


def test_schemathesis_finds_no_failure_in_the_api(scoring_release, tmp_path):
    storage = scoring_release[0]
    env = {**os.environ, "METACAN_DATA_DIR": str(storage.root), "METACAN_SITE_RATE_LIMIT": "off"}
    schemathesis = Path(sys.executable).with_name("schemathesis")
    with metacan_serve(env) as served:
        run = subprocess.run(
            [
                str(schemathesis),
                "run",
                f"{served.url}/api/v1/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                SEED,
                "--workers",
                "1",
                "--no-color",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
    out = run.stdout
    assert run.returncode == 0, f"Schemathesis found failures:\n{out[-8000:]}\n{run.stderr[-2000:]}"
    # every operation of the document was selected and tested, with no failure
    selected, total = map(int, re.search(r"Selected: (\d+)/(\d+)", out).groups())
    tested = int(re.search(r"Tested: (\d+)", out).group(1))
    assert selected == total == tested >= 12 and "Failures:" not in out, out[-3000:]
