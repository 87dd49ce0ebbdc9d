"""``metacan coding``: the coding store of the audit study: backup, Label Studio export and import, loading the audit
sample's tasks, coder pairs, the study's progress and its export, and machine adjudicators' codes."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from .. import settings
from ..audit.coding.adjudicators import ADJUDICATORS
from ..audit.coding.errors import CodingError, CodingStoreError
from ..audit.coding.labelstudio import write_export
from ..audit.coding.labelstudio_import import import_export, load_coder_map
from ..audit.coding.loading import load_coding_tasks
from ..audit.coding.pseudonyms import coder_pseudonym
from ..audit.coding.store import CodingStore
from ..audit.coding.study import PROGRESS_COLUMNS, sample_strata, study_progress, study_rows, write_study_csv
from ..audit.protocol.locked import current_protocol_id, load_protocol
from ..publish.abstract_cascade import AbstractCascade
from ..publish.abstracts import WorkIds
from ..site.web.coding_strings import CHOICES
from ..storage import MetacanStorage, default_data_dir

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The audit study's coding store: tasks, coder pairs, progress, the study as CSV, backups, Label Studio export and import.",
)

DATA_DIR_HELP = "Output folder holding audit/coding.sqlite (default $METACAN_DATA_DIR or ./data)."


@contextmanager
def open_store(
    data_dir: str | None, command: str, *, read_only: bool = False, existing: bool = False
) -> Iterator[CodingStore]:
    """The coding store for ``metacan <command>`` (read-only for the read commands: opening writes nothing; with
    ``existing`` a command that writes only to a study already under way, so a mistyped --data-dir creates no empty
    store); a store that cannot be used (missing for a read, corrupt, read-only, busy) ends the command with the
    store's sentence (the file and what to do) and exit code 1, never a traceback."""
    path = settings.coding_store_path(data_dir)
    if existing and not Path(path).exists():
        typer.echo(
            f"metacan {command}: no coding store at {path}: check --data-dir (or METACAN_DATA_DIR), or load the "
            f"coding tasks first (`metacan coding load-tasks` or the asset coding_tasks)",
            err=True,
        )
        raise typer.Exit(1)
    try:
        with CodingStore(settings.coding_store_path(data_dir), read_only=read_only) as store:
            yield store
    except CodingStoreError as exc:
        typer.echo(f"metacan {command}: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command("backup")
def coding_backup(
    dest: Path = typer.Argument(..., help="The backup file to write (a new file; never overwritten)."),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Back up the coding store (every coder, task and answer, those still in SQLite's write-ahead log included),
    safely while `metacan serve --coding` is serving coders. Restore by putting the file back as data/audit/coding.sqlite."""
    with open_store(data_dir, "coding backup", read_only=True) as store:
        try:
            answers = store.backup(dest)
        except CodingError as exc:
            typer.echo(f"metacan coding backup: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"Backed up the coding store to {dest}: {answers} answers.")


def choice_names() -> dict[str, dict[str, str]]:
    """Per answer field, code -> the English name the coding page shows (the Label Studio project shows the same)."""
    return {field: dict(pairs) for field, pairs in CHOICES.items()}


@app.command("export-labelstudio")
def coding_export_labelstudio(
    protocol_id: str = typer.Argument(..., help="The protocol whose coding tasks to export."),
    out_dir: Path = typer.Argument(
        ..., file_okay=False, help="Folder to write the tasks JSON and the labeling config into."
    ),
    abstracts: bool = typer.Option(
        True,
        "--abstracts/--no-abstracts",
        help="Fetch each task's abstract through the abstract cascade (OpenAlex, Europe PMC, Crossref: "
        "$METACAN_ABSTRACT_SOURCES) into the tasks file, as the coding page shows it, and archive it in the coding "
        "store; --no-abstracts: each task says the abstract was not fetched (the store is then only read).",
    ),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Write a protocol's coding tasks as Label Studio import JSON (the evidence and abstract the coding page shows,
    no link to a page with machine classifications) and the matching labeling config (display names, the fields an
    answer needs required). The tasks file holds abstract text: hand it to the Label Studio project only."""
    with open_store(data_dir, "coding export-labelstudio", read_only=not abstracts, existing=True) as store:
        fetcher = AbstractCascade(openalex_url=settings.openalex_api_url()) if abstracts else None
        try:
            source = None
            if fetcher is not None:
                dois = {t["id"]: t["evidence"].get("doi") for t in store.tasks(protocol_id)}
                source = lambda ids: fetcher.fetch([WorkIds(i, dois.get(i)) for i in ids], progress=True)  # noqa: E731
            tasks_path, config_path, n = write_export(
                store, protocol_id, out_dir, abstracts=source, names=choice_names()
            )
        except (CodingError, OSError) as exc:  # OSError: the output folder cannot be written
            typer.echo(f"metacan coding export-labelstudio: {exc}", err=True)
            raise typer.Exit(1) from None
        finally:
            if fetcher is not None:
                fetcher.close()
    typer.echo(f"{n} tasks: {tasks_path}")
    typer.echo(f"labeling config: {config_path} (paste it under Settings > Labeling Interface > Code)")


@app.command("import-labelstudio")
def coding_import_labelstudio(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="A Label Studio export in its JSON format."),
    coder_map: Path = typer.Option(
        None,
        exists=True,
        dir_okay=False,
        help='JSON object {"<annotator email or user id>": "<coder name>"}; unmapped annotators become labelstudio:<email or id>.',
    ),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Import the codes of a Label Studio JSON export, validated like the site's answers; prints the counts and the
    reason for every refused annotation. Importing the same file again appends nothing."""
    try:
        mapping = load_coder_map(coder_map) if coder_map else {}
        with open_store(data_dir, "coding import-labelstudio") as store:
            report = import_export(store, file, mapping, names=choice_names())
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


@app.command("load-tasks")
def coding_load_tasks(data_dir: str = typer.Option(None, help=DATA_DIR_HELP)) -> None:
    """Load the current protocol's audit sample into the coding store (what the asset coding_tasks does): evidence
    only, two coders per work; a re-run adds only new works and never touches an answer."""
    root = data_dir or default_data_dir()
    try:
        with open_store(root, "coding load-tasks") as store:
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
    if out["pairs"] is None:
        typer.echo(
            "No coder pairs yet (fewer than two coders without the adjudicator role): works go first come, first "
            "served until `metacan coding assign` pairs them."
        )
    else:
        _echo_pairs(out["pairs"])


def _echo_pairs(pairs: dict) -> None:
    held = ", ".join(f"{c} {n}" for c, n in pairs["by_coder"].items())
    typer.echo(f"coder pairs: {pairs['assigned']} works assigned now, {pairs['kept']} kept; works per coder: {held}")


def _serving(store: CodingStore, protocol_id: str | None, command: str) -> str:
    """The protocol a command reads: ``protocol_id`` (one whose tasks the store holds, else exit 1 naming those it
    holds), else the one the coding pages serve (the newest load)."""
    if protocol_id is not None:
        known = store.task_protocols()
        if protocol_id not in known:
            typer.echo(
                f"metacan {command}: the coding store has no tasks of protocol {protocol_id!r}; "
                f"its protocols: {', '.join(known) or 'none (run `metacan coding load-tasks` first)'}",
                err=True,
            )
            raise typer.Exit(1)
        return protocol_id
    serving = store.serving_protocol()
    if serving is None:
        typer.echo(f"metacan {command}: no coding tasks loaded yet: run `metacan coding load-tasks` first", err=True)
        raise typer.Exit(1)
    return serving["protocol_id"]


PROTOCOL_HELP = "The protocol (default: the one the coding pages serve, the newest load)."


@app.command("assign")
def coding_assign(
    rebalance: bool = typer.Option(
        False,
        "--rebalance",
        help="Also draw again the pairs of the works nobody has answered (after adding or revoking a coder); a work "
        "with an answer keeps the coders who answered it.",
    ),
    coder: list[str] = typer.Option(
        None, "--coder", help="A coder to pair (repeat; default every active coder without the adjudicator role)."
    ),
    protocol_id: str = typer.Option(None, "--protocol", help=PROTOCOL_HELP),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Assign the works of the protocol to coder pairs (balanced, drawn from the protocol's content hash, so the
    same protocol and coders always give the same pairs): the works without a pair, or with --rebalance every work
    nobody has answered yet. A coder's queue then holds only their works."""
    with open_store(data_dir, "coding assign", existing=True) as store:
        pid = _serving(store, protocol_id, "coding assign")
        try:
            pairs = store.assign_works(pid, coders=coder or None, rebalance=rebalance)
        except CodingError as exc:
            typer.echo(f"metacan coding assign: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"{pid}: pairs drawn over {', '.join(pairs['coders'])}")
    _echo_pairs(pairs)


@app.command("status")
def coding_status(
    protocol_id: str = typer.Option(None, "--protocol", help=PROTOCOL_HELP),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """The study's progress per stratum of the audit sample: works sampled, coded by 0, 1 or 2 coders, disagreements
    awaiting adjudication, adjudicated, with a final human code; then each coder's works done and assigned. Reads
    the coding store read-only and the warehouse's audit_sample (for the strata)."""
    root = data_dir or default_data_dir()
    with open_store(root, "coding status", read_only=True) as store:
        pid = _serving(store, protocol_id, "coding status")
        strata = sample_strata(MetacanStorage(data_dir=root), pid)
        rows = study_progress(store, pid, strata)
        pairs = store.assignments(pid)
        coders = sorted({c for pair in pairs.values() for c in pair} | set(store.task_progress(pid)["by_coder"]))
        progress = {c: store.coder_progress(pid, c) for c in coders}
    typer.echo(f"{pid}: coding progress per stratum" + ("" if strata else " (no audit_sample in the warehouse)"))
    width = max(len(r["stratum"]) for r in rows)
    typer.echo("  ".join([f"{'stratum':<{width}}", *(f"{c:>13}" for c in PROGRESS_COLUMNS[1:])]))
    for r in rows:
        typer.echo("  ".join([f"{r['stratum']:<{width}}", *(f"{r[c]:>13}" for c in PROGRESS_COLUMNS[1:])]))
    if not pairs:
        typer.echo("No coder pairs: works go first come, first served (`metacan coding assign` pairs them).")
    for c in coders:
        p = progress[c]
        of = f" of {p['tasks']} assigned" if pairs else ""
        typer.echo(f"  {c}: {p['done']} coded{of}")


@app.command("export-study")
def coding_export_study(
    out: Path = typer.Argument(..., dir_okay=False, help="The CSV file to write (a new file; never overwritten)."),
    protocol_id: str = typer.Option(None, "--protocol", help=PROTOCOL_HELP),
    names: bool = typer.Option(
        False, "--names", help="Name coders as the coding store does and keep their notes (for the coordinator only)."
    ),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Write the whole study as CSV, one row per sampled work: its stratum and coder pair, both coders' latest
    answers (coder1_*, coder2_*), the latest adjudication and the final human code with its basis. Coders appear
    under their pseudonym of the study (coder-<10 hex>, as in a release) and notes are left out, so the file may be
    shared; --names gives the coding-store names and the notes, for the coordinator's eyes only."""
    root = data_dir or default_data_dir()
    with open_store(root, "coding export-study", read_only=names, existing=True) as store:
        pid = _serving(store, protocol_id, "coding export-study")
        label = None
        if not names:  # the key is created on first use: the store is open for writing then
            key = store.pseudonym_key()
            label = functools.partial(coder_pseudonym, key, pid)
        rows = study_rows(store, pid, sample_strata(MetacanStorage(data_dir=root), pid), coder_label=label)
    if not names:
        rows = [{k: (None if k.endswith("_note") else v) for k, v in r.items()} for r in rows]
    try:
        n = write_study_csv(rows, out)
    except OSError as exc:  # FileExistsError included: an export is never overwritten
        typer.echo(f"metacan coding export-study: cannot write {out}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    who = "coders named, notes kept: keep this file to the coordinator" if names else "coders under pseudonyms"
    typer.echo(f"{pid}: {n} works written to {out} ({who})")


@app.command("import-adjudicator")
def coding_import_adjudicator(
    name: str = typer.Argument(..., help="The machine adjudicator: frame1k (the pilot's LLM adjudication verdicts)."),
    protocol_id: str = typer.Option(
        None, "--protocol", help="The protocol the codes are for (default: the current one)."
    ),
    pilot_dir: Path = typer.Option(None, help="The MetaCan pilot folder (default $METACAN_PILOT_DIR)."),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Record a MACHINE adjudicator's verdicts as machine codes (machine-adjudicator:<name>), never as human codes:
    the validation report labels estimates from them machine-adjudicated and the gate never counts them. Importing
    again adds nothing."""
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
        try:  # codes go to an append-only store: never under a protocol that was not locked
            with storage.connect(read_only=True) as con:
                load_protocol(con, protocol_id)
        except Exception as exc:
            typer.echo(f"metacan coding import-adjudicator: {str(exc)[:300]}", err=True)
            raise typer.Exit(2) from None
    try:
        rows = ADJUDICATORS[name](Path(pilot_dir or settings.pilot_dir()), protocol_id)
        with open_store(data_dir, "coding import-adjudicator") as store:
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
