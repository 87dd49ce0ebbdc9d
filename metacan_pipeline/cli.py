"""The ``metacan`` command: run the whole graph in-process and print what it produced.

``metacan run`` materializes every asset and check on the configured inputs (the embedded Gemma
teacher by default) and then prints the summary (:mod:`metacan_pipeline.reports`); ``metacan summary``
prints it again. Runs are
recorded in the Dagster instance under ``$DAGSTER_HOME`` (default ``<data dir>/dagster_home``), so
``dagster dev`` over the same folder shows them.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from . import settings

app = typer.Typer(add_completion=False, help="metacan_pipeline: map Canadian meta-research from OpenAlex.")


#: The instance settings a new DAGSTER_HOME gets: no telemetry (no calls out), and one run at a time: the
#: sensor frame_build_after_refresh starts a frame_build run after each inventory, which must not build the
#: frame beside a run the user launched, and DuckDB takes one writer per file.
DAGSTER_YAML = "telemetry:\n  enabled: false\nconcurrency:\n  runs:\n    max_concurrent_runs: 1\n"


def instance_home(data_dir: str) -> str:
    """``$DAGSTER_HOME``, or ``<data_dir>/dagster_home``, created with :data:`DAGSTER_YAML` when new; sets the variable."""
    home = settings.dagster_home(data_dir)
    settings.export(settings.DAGSTER_HOME_ENV, home)
    Path(home).mkdir(parents=True, exist_ok=True)
    dagster_yaml = Path(home) / "dagster.yaml"
    if not dagster_yaml.exists():
        dagster_yaml.write_text(DAGSTER_YAML)
    return home


def _instance(data_dir: str):
    import dagster as dg

    instance_home(data_dir)
    return dg.DagsterInstance.get()


@app.command()
def dev(
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
    port: int = typer.Option(3000, help="Port of the Dagster UI."),
) -> None:
    """Start the Dagster UI (``dagster dev -w workspace.yaml``) on the instance ``metacan run`` uses."""
    from .storage import default_data_dir

    home = instance_home(data_dir or default_data_dir())
    typer.echo(f"Dagster instance: {home} (the one metacan run uses); UI on http://localhost:{port}")
    dagster = Path(sys.executable).with_name("dagster")
    os.execv(str(dagster), [str(dagster), "dev", "-w", "workspace.yaml", "-p", str(port)])


@app.command()
def run(
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
    openalex_dir: str = typer.Option(
        None,
        help="OpenAlex input folder, or several separated by ':' (default $METACAN_OPENALEX_DIR or "
        "../shared/data/openalex:../shared/data/openalex_more).",
    ),
) -> None:
    """Materialize the whole asset graph (checks included) in-process, then print the summary."""
    if data_dir:
        settings.export(settings.DATA_DIR_ENV, data_dir)
    if openalex_dir:
        settings.export(settings.OPENALEX_DIR_ENV, openalex_dir)
    from .definitions import build_resources, materialize_in_process
    from .reports import summary_text
    from .storage import default_data_dir

    data = default_data_dir()
    try:
        resources = build_resources()
        resources["llm_server"].threads()  # METACAN_LLAMA_THREADS, checked before anything runs
        settings.parts_url()  # METACAN_PARTS_URL (read by frame_parts, hours into a run on a large frame)
        settings.record_workers()  # METACAN_RECORD_WORKERS (read by work_records, near the end of a run)
    except ValueError as exc:
        typer.echo(f"metacan run: {exc}", err=True)
        raise typer.Exit(2) from None
    instance = _instance(data)
    interrupt_on_sigterm()
    t0 = time.monotonic()
    result = materialize_in_process(instance, resources)
    elapsed = time.monotonic() - t0
    if not result.success:
        failed = [e.step_key for e in result.all_events if e.is_step_failure]
        typer.echo(
            f"Run {result.run_id} FAILED after {elapsed:.0f}s at step(s) {failed}; see the log above or `dagster dev` "
            f"(DAGSTER_HOME={settings.dagster_home(data)}).",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(f"\nRun {result.run_id} succeeded in {elapsed:.0f}s.")
    typer.echo(summary_text(data, result.run_id))


def interrupt_on_sigterm() -> None:
    """Make SIGTERM (``kill``, systemd stopping a service, a CI job cancelled) stop ``metacan run`` as Ctrl-C does:
    Dagster interrupts the running step, which keeps every label and part it stored, stops the embedded teacher
    server, and marks the run failed. Without it Python died at once, leaving the teacher server running. The
    handlers are Dagster's own, as its command line installs them."""
    from dagster._utils.interrupts import setup_interrupt_handlers

    setup_interrupt_handlers()


def _print_lineage(db: Path, work_ids: list[str], as_json: bool) -> int:
    """Print the lineage of each id from ``db`` (read-only); returns how many ids are not in the frame."""
    import json

    import duckdb

    from .publish.lineage import lineage_of
    from .reports import lineage_text

    con = duckdb.connect(str(db), read_only=True)
    try:
        views = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "work_lineage" not in views:
            typer.echo(f"{db} has no work_lineage table yet: materialize work_records (`metacan run`) first", err=True)
            raise typer.Exit(1)
        missing = 0
        for wid in work_ids:
            row = lineage_of(con, wid)
            if row is None:
                typer.echo(f"{wid}: not in the frame of {db}", err=True)
                missing += 1
                continue
            if "page_manifest" in views:
                page = con.execute(
                    "SELECT page_path, rendered_at, run_id FROM page_manifest WHERE id = ?", [wid]
                ).fetchone()
                if page:
                    row.update(page_path=page[0], rendered_at=str(page[1]), page_run_id=page[2])
            typer.echo(json.dumps(row, default=str) if as_json else lineage_text(row))
        return missing
    finally:
        con.close()


@app.command()
def lineage(
    work_ids: Annotated[list[str], typer.Argument(help="OpenAlex work ids (W followed by digits), e.g. W2741809807.")],
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one object per work) instead of text."),
) -> None:
    """Print what produced each number a work's page shows: frame build, input record, entity lists, every
    teacher call (model, prompt version, request hash, time), the model version and each stage's run."""
    import duckdb

    from .openalex.ids import is_work_id
    from .storage import default_data_dir

    bad = [w for w in work_ids if not is_work_id(w)]
    if bad:
        typer.echo(
            f"not a work id: {', '.join(repr(b) for b in bad)}; give ids like W2741809807 (W followed by digits)",
            err=True,
        )
        raise typer.Exit(2)
    db = Path(data_dir or default_data_dir(), "metacan.duckdb")
    if not db.exists():
        typer.echo(
            f"no database at {db}: run `metacan run` (or materialize work_records in the Dagster UI) first", err=True
        )
        raise typer.Exit(1)
    try:
        missing = _print_lineage(db, work_ids, as_json)
    except duckdb.Error as exc:  # held by a writing run, unreadable, or a table's files gone
        typer.echo(
            f"cannot read the lineage from {db}: {str(exc).splitlines()[0]}. If a run is writing the database, try again "
            f"when it ends; otherwise re-materialize work_records (`metacan run`).",
            err=True,
        )
        raise typer.Exit(1) from None
    if missing:
        raise typer.Exit(1)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for every interface)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    data_dir: str = typer.Option(
        None, help="Output folder holding site/releases (default $METACAN_DATA_DIR or ./data)."
    ),
    row_cap: int = typer.Option(100_000, help="Most rows one export returns (the cap is declared in the export)."),
) -> None:
    """Serve the evidence browser (cohort builder, saved cohorts, work pages, exports, in English and under /fr/ in
    French; JSON API under /api/v1/, documented at /api/v1/docs) over the current release database, which the asset
    site_database builds (uvicorn, read-only DuckDB). The API's per-client rate limit is METACAN_SITE_RATE_LIMIT.
    The audit study's coding pages are on the same server under /coding/ (coders from `metacan coders add`, tasks
    from `metacan coding load-tasks` or the asset coding_tasks)."""
    import uvicorn

    from .site.build.release import ReleaseUnavailable
    from .site.web.app import create_app
    from .site.web.saved import QueryStoreUnavailable
    from .storage import default_data_dir

    try:
        asgi = create_app(data_dir or default_data_dir(), row_cap=row_cap)
    except (ReleaseUnavailable, QueryStoreUnavailable, ValueError) as exc:  # ValueError: METACAN_SITE_RATE_LIMIT
        typer.echo(f"metacan serve: {exc}", err=True)
        raise typer.Exit(1) from None
    info = asgi.state.site.info
    typer.echo(f"Serving release {info.release_id} ({info.n_works} works) on http://{host}:{port}/ (Ctrl-C stops it)")
    uvicorn.run(asgi, host=host, port=port, log_level="info")


@app.command()
def summary(data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data).")) -> None:
    """Print what the last run produced (frame, labels, predictions, pages)."""
    from .reports import summary_text
    from .storage import default_data_dir

    text = summary_text(data_dir or default_data_dir())
    typer.echo(text)
    if text.startswith("Nothing to summarise"):
        raise typer.Exit(1)


@app.command("release")
def release_command(
    version: str = typer.Option(
        "", "--version", help="Version of a new release, e.g. 2026.1 (default: <YYYY.MM.DD>-<8 hex of its content>)."
    ),
    author: list[str] = typer.Option(
        [], help="An author CITATION.cff names (repeat the option; default: metacan_pipeline contributors)."
    ),
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
) -> None:
    """Cut a frozen release of what the last run published (the asset ``release`` with ``cut: true``).

    Freezes the frame, direct labels, predictions, machine scores, human validation and records under
    ``data/releases/<version>/``; when nothing changed since a release, names that release and writes nothing.
    Works that enter the frame later form the rolling layer of the next ``metacan run``.
    """
    import dagster as dg

    from .definitions import build_resources
    from .release.assets import ReleaseConfig, release, release_matches_its_hashes
    from .release.bundle import ReleaseError, check_version
    from .storage import default_data_dir

    try:  # before a run starts: one sentence, not a run's stack trace
        check_version(version)
    except ReleaseError as exc:
        typer.echo(f"metacan release: {exc}", err=True)
        raise typer.Exit(2) from None
    data = data_dir or default_data_dir()
    config = ReleaseConfig(cut=True, release_version=version, **({"citation_authors": author} if author else {}))
    result = dg.materialize(
        [release, release_matches_its_hashes],
        resources=build_resources(data),
        instance=_instance(data),
        run_config=dg.RunConfig({"release": config}),
        raise_on_error=False,
    )
    if not result.success:
        errors = [e.event_specific_data.error.message for e in result.all_events if e.is_step_failure]
        checks = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed]
        typer.echo(f"no release: {' '.join(errors) or 'failed checks: ' + ', '.join(checks)}", err=True)
        raise typer.Exit(1)
    md = {k: v.value for k, v in result.asset_materializations_for_node("release")[0].metadata.items()}
    verb = "reused (nothing changed since it was cut)" if md["reused"] else "cut"
    typer.echo(f"release {md['release_version']} {verb}: {md['folder']}")


@app.command("import-labels")
def import_labels(
    path: Path = typer.Argument(
        ..., exists=True, dir_okay=False, help="Labels in our schema (SPEC section 4): a JSON array or JSON Lines."
    ),
    teacher: str = typer.Option(..., help="Teacher name to store them under (not a registry teacher's name)."),
    model: str = typer.Option(..., help="Model that produced them."),
    prompt_version: str = typer.Option(..., help="Prompt or rubric version they were produced under."),
    record_view: str = typer.Option("title_abstract", help="What the labeller saw."),
    source: str = typer.Option(..., help="Where they come from (who, when, which study)."),
    absent: list[str] = typer.Option([], help="A label field the source never provides (repeat the option)."),
    data_dir: str = typer.Option(None, help="Output folder (default $METACAN_DATA_DIR or ./data)."),
) -> None:
    """Import labels produced elsewhere into the label store, validated like a teacher's replies.

    Invalid records become failed rows with their cause; importing the same file again adds nothing.
    Materialize ``teacher_agreement`` afterwards to compare them with the other teachers.
    """
    from .storage import MetacanStorage, default_data_dir
    from .teachers.imports import ImportSpec, import_file
    from .teachers.registry import load_registry

    if teacher in load_registry():
        typer.echo(
            f"--teacher {teacher}: that is a registry teacher's name; imported labels need a name of their own "
            f"(e.g. {teacher}_external), so that they never mix with the labels the registry teacher buys",
            err=True,
        )
        raise typer.Exit(2)
    spec = ImportSpec(
        teacher=teacher,
        model=model,
        prompt_version=prompt_version,
        record_view=record_view,
        source=source,
        absent=frozenset(absent),
    )
    with MetacanStorage(data_dir=data_dir or default_data_dir()).connect() as con:
        report = import_file(con, path, spec, run_id=None)
    if report.already_imported:
        typer.echo(f"{path}: already imported for {teacher}; nothing added")
        return
    typer.echo(
        f"{path}: {report.labelled} labelled, {report.failed} failed (invalid), {report.existing} unchanged (already the current label), "
        f"{len(report.duplicates)} duplicate ids skipped"
    )
    for file, index, work_id, cause in report.invalid[:20]:
        typer.echo(f"  record {index + 1} of {Path(file).name} ({work_id or 'no id'}): {cause}", err=True)


@app.command()
def fetch(
    out: str = typer.Option(..., help="Archive folder; point METACAN_OPENALEX_DIR at it afterwards."),
    from_updated_date: str = typer.Option(
        None, help="Only works updated since this date (YYYY-MM-DD): an incremental window."
    ),
    base_url: str = typer.Option("https://api.openalex.org", help="OpenAlex API base URL."),
    api_key_env: str = typer.Option(
        "OPENALEX_API_KEY", help="Environment variable holding the API key (never logged)."
    ),
    per_page: int = typer.Option(200, help="Results per page (100 is used if the server refuses 200)."),
    max_calls: int = typer.Option(10_000, help="Per-day call budget, shared by all runs on this archive."),
    max_cost_usd: float = typer.Option(5.0, help="Per-day cost budget in USD (meta.cost_usd)."),
) -> None:
    """Harvest the Canadian entity lists and one query per route from the OpenAlex API into an archive.

    Every page is archived gzip-compressed with its request and time; pages already archived are not
    bought again, so an interrupted harvest resumes where it stopped. The archive is a valid input
    folder for the frame (``METACAN_OPENALEX_DIR=<out>/pages make run``).
    """
    from .openalex.api import Budget, BudgetExhausted, OpenAlexClient, OpenAlexError, route_filters
    from .openalex.ids import short_id

    client = OpenAlexClient(
        Path(out),
        base_url=base_url,
        api_key_env=api_key_env,
        per_page=per_page,
        budget=Budget(max_calls=max_calls, max_cost_usd=max_cost_usd),
    )
    try:
        ids: dict[str, list[str]] = {}
        for entity in ("funders", "sources", "institutions"):
            found = (
                short_id(r.get("id"))
                for p in client.iter_pages("country_code:ca", endpoint=f"/{entity}")
                for r in p["results"]
            )
            ids[entity] = [i for i in found if i]
            typer.echo(f"{entity}: {len(ids[entity])} Canadian")
        for f in route_filters(ids["funders"], ids["sources"], from_updated_date):
            n = sum(len(p["results"]) for p in client.iter_pages(f))
            typer.echo(f"{f[:90]}{'...' if len(f) > 90 else ''}: {n} works")
    except BudgetExhausted as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(3) from None
    except OpenAlexError as exc:
        typer.echo(f"OpenAlex harvest stopped: {exc}", err=True)
        raise typer.Exit(4) from None
    finally:
        client.close()
    typer.echo(f"{client.calls_made} calls made, {client.pages_from_archive} pages read back from the archive {out}")


@app.command("evaluate-pilot")
def evaluate_pilot_command(
    features: Annotated[
        list[str] | None, typer.Option(help="Feature backend: tfidf or minilm (repeat for both). Default tfidf.")
    ] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option(
            help="Whose labels (repeat for several). Set screening: a (claude-sonnet-4-6) or b (gpt-5.6-sol), default both. "
            "Set frame1k: opus_r1, codex_r1, grok_r1 or adjudicated, default all four."
        ),
    ] = None,
    pilot_set: Annotated[
        str,
        typer.Option(
            "--set",
            help="screening: the earlier two-screener pilot (no venues: groups are titles); "
            "frame1k: the three-arm sample whose works name their venue (groups are venues).",
        ),
    ] = "screening",
    works: Annotated[
        str | None,
        typer.Option(
            help="Set screening only. joined: the labels_joined.json works (design-weighted, default); "
            "all: every work screener b labelled (unweighted)."
        ),
    ] = None,
    unweighted: Annotated[
        bool, typer.Option(help="Ignore the design weights (fit and metrics). frame1k has none.")
    ] = False,
    folds: Annotated[
        int,
        typer.Option(
            help="Grouped CV folds (fewer if fewer groups; for frame1k also if fewer venue groups hold a positive)."
        ),
    ] = 5,
    pilot_dir: Annotated[
        str | None,
        typer.Option(help="MetaCan pilot folder (default $METACAN_PILOT_DIR or ../shared/data/metacan_pilot)."),
    ] = None,
) -> None:
    """AP and AUROC of the student's metaresearch head trained on the MetaCan pilot labels, under grouped CV.

    One line per labels x feature backend; see metacan_pipeline/student/pilot_eval.py for how the
    pilot's fields map to ours (labels, title-only text, groups, design weights) in either set.
    """
    from .student.pilot_eval import PILOT_SETS

    folder = Path(pilot_dir or settings.pilot_dir())
    if not folder.is_dir():
        typer.echo(f"pilot folder {folder.resolve()} not found: pass --pilot-dir or set $METACAN_PILOT_DIR", err=True)
        raise typer.Exit(2)
    if pilot_set not in PILOT_SETS:
        typer.echo(f"evaluate-pilot: --set {pilot_set!r}: expected one of {', '.join(PILOT_SETS)}", err=True)
        raise typer.Exit(2)
    if pilot_set == "frame1k":
        if works is not None:
            typer.echo(
                "evaluate-pilot: --works applies to --set screening only (frame1k evaluates all its 750 works)",
                err=True,
            )
            raise typer.Exit(2)
        _evaluate_frame1k(folder, features or ["tfidf"], labels, folds)
        return
    from .reports import pilot_note
    from .student.pilot_eval import evaluate_pilot, format_table, pilot_works

    works = works or "joined"
    results = []
    try:
        for screener in labels or ["a", "b"]:
            for kind in features or ["tfidf"]:
                results.append(
                    evaluate_pilot(folder, kind, screener, works, weighted=False if unweighted else None, folds=folds)
                )
    except (ValueError, ImportError) as exc:
        typer.echo(f"evaluate-pilot: {exc}", err=True)
        raise typer.Exit(2) from None
    _, dropped = pilot_works(folder)
    typer.echo(format_table(results))
    typer.echo(pilot_note(results[0], dropped))


def _evaluate_frame1k(folder: Path, features: list[str], labels: list[str] | None, folds: int) -> None:
    from .reports import frame1k_note
    from .student.pilot_eval import FRAME1K_ARMS, evaluate_frame1k, format_frame1k_table, frame1k_works

    results = []
    try:
        for arm in labels or list(FRAME1K_ARMS):
            for kind in features:
                results.append(evaluate_frame1k(folder, kind, arm, folds=folds))
    except (ValueError, ImportError, FileNotFoundError) as exc:
        typer.echo(f"evaluate-pilot: {exc}", err=True)
        raise typer.Exit(2) from None
    works, dropped = frame1k_works(folder)
    typer.echo(format_frame1k_table(results))
    typer.echo(frame1k_note(len(works), results[0], dropped))
    for r in results:
        if r.note:
            typer.echo(f"{r.arm} / {r.features}: {r.note}")


coders_app = typer.Typer(
    no_args_is_help=True,
    help="The coders of the audit study (SPEC section 10): personal sign-in tokens for the coding pages.",
)
coding_app = typer.Typer(
    no_args_is_help=True, help="Coding tasks and codes of the audit study: Label Studio export and import."
)
app.add_typer(coders_app, name="coders")
app.add_typer(coding_app, name="coding")

_DATA_DIR_HELP = "Output folder holding audit/coding.sqlite (default $METACAN_DATA_DIR or ./data)."


@contextmanager
def _coding_store(data_dir: str | None, command: str, *, read_only: bool = False):
    """The coding store for ``metacan <command>`` (read-only for the read commands: opening writes nothing); a store
    that cannot be used (missing for a read, corrupt, read-only, busy) ends the command with the store's sentence
    (the file and what to do) and exit code 1, never a traceback."""
    from .audit.coding import CodingStore, CodingStoreError

    try:
        with CodingStore(settings.coding_store_path(data_dir), read_only=read_only) as store:
            yield store
    except CodingStoreError as exc:
        typer.echo(f"metacan {command}: {exc}", err=True)
        raise typer.Exit(1) from None


@coders_app.command("add")
def coders_add(
    name: str = typer.Argument(..., help="The coder's name (letters, digits, '.', '_', '-'); never reused."),
    data_dir: str = typer.Option(None, help=_DATA_DIR_HELP),
) -> None:
    """Register a coder and print their sign-in token, once (the store keeps only its SHA-256)."""
    from .audit.coding import CodingError

    with _coding_store(data_dir, "coders add") as store:
        try:
            token = store.add_coder(name)
        except CodingError as exc:
            typer.echo(f"metacan coders add: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"Token of coder {name}: {token}")
    typer.echo("It is shown only now: give it to the coder privately; the store keeps only its SHA-256.")


@coders_app.command("list")
def coders_list(data_dir: str = typer.Option(None, help=_DATA_DIR_HELP)) -> None:
    """List the coders: name, when added, when revoked (never a token or its hash). Reads the store read-only."""
    path = settings.coding_store_path(data_dir)
    if not path.exists():
        typer.echo(f"No coders yet (no coding store at {path}): add one with `metacan coders add NAME`.")
        return
    with _coding_store(data_dir, "coders list", read_only=True) as store:
        coders = store.list_coders()
        roles = store.coder_roles()
    if not coders:
        typer.echo("No coders yet: add one with `metacan coders add NAME`.")
        return
    width = max(len(c["coder"]) for c in coders)
    for c in coders:
        status = f"revoked {c['revoked_at']}" if c["revoked_at"] else "active"
        extra = "".join(f"  {r}" for r in roles.get(c["coder"], []))
        typer.echo(f"{c['coder']:<{width}}  added {c['created_at']}  {status}{extra}")


@coders_app.command("revoke")
def coders_revoke(
    name: str = typer.Argument(..., help="The coder whose token stops working (their answers stay)."),
    data_dir: str = typer.Option(None, help=_DATA_DIR_HELP),
) -> None:
    """Revoke a coder's token: they can no longer sign in; every answer they gave stays."""
    from .audit.coding import CodingError

    with _coding_store(data_dir, "coders revoke") as store:
        try:
            name = store.stored_name(name)
            when = store.revoke_coder(name)
        except CodingError as exc:
            typer.echo(f"metacan coders revoke: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"Coder {name} revoked at {when}.")


@coding_app.command("backup")
def coding_backup(
    dest: Path = typer.Argument(..., help="The backup file to write (a new file; never overwritten)."),
    data_dir: str = typer.Option(None, help=_DATA_DIR_HELP),
) -> None:
    """Back up the coding store (every coder, task and answer, those still in SQLite's write-ahead log included),
    safely while `metacan serve` is coding. Restore by putting the file back as data/audit/coding.sqlite."""
    from .audit.coding import CodingError

    with _coding_store(data_dir, "coding backup", read_only=True) as store:
        try:
            answers = store.backup(dest)
        except CodingError as exc:
            typer.echo(f"metacan coding backup: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"Backed up the coding store to {dest}: {answers} answers.")


@coding_app.command("export-labelstudio")
def coding_export_labelstudio(
    protocol_id: str = typer.Argument(..., help="The protocol whose coding tasks to export."),
    out_dir: Path = typer.Argument(
        ..., file_okay=False, help="Folder to write the tasks JSON and the labeling config into."
    ),
    data_dir: str = typer.Option(None, help=_DATA_DIR_HELP),
) -> None:
    """Write a protocol's coding tasks as Label Studio import JSON (evidence only) and the matching labeling config."""
    from .audit.coding import CodingError
    from .audit.labelstudio import write_export

    with _coding_store(data_dir, "coding export-labelstudio", read_only=True) as store:
        try:
            tasks_path, config_path, n = write_export(store, protocol_id, out_dir)
        except (CodingError, OSError) as exc:  # OSError: the output folder cannot be written
            typer.echo(f"metacan coding export-labelstudio: {exc}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"{n} tasks: {tasks_path}")
    typer.echo(f"labeling config: {config_path} (paste it under Settings > Labeling Interface > Code)")


@coding_app.command("import-labelstudio")
def coding_import_labelstudio(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="A Label Studio export in its JSON format."),
    coder_map: Path = typer.Option(
        None,
        exists=True,
        dir_okay=False,
        help='JSON object {"<annotator email or user id>": "<coder name>"}; unmapped annotators become labelstudio:<email or id>.',
    ),
    data_dir: str = typer.Option(None, help=_DATA_DIR_HELP),
) -> None:
    """Import the codes of a Label Studio JSON export, validated like the site's answers; prints the counts and the
    reason for every refused annotation. Importing the same file again appends nothing."""
    from .audit.labelstudio import import_export, load_coder_map

    try:
        mapping = load_coder_map(coder_map) if coder_map else {}
        with _coding_store(data_dir, "coding import-labelstudio") as store:
            report = import_export(store, file, mapping)
    except ValueError as exc:
        typer.echo(f"metacan coding import-labelstudio: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"{file}: {report.annotations} annotations in {report.tasks} tasks: {report.appended} appended, "
        f"{report.already_present} already present, {report.refused} refused (source {report.source})"
    )
    for r in report.refusals:
        where = f"task {r.task_id}" + (f" ({r.work_id})" if r.work_id else "")
        who = f", annotation {r.annotation_id} by {r.annotator}" if r.annotation_id is not None else ""
        typer.echo(f"  refused: {where}{who}: {r.reason}")


# --- the coding pages (issue 16): adjudicators and the loading of tasks ------------------------------------------


@coders_app.command("adjudicator")
def coders_adjudicator(
    name: str = typer.Argument(..., help="The coder who may settle disagreements on /coding/adjudication."),
    revoke: bool = typer.Option(False, "--revoke", help="Take the role back instead (their answers stay)."),
    data_dir: str = typer.Option(None, help=_DATA_DIR_HELP),
) -> None:
    """Make a coder an adjudicator (or, with --revoke, no longer one). An adjudicator never settles a work they coded."""
    from .audit.coding import CodingError

    with _coding_store(data_dir, "coders adjudicator") as store:
        try:
            name = store.stored_name(name)
            when = store.revoke_role(name) if revoke else store.grant_role(name)
        except CodingError as exc:
            typer.echo(f"metacan coders adjudicator: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"Coder {name} {'is no longer' if revoke else 'is'} an adjudicator (since {when}).")


@coding_app.command("load-tasks")
def coding_load_tasks(data_dir: str = typer.Option(None, help=_DATA_DIR_HELP)) -> None:
    """Load the current protocol's audit sample into the coding store (what the asset coding_tasks does): evidence
    only, two coders per work; a re-run adds only new works and never touches an answer."""
    from .audit.coding_tasks import load_coding_tasks
    from .storage import MetacanStorage, default_data_dir

    root = data_dir or default_data_dir()
    try:
        with _coding_store(root, "coding load-tasks") as store:
            out = load_coding_tasks(MetacanStorage(data_dir=root), store, source="cli")
    except ValueError as exc:
        typer.echo(f"metacan coding load-tasks: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"{out['protocol_id']}: {out['sample_works']} sampled works; {out['added']} tasks added, {out['unchanged']} "
        f"unchanged, {out['evidence_changed']} with new evidence, {out['moved']} moved, {len(out['missing'])} not in "
        "the frame"
    )
    for wid in out["missing"]:
        typer.echo(f"  not in the frame (no new task): {wid}")


@coding_app.command("import-adjudicator")
def coding_import_adjudicator(
    name: str = typer.Argument(..., help="The machine adjudicator: frame1k (the pilot's LLM adjudication verdicts)."),
    protocol_id: str = typer.Option(
        None, "--protocol", help="The protocol the codes are for (default: the current one)."
    ),
    pilot_dir: Path = typer.Option(None, help="The MetaCan pilot folder (default $METACAN_PILOT_DIR)."),
    data_dir: str = typer.Option(None, help=_DATA_DIR_HELP),
) -> None:
    """Record a MACHINE adjudicator's verdicts as machine codes (machine-adjudicator:<name>), never as human codes:
    the validation report labels estimates from them machine-adjudicated and the gate never counts them. Importing
    again adds nothing."""
    from .audit.adjudicator import ADJUDICATORS
    from .audit.protocol import current_protocol_id
    from .storage import MetacanStorage

    if name not in ADJUDICATORS:
        typer.echo(
            f"metacan coding import-adjudicator: {name!r} unknown; expected one of {list(ADJUDICATORS)}", err=True
        )
        raise typer.Exit(2)
    storage = MetacanStorage(data_dir=data_dir or settings.data_dir())
    if protocol_id is None:
        with storage.connect() as con:
            protocol_id = current_protocol_id(con)
        if protocol_id is None:
            typer.echo(
                "metacan coding import-adjudicator: no audit protocol is locked yet: materialize audit_protocol "
                "(metacan run) first, or name one with --protocol",
                err=True,
            )
            raise typer.Exit(2)
    else:
        from .audit.protocol import load_protocol

        try:  # codes go to an append-only store: never under a protocol that was not locked
            with storage.connect(read_only=True) as con:
                load_protocol(con, protocol_id)
        except Exception as exc:
            typer.echo(f"metacan coding import-adjudicator: {str(exc)[:300]}", err=True)
            raise typer.Exit(2) from None
    try:
        rows = ADJUDICATORS[name](Path(pilot_dir or settings.pilot_dir()), protocol_id)
        with _coding_store(data_dir, "coding import-adjudicator") as store:
            counts = store.append_machine_codes(rows)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"metacan coding import-adjudicator: {exc}", err=True)
        raise typer.Exit(2) from None
    in_sample = _in_audit_sample(storage, protocol_id, {r["id"] for r in rows})
    typer.echo(
        f"machine-adjudicator:{name} on {protocol_id}: {len(rows)} machine codes, {counts['added']} added, "
        f"{counts['already_present']} already present; {in_sample} of their works are in the audit sample "
        "(the others are kept but estimate nothing). They are machine-adjudicated, never human codes."
    )


def _in_audit_sample(storage, protocol_id: str, ids: set[str]) -> int:
    """How many of ``ids`` are drawn in the audit sample of ``protocol_id`` (0 before the sample is drawn)."""
    if not storage.has_table("audit_sample"):
        return 0
    drawn = storage.read_table("audit_sample", ["id"], [("protocol_id", "=", protocol_id), ("in_sample", "=", True)])
    return len(ids & set(drawn.column("id").to_pylist()))


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
