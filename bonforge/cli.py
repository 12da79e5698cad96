"""The `bonforge` command line."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from bonforge.errors import BonforgeError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build Best-of-N training data.")
sandbox_app = typer.Typer(no_args_is_help=True, help="The Docker sandbox for code verification.")
app.add_typer(sandbox_app, name="sandbox")

StoreOpt = typer.Option(None, "--store", envvar="BONFORGE_STORE", help="Store root (default ./bonforge-store).")


def _store(store: Optional[Path]):
    from bonforge.storage.store import StageStore

    return StageStore(store or Path("bonforge-store"))


def _quiet_prefect() -> None:
    """Defaults for an offline, quiet Prefect (each can be overridden in the environment)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")


def _fail(err: Exception) -> None:
    typer.secho(f"error: {err}", fg="red", err=True)
    raise typer.Exit(2)


@app.command()
def run(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    set_: list[str] = typer.Option([], "--set", help="Override a recipe field: a.b.c=value (repeatable)."),
    store: Optional[Path] = StoreOpt,
) -> None:
    """Build the recipe's dataset: every stage whose key is new is computed, the rest is reused."""
    from bonforge.config import load_recipe

    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("bonforge").setLevel(logging.INFO)
    try:
        rec = load_recipe(recipe, set_)
    except BonforgeError as e:
        _fail(e)
    _quiet_prefect()
    from bonforge.flows.build import build

    st = _store(store)
    try:
        result = build(rec, str(st.root), str(recipe.resolve().parent))
    except BonforgeError as e:
        _fail(e)
    typer.echo(f"run {result['run_id']}: dataset {rec.export.name} v{result['dataset_version']} at {result['dataset']}")


@app.command()
def sql(
    query: str = typer.Argument(..., help="SQL over the views problems, candidates, verdicts, problem_stats, "
                                          "genselect, runs, run_stages."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Run id (prefix) whose stages the views show."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json | parquet"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File to write (parquet needs one)."),
    store: Optional[Path] = StoreOpt,
) -> None:
    """Query the candidate pool and every stage of a run with DuckDB SQL."""
    from bonforge.storage.catalog import connect

    if fmt not in ("table", "csv", "json", "parquet"):
        _fail(BonforgeError(f"--format must be table, csv, json or parquet, not {fmt!r}"))
    try:
        con = connect(_store(store), run_id)
        rel = con.sql(query)
    except BonforgeError as e:
        _fail(e)
    except Exception as e:  # DuckDB parser/binder errors: show them as they are
        _fail(BonforgeError(str(e).strip()))
    if rel is None:
        return
    table = rel.to_arrow_table()
    _emit(table, fmt, output)


def _emit(table, fmt: str, output: Optional[Path]) -> None:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    if fmt == "parquet":
        if output is None:
            _fail(BonforgeError("--format parquet needs --output FILE"))
        pq.write_table(table, output)
        return
    if fmt == "csv":
        sink = str(output) if output else sys.stdout.buffer
        pcsv.write_csv(table, sink)
        return
    if fmt == "json":
        text = "\n".join(json.dumps(r, default=str, ensure_ascii=False) for r in table.to_pylist())
        (output.write_text(text + "\n") if output else typer.echo(text))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(show_lines=False)
    for name in table.column_names:
        t.add_column(name)
    for row in table.to_pylist()[:1000]:
        t.add_row(*[_short(v) for v in row.values()])
    Console(width=max(120, Console().width)).print(t)
    if table.num_rows > 1000:
        typer.echo(f"({table.num_rows} rows, first 1000 shown; use --format csv for all)")


def _short(v) -> str:
    s = json.dumps(v, default=str, ensure_ascii=False) if isinstance(v, (list, dict)) else str(v)
    return s if len(s) <= 80 else s[:77] + "..."


@app.command()
def runs(store: Optional[Path] = StoreOpt) -> None:
    """List recorded runs, newest last."""
    sql("SELECT run_id, recipe, status, started, wall_s, dataset FROM runs ORDER BY started, run_id",
        None, "table", None, store)


@app.command()
def show(
    stage: str = typer.Argument(..., help="problems | candidates | verdicts | problem_stats | genselect"),
    limit: int = typer.Option(10, help="Rows to show."),
    run_id: Optional[str] = typer.Option(None, "--run"),
    store: Optional[Path] = StoreOpt,
) -> None:
    """Show the first rows of a stage table of a run."""
    from bonforge.schema import STAGE_SCHEMAS

    if stage not in STAGE_SCHEMAS:
        _fail(BonforgeError(f"unknown stage {stage!r}; choose one of {', '.join(STAGE_SCHEMAS)}"))
    sql(f'SELECT * FROM "{stage}" LIMIT {int(limit)}', run_id, "table", None, store)


@sandbox_app.command("build-image")
def sandbox_build_image(
    tag: Optional[str] = typer.Option(None, help="Image tag (default: the configured sandbox image)."),
    force: bool = typer.Option(False, help="Rebuild even when the image exists."),
) -> None:
    """Build the sandbox image offline (Debian root filesystem + docker import; no registry needed)."""
    from bonforge.sandbox import image

    typer.echo(image.build_image(tag=tag, force=force))


if __name__ == "__main__":
    app()
