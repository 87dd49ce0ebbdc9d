"""``metacan coders``: the coders of the audit study (SPEC section 10) and their sign-in tokens for the coding pages."""

from __future__ import annotations

import typer

from .. import settings
from ..audit.coding.errors import CodingError
from .coding import DATA_DIR_HELP, open_store

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The coders of the audit study (SPEC section 10): personal sign-in tokens for the coding pages.",
)


@app.command("add")
def coders_add(
    name: str = typer.Argument(..., help="The coder's name (letters, digits, '.', '_', '-'); never reused."),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Register a coder and print their sign-in token, once (the store keeps only its SHA-256)."""
    with open_store(data_dir, "coders add") as store:
        try:
            token = store.add_coder(name)
        except CodingError as exc:
            typer.echo(f"metacan coders add: {exc}", err=True)
            raise typer.Exit(2) from None
        serving = store.serving_protocol()
        paired = serving is not None and bool(store.assignments(serving["protocol_id"]))
        can_pair = serving is not None and len(store.pair_coders()) >= 2
    typer.echo(f"Token of coder {name}: {token}")
    typer.echo("It is shown only now: give it to the coder privately; the store keeps only its SHA-256.")
    typer.echo(
        "They sign in on the coding server (`metacan serve --coding`, http://127.0.0.1:8001/coding/ by default)."
    )
    if paired:
        typer.echo(
            f"The works of {serving['protocol_id']} are assigned to coder pairs: {name} gets works only from "
            "`metacan coding assign --rebalance` (it draws again the pairs of the works nobody has answered)."
        )
    elif can_pair:
        typer.echo(
            f"The works of {serving['protocol_id']} have no coder pairs yet: `metacan coding assign` pairs them "
            "(else they go first come, first served)."
        )


@app.command("list")
def coders_list(data_dir: str = typer.Option(None, help=DATA_DIR_HELP)) -> None:
    """List the coders: name, when added, when revoked (never a token or its hash). Reads the store read-only."""
    path = settings.coding_store_path(data_dir)
    if not path.exists():
        typer.echo(f"No coders yet (no coding store at {path}): add one with `metacan coders add NAME`.")
        return
    with open_store(data_dir, "coders list", read_only=True) as store:
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


@app.command("revoke")
def coders_revoke(
    name: str = typer.Argument(..., help="The coder whose token stops working (their answers stay)."),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Revoke a coder's token: they can no longer sign in; every answer they gave stays."""
    with open_store(data_dir, "coders revoke") as store:
        try:
            name = store.stored_name(name)
            when = store.revoke_coder(name)
        except CodingError as exc:
            typer.echo(f"metacan coders revoke: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"Coder {name} revoked at {when}.")


@app.command("adjudicator")
def coders_adjudicator(
    name: str = typer.Argument(..., help="The coder who may settle disagreements on /coding/adjudication."),
    revoke: bool = typer.Option(False, "--revoke", help="Take the role back instead (their answers stay)."),
    data_dir: str = typer.Option(None, help=DATA_DIR_HELP),
) -> None:
    """Make a coder an adjudicator (or, with --revoke, no longer one). An adjudicator never settles a work they coded."""
    with open_store(data_dir, "coders adjudicator") as store:
        try:
            name = store.stored_name(name)
            when = store.revoke_role(name) if revoke else store.grant_role(name)
        except CodingError as exc:
            typer.echo(f"metacan coders adjudicator: {exc}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"Coder {name} {'is no longer' if revoke else 'is'} an adjudicator (since {when}).")
