"""The `bonforge` command line."""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from bonforge.errors import BonforgeError
from bonforge.services import quiet_prefect

# Plain click help (rich_markup_mode=None): flags read as flags (``--debug``), never ``--debug <bool>``.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Build Best-of-N training data.")


def _version(show: bool) -> None:
    if show:
        from bonforge import __version__

        typer.echo(f"bonforge {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print bonforge's version and exit.")) -> None:
    """Build Best-of-N training data."""


class _ListsStages(typer.core.TyperCommand):
    """A command whose help ends with every stage the declarations name (imported for ``--help`` only)."""

    def format_help(self, ctx, formatter) -> None:
        super().format_help(ctx, formatter)
        from bonforge.stages import registry

        with formatter.section("Stages (one view each)"):
            formatter.write_text(", ".join(registry()) + ".")
sandbox_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="The Docker sandbox for code verification.")
app.add_typer(sandbox_app, name="sandbox")
models_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="Local model directories from GGUF files and known models.")
app.add_typer(models_app, name="models")

SetOpt = typer.Option([], "--set", metavar="A.B.C=VALUE", help="Override a recipe field: a.b.c=value (repeatable).")
StoreOpt = typer.Option(None, "--store", envvar="BONFORGE_STORE",
                        help="Store root: a folder or s3://bucket/prefix (default ./bonforge-store).")


RecipeOpt = typer.Option(None, "--recipe", metavar="NAME",
                         help="The latest run of this recipe (its `name`); with a run id too, that run, which must be "
                         "one of this recipe's.")


def _run_of(st, run_id: Optional[str], recipe: Optional[str]) -> Optional[str]:
    """The run ``--run`` and ``--recipe`` name (``StageStore.run``): its id, or None for the store's default."""
    if recipe is None:
        return run_id
    try:
        return st.run(run_id, recipe)["run_id"]
    except BonforgeError as e:
        _fail(e)


def _store(store: Optional[str]):
    """The store ``--store`` names; an unsupported URL is an error, never a local folder."""
    from bonforge.storage.store import StageStore

    try:
        return StageStore(store or "bonforge-store")
    except BonforgeError as e:
        _fail(e)


def _fail(err: Exception, debug: bool = False) -> None:
    if debug:
        import traceback

        traceback.print_exception(err)
    typer.secho(f"error: {err}", fg="red", err=True)
    raise typer.Exit(2)


@app.command(short_help="Build a recipe's datasets, computing only what is new.")
def run(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    set_: list[str] = SetOpt,
    store: Optional[str] = StoreOpt,
    debug: bool = typer.Option(False, "--debug", help="Show Prefect's logs and the traceback of an error."),
    fresh: bool = typer.Option(False, "--fresh", help="Recompute every stage and every row: take nothing from "
                               "the store (as `reuse: false` in the recipe), e.g. after a served model changed "
                               "behind the same name."),
    budget: Optional[str] = typer.Option(None, "--budget", metavar="USD", help="Spend at most this many dollars "
                                         "on endpoints with prices (as `budget:` in the recipe; docs/cost.md)."),
) -> None:
    """Build the recipe's dataset: every stage whose key is new is computed, taking the samples and verdicts
    an earlier build computed already from the store; the rest is reused. Bad input stops the build with one
    `error:` line (exit code 2); the run record keeps the details. A build stopped by its budget ends with one
    line saying what it spent and kept (exit code 3)."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("bonforge").setLevel(logging.INFO)
    quiet_prefect()
    if not debug:  # a failed task is reported once, by the error line, not by Prefect's tracebacks
        os.environ["PREFECT_LOGGING_LEVEL"] = "CRITICAL"
    from bonforge.runtime.interrupt import Interrupted, message as interrupt_message, say, stoppable

    try:
        with stoppable():
            budget = budget if isinstance(budget, str) else None  # (the warm builder calls without the option)
            result, _, st = _build(recipe, set_ + ([f"budget={_usd(budget)}"] if budget is not None else []), store,
                                   debug, fresh)
    except Interrupted as e:  # Ctrl-C or SIGTERM: one line, the shell's exit code (130, 143)
        say(interrupt_message(e.signum))
        raise typer.Exit(e.exit_code) from None
    from bonforge.report.summary import ending_lines

    if "budget" in result.extra:
        from bonforge.llm.budget import line as budget_line

        typer.echo(budget_line(result.extra["budget"]))
    for line in ending_lines(st, result):
        typer.echo(line)


def _usd(text: str) -> str:
    """``--budget``'s value as the recipe reads it: a number in any form Python reads (YAML took ``1e2`` for a
    string, and the budget was "not a valid number"), anything else as it was written (refused, named)."""
    try:
        value = float(text)
    except ValueError:
        return text
    return repr(value) if value == value and abs(value) != float("inf") else text


def _build(recipe: Path, set_: list[str], store: Optional[str], debug: bool, fresh: bool):
    """The build of `bonforge run`: (run record, recipe, store), in `up`'s builder when one runs (its exit code
    ends this process then)."""
    from bonforge.services import hand_over

    code = hand_over("bonforge.cli", "run", recipe=recipe, set_=set_, store=store, debug=debug,
                     fresh=fresh)  # `up`'s builder
    if code is not None:
        raise typer.Exit(code)
    from bonforge.config import load_recipe
    from bonforge.flows.build import build

    try:
        rec = load_recipe(recipe, set_ + (["reuse=false"] if fresh else []))
    except BonforgeError as e:
        _fail(e, debug)
    from bonforge.llm.budget import BudgetStopped

    st = _store(store)
    try:
        return build(rec, str(st.root), str(recipe.resolve().parent)), rec, st
    except BudgetStopped as e:  # not an error: the build did what the budget allowed
        typer.echo(str(e))
        raise typer.Exit(3) from None
    except BonforgeError as e:
        _fail(e, debug)


@app.command(short_help="Say what a build would request and cost, calling no endpoint.")
def plan(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    set_: list[str] = SetOpt,
    store: Optional[str] = StoreOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as one JSON object."),
) -> None:
    """What a build of the recipe would ask each sampled teacher for (samples, reused ones, prompt and output
    tokens) and its cost range at the teachers' prices, and what row reuse saves against the store; loads the
    problems and renders the prompts, calls no model endpoint (docs/cost.md)."""
    from bonforge.config import load_recipe
    from bonforge.report.plan import plan as make_plan, plan_lines

    try:
        rec = load_recipe(recipe, set_)
        made = make_plan(rec, recipe.resolve().parent, _store(store))
    except BonforgeError as e:
        _fail(e)
    typer.echo(json.dumps(made) if as_json else "\n".join(plan_lines(made)))


@app.command(cls=_ListsStages, short_help="Query a run's stage tables with DuckDB SQL.")
def sql(
    query: str = typer.Argument(..., help="SQL over one view per stage of the run (listed below), runs and "
                                          "run_stages; a run with trajectories adds turns and tool_calls."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Run id (prefix) whose stages the views show."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json | parquet"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File to write (parquet needs one)."),
    store: Optional[str] = StoreOpt,
    recipe: Optional[str] = RecipeOpt,
) -> None:
    """Query the candidate pool and every stage of a run with DuckDB SQL."""
    from bonforge.storage.catalog import connect

    if fmt not in ("table", "csv", "json", "parquet"):
        _fail(BonforgeError(f"--format must be table, csv, json or parquet, not {fmt!r}"))
    import duckdb
    import pyarrow as pa

    st = _store(store)
    run_id = _run_of(st, run_id, recipe)
    try:
        con = connect(st, run_id)
        rel = con.sql(query)
        if rel is None:
            return
        table = rel.to_arrow_table()  # errors of the query's execution (a failed cast) are raised here
    except BonforgeError as e:
        _fail(e)
    except (duckdb.Error, pa.ArrowException) as e:  # parser, binder and execution errors: one line each
        _fail(BonforgeError(_one_line(e)))
    try:
        _emit(table, fmt, output)
    except pa.ArrowException as e:  # a column the format cannot hold (CSV: lists, structs)
        _fail(BonforgeError(f"--format {fmt}: {_one_line(e)} (use --format json or parquet)"))


def _one_line(err: Exception) -> str:
    """A DuckDB error as one line: its message and its hint ("Candidate bindings", "Did you mean"), without
    the query excerpt and caret that follow."""
    lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
    lines = [x for x in lines if not x.startswith("LINE ") and set(x) != {"^"}]
    return " ".join(lines[:2]) or type(err).__name__


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
        text = "\n".join(json.dumps(r, default=_json_value, ensure_ascii=False) for r in table.to_pylist())
        (output.write_text(text + "\n") if output else typer.echo(text))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(show_lines=False)
    for name in table.column_names:  # an id is never cut: its column is as wide as its longest value
        whole = name == "key" or name.endswith("_id")
        t.add_column(name, no_wrap=whole, min_width=max(map(len, map(str, table.column(name).to_pylist())),
                                                        default=0) if whole else None)
    for row in table.to_pylist()[:1000]:
        t.add_row(*[_short(v) for v in row.values()])
    Console(width=max(120, Console().width)).print(t)
    if table.num_rows > 1000:
        typer.echo(f"({table.num_rows} rows, first 1000 shown; use --format csv for all)")


def _json_value(v):
    """What ``json`` cannot write itself: a BLOB as its base64 text, anything else (a date) as its string."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    return str(v)


def _short(v) -> str:
    s = json.dumps(v, default=str, ensure_ascii=False) if isinstance(v, (list, dict)) else str(v)
    return s if len(s) <= 80 else s[:77] + "..."


@app.command(short_help="Browse a store in a local web page.")
def view(
    run_id: Optional[str] = typer.Option(None, "--run", help="Run id (prefix) to open (default: the latest)."),
    store: Optional[str] = StoreOpt,
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; any but loopback needs the token "
                             "printed in the URL."),
    memory_limit: str = typer.Option("2GiB", "--memory-limit", help="DuckDB's memory limit for each open run's "
                                     "queries (at most 4 runs are open); past it a query is refused."),
    max_result: str = typer.Option("64MiB", "--max-result", help="The most bytes one query's result may hold "
                                   "(SQL box and SQL export); past it the query is refused."),
    recipe: Optional[str] = RecipeOpt,
) -> None:
    """Browse a store in a web page: runs, problems, candidates, GenSelect prompts, FusioN, SQL."""
    from bonforge.viewer import serve
    from bonforge.viewer.sql import Limits, parse_size

    st = _store(store)
    run_id = _run_of(st, run_id, recipe)
    try:
        limits = Limits(memory_bytes=parse_size(memory_limit, "--memory-limit"),
                        result_bytes=parse_size(max_result, "--max-result"))
        if run_id:
            st.run(run_id)
    except BonforgeError as e:
        _fail(e)
    serve(st, host, port, run_id, typer.echo, limits)


@app.command(short_help="List the recorded runs, or one run's stages.")
def runs(
    run_id: Optional[str] = typer.Option(None, "--run", help="Show this run's stages instead (id or prefix)."),
    store: Optional[str] = StoreOpt,
    recipe: Optional[str] = RecipeOpt,
) -> None:
    """List recorded runs, newest last, with the rows each computed and reused (taken from earlier outputs), what
    each spent and what one kept row cost (docs/cost.md); with --run, that run's stages, the seconds and the
    dollars each stage computed, with their share of the build (and for a
    failed run its error, exit code 2). A build whose process is
    gone (killed) shows as failed. With --recipe, that recipe's latest run's stages."""
    if run_id or recipe:
        try:
            run = _store(store).run(run_id, recipe)
        except BonforgeError as e:
            _fail(e)
        error = ((run.error or "").strip().splitlines() or ["no error recorded"])[0]
        if run.status == "failed" and not run.stages:
            _fail(BonforgeError(f"run {run.run_id} failed before it recorded any stage: {error}"))
        sql("SELECT stage, teacher, key, rows, rows_computed AS computed, rows_reused AS reused, cached, wall_s, "
            "cost_usd, spent_usd FROM run_stages ORDER BY stage, teacher, key", run.run_id, "table", None, store,
            None)
        if shares := run.busy_shares():
            typer.echo("busy (of the build's {:.1f} s): {}".format(run.wall_s or 0, ", ".join(
                f"{stage} {secs:.1f} s ({share:.0%})" for stage, (secs, share) in shares.items())))
        for label, w in (run.windows or {}).items():
            sizes = [size for _, size in w["history"]]
            typer.echo(f"request window {label}: {min(sizes)} to {max(sizes)} in flight (ceiling {w['ceiling']}), "
                       f"{w['window']} at the end; {w['refused']} refused, {w['answered']} answered")
        if run.status == "failed":
            _fail(BonforgeError(f"run {run.run_id} failed: {error}"))
        return
    st = _store(store)
    priced = any(r.get("spent_usd") is not None for r in _cost_rows(st))
    cost = "spent_usd, per_kept_row_usd, " if priced else ""  # the columns a narrow terminal cuts first: where known
    sql("SELECT run_id, recipe, status, started, wall_s, rows_computed AS computed, rows_reused AS reused, "
        f"{cost}dataset FROM runs ORDER BY started, run_id", None, "table", None, store, None)


def _cost_rows(st) -> list[dict]:
    """The runs table's cost columns (``storage.catalog``), to know whether any run has a cost."""
    from bonforge.storage.catalog import connect

    return connect(st).sql("SELECT spent_usd FROM runs").to_arrow_table().to_pylist()


@app.command(short_help="Compare two runs' verdicts or scores, candidate by candidate.")
def diff(
    run_a: Optional[str] = typer.Argument(None, metavar="RUN_A", help="The run before (id or prefix)."),
    run_b: Optional[str] = typer.Argument(None, metavar="RUN_B", help="The run after (id or prefix)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", metavar="NAME", help="Runs of this recipe only; "
                                         "without RUN_B, RUN_A (default: the run before the latest) against "
                                         "the recipe's latest run."),
    stage: Optional[str] = typer.Option(None, "--stage", help="verdicts | scores (default: verdicts where both "
                                        "runs have them, else the open-ended scores)."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="Only this teacher's candidates."),
    limit: int = typer.Option(50, "--limit", min=0, max=100_000, help="Flips and changed problems listed."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object."),
    store: Optional[str] = StoreOpt,
) -> None:
    """Compare the same candidates judged in two runs (two judge versions, two verification configs): the
    verdicts (or open-ended scores) that flipped, matched by problem_id and candidate_id, a confusion table of
    the statuses, agreement (Cohen's kappa over statuses and over correct / incorrect), the problems whose pass
    rate or keep / drop decision changed, and the viewer's address of each (`bonforge view`, then the
    #problem / #diff address shown)."""
    from bonforge.report.diff import diff as compare, lines, pair

    st = _store(store)
    try:
        a, b = pair(st, run_a, run_b, recipe)
        result = compare(st, a, b, stage, teacher, limit)
    except BonforgeError as e:
        _fail(e)
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False, default=_json_value))
        return
    from bonforge.viewer import url

    for line in lines(result, url("127.0.0.1", 8765, None).rstrip("/") + "/"):
        typer.echo(line)


@app.command(short_help="List the published dataset versions.")
def datasets(
    name: Optional[str] = typer.Argument(None, help="Only this dataset's versions."),
    fmt: str = typer.Option("table", "--format", help="table | json"),
    store: Optional[str] = StoreOpt,
) -> None:
    """List the published dataset versions, newest first per name: when each was built, by which recipe, its
    default config and rows per split; `latest` marks the version `datasets/<name>/latest` names (what the
    last build of that name published or reused)."""
    from bonforge.storage.datasets import listing

    if fmt not in ("table", "json"):
        _fail(BonforgeError(f"--format must be table or json, not {fmt!r}"))
    try:
        rows = listing(_store(store).loc, name)
    except BonforgeError as e:
        _fail(e)
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        typer.echo(f"no dataset{' named ' + repr(name) if name else ''} in {_store(store).root}")
        return
    table = [("name", "version", "", "created", "recipe", "config", "rows", "path")] + [
        (r["name"], f"v{r['version']}", "latest" if r["latest"] else "", r["created"] or "", r["recipe"] or "",
         r["config"] or "", " + ".join(f"{n} {s}" for s, n in r["rows"].items()), r["path"]) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


@app.command(short_help="Remove stage outputs that no kept run or dataset uses.")
def gc(
    keep_runs: int = typer.Option(..., "--keep-runs", min=0, help="Keep the stage outputs of the N newest runs."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be removed."),
    store: Optional[str] = StoreOpt,
) -> None:
    """Remove the stage outputs that neither the N newest runs (nor a run in progress) nor any dataset version
    use, and the older run records. Dataset versions are never removed; rows a later build could have
    reused from a removed output are computed again."""
    from bonforge.storage.gc import collect

    out = collect(_store(store), keep_runs, dry_run)
    verb = "would remove" if dry_run else "removed"
    for item in out["outputs"]:
        typer.echo(f"{verb} {item['stage']}/{item['key']} ({item['rows']} rows)")
    typer.echo(f"{verb} {len(out['outputs'])} stage outputs, {len(out['leftovers'])} leftovers of an interrupted "
               f"removal and {len(out['runs'])} run records; kept {out['kept_outputs']} outputs")


@app.command(cls=_ListsStages, short_help="Show the first rows of a stage table.")
def show(
    stage: str = typer.Argument(..., help="A stage (listed below)."),
    limit: int = typer.Option(10, help="Rows to show."),
    run_id: Optional[str] = typer.Option(None, "--run"),
    store: Optional[str] = StoreOpt,
    recipe: Optional[str] = RecipeOpt,
) -> None:
    """Show the first rows of a stage table of a run."""
    from bonforge.stages import registry

    if stage not in registry():
        _fail(BonforgeError(f"unknown stage {stage!r}; choose one of {', '.join(registry())}"))
    st = _store(store)
    try:
        run = st.run(run_id, recipe)
    except BonforgeError as e:
        _fail(e)
    if stage not in run.stages:
        _fail(BonforgeError(f"run {run.run_id} has no stage {stage!r} (it has {', '.join(run.stages)})"))
    sql(f'SELECT * FROM "{stage}" LIMIT {int(limit)}', run.run_id, "table", None, store, None)


@app.command("eval-selector", short_help="Evaluate a selector model on the GenSelect prompts.")
def eval_selector(
    recipe: Path = typer.Argument(..., help="Recipe YAML file of a finished build."),
    selector: str = typer.Option(..., "--selector", help="ENGINE:MODEL[@BASE_URL], e.g. "
                                 "openai:Qwen3-4B@http://127.0.0.1:8000/v1, or a YAML file with a teacher config."),
    n_runs: int = typer.Option(1, "--runs", min=1, help="Runs with distinct seeds (run r samples with seed + r)."),
    skip_unanimous: bool = typer.Option(False, "--skip-unanimous",
                                        help="Do not ask when every candidate gives the same answer."),
    prompts: str = typer.Option("genselect", "--prompts", help="genselect: the build's GenSelect prompts; "
                                "pool: one prompt per problem over all its candidates."),
    set_: list[str] = SetOpt,
    store: Optional[str] = StoreOpt,
) -> None:
    """Evaluate a selector model on a build's selection prompts: accuracy ± std over runs beside pass@1,
    majority@N and pass@N (stored as stage selector_eval)."""
    from bonforge.config import load_recipe
    from bonforge.flows.insight import eval_selector as evaluate
    from bonforge.selection.selector import selector_from_spec

    if prompts not in ("genselect", "pool"):
        _fail(BonforgeError(f"--prompts must be genselect or pool, not {prompts!r}"))
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    try:
        record, s = evaluate(_store(store), load_recipe(recipe, set_), selector_from_spec(selector), n_runs,
                             skip_unanimous, prompts)  # type: ignore[arg-type]
    except BonforgeError as e:
        _fail(e)
    _table1(record, s)


def _table1(record: dict, s: dict) -> None:
    """The GenSelect paper's Table 1 layout: one row per prompt set, accuracies in %."""
    from rich.console import Console
    from rich.table import Table

    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    t = Table(title=f"selector {record['selector']['model']} on {record['recipe_name']} (run {record['run_id']})")
    for col in ("prompts", "pass@1", "majority@N", "pass@N", "selector", "+ random fallback"):
        t.add_column(col, justify="right")
    t.add_row(str(s["prompts"]), pct(s["pass@1"]), pct(s["majority@N"]), pct(s["pass@N"]),
              f"{pct(s['selector'])} ± {pct(s['selector_std'])}",
              f"{pct(s['selector_fallback'])} ± {pct(s['selector_fallback_std'])}")
    Console(width=max(120, Console().width)).print(t)
    typer.echo(f"{s['runs']} run(s), {s['calls']} selector calls, {s['unparsed']} unparsed; "
               f"skipped as unanimous: {s['skipped_prompts']} prompts ({s['skipped_calls']} calls), "
               f"{s['prompt_tokens_saved']} prompt tokens = {100 * s['compute_saved']:.1f}% of the prompt compute")


@app.command(short_help="Compute max@k weights per candidate for RL trainers.")
def maxk(
    run_id: Optional[str] = typer.Argument(None, help="Run id (prefix); default: the latest run."),
    k: list[int] = typer.Option([], "--k", min=1, metavar="K", help="k (repeatable); default: the recipe's score.ks, "
                                "else 1, 2, 4, ... up to the group size."),
    pool: bool = typer.Option(False, "--pool", help="Weigh all teachers' candidates of a problem together "
                              "(default: per teacher, on-policy)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write the weights to this Parquet file."),
    store: Optional[str] = StoreOpt,
    recipe: Optional[str] = RecipeOpt,
) -> None:
    """Compute max@k weights per candidate (stage maxk_weights: candidate_id, k, weight) for RL trainers."""
    from bonforge.flows.insight import maxk_weights

    st = _store(store)
    try:
        record, man = maxk_weights(st, _run_of(st, run_id, recipe), k or None, pool)
    except BonforgeError as e:
        _fail(e)
    if output:
        import pyarrow.parquet as pq

        pq.write_table(st.read("maxk_weights", man.key), output)
    typer.echo(f"run {record['run_id']}: maxk_weights {man.key}, {man.rows} rows"
               + (f", written to {output}" if output else ""))


@app.command(short_help="Write a run's HTML report.")
def report(
    run_id: Optional[str] = typer.Argument(None, help="Run id (prefix); default: the latest run."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Folder (default <store>/reports/<run>)."),
    store: Optional[str] = StoreOpt,
    recipe: Optional[str] = RecipeOpt,
) -> None:
    """Write a run's HTML report (plots embedded) and one PNG per plot; prints the HTML file's path."""
    from bonforge.report import write_report

    st = _store(store)
    try:
        typer.echo(write_report(st, _run_of(st, run_id, recipe), output))
    except BonforgeError as e:
        _fail(e)


@app.command(short_help="Schedule a recipe's builds on a Prefect server.")
def deploy(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    cron: str = typer.Option(..., "--cron", help='Cron schedule, e.g. "0 3 * * *" (TZ, default UTC).'),
    name: Optional[str] = typer.Option(None, "--name", help="Deployment name (default: the recipe's name)."),
    set_: list[str] = SetOpt,
    store: Optional[str] = StoreOpt,
) -> None:
    """Register a scheduled build of the recipe on the Prefect server at PREFECT_API_URL; `bonforge serve`
    executes its runs."""
    from bonforge.flows.deploy import FLOW_NAME, deploy as register

    try:
        dep_name, dep_id = register(recipe, cron, name, set_, _store(store).root)
    except BonforgeError as e:
        _fail(e)
    typer.echo(f"deployment {FLOW_NAME}/{dep_name} ({dep_id}): {cron}; run it now with "
               f"`prefect deployment run {FLOW_NAME}/{dep_name}`, execute runs with `bonforge serve`")


@app.command(short_help="Run the scheduled builds until stopped.")
def serve(
    name: list[str] = typer.Option([], "--name", help="Serve only these deployments (default: every bonforge one)."),
) -> None:
    """Execute the scheduled and triggered runs of bonforge deployments until stopped (Ctrl-C)."""
    from bonforge.flows.deploy import serve as serve_deployments

    try:
        serve_deployments(name)
    except BonforgeError as e:
        _fail(e)


@app.command(short_help="Keep a Prefect server, a Ray head and a warm builder running.")
def up(
    num_cpus: Optional[int] = typer.Option(None, "--num-cpus", min=1, help="CPUs of the Ray head (default: all)."),
) -> None:
    """Start a local Prefect server, a Ray head and a warm builder once, for every later `bonforge run` on
    this machine (they are recorded in BONFORGE_HOME, default ~/.config/bonforge; `bonforge down` stops
    them)."""
    from bonforge.services import warm

    quiet_prefect()
    try:
        record = warm.up(num_cpus)
    except BonforgeError as e:
        _fail(e)
    _show_services(record, warm.check(record))


def _show_services(record: dict, alive: dict[str, bool]) -> None:
    from bonforge.services.warm import WHERE

    for name, field in WHERE.items():
        service = record.get(name, {field: "-", "pid": "-", "log": "-"})
        state = "up" if alive[name] else "not answering"
        typer.echo(f"{name:8} {service[field]:32} pid {service['pid']:<8} {state}  (log {service['log']})")


@app.command(short_help="Show what `bonforge up` started.")
def status() -> None:
    """Show the services `bonforge up` started, and whether they answer."""
    from bonforge.services import warm

    record = warm.read()
    if record is None:
        typer.echo(f"no services recorded in {warm.record_path()}: builds start their own (`bonforge up` keeps "
                   "them warm)")
        return
    _show_services(record, warm.check(record))


@app.command(short_help="Stop what `bonforge up` started.")
def down() -> None:
    """Stop the services `bonforge up` started."""
    from bonforge.services import warm

    stopped = warm.down()
    if not stopped:
        typer.echo("no services recorded: nothing to stop")
    for name, was_running in stopped.items():
        typer.echo(f"{name:8} {'stopped' if was_running else 'was not running'}")


@models_app.command("import", short_help="Turn a GGUF file or a known model into a model directory.")
def models_import(
    source: str = typer.Argument(..., help="A .gguf file, or the name of a model bonforge knows "
                                 "(smollm2-135m-instruct)."),
    out: Optional[Path] = typer.Option(None, "--out", help="New model directory (a known name: default its "
                                       "cache directory, $BONFORGE_MODELS)."),
) -> None:
    """Turn a GGUF file into a local Hugging Face model directory (bf16 safetensors + tokenizer) that the
    vllm and transformers engines load; prints the directory."""
    from bonforge.llm import models

    try:
        if source in models.KNOWN and out is None:
            path = models.prepare(source)
        else:
            if out is None:
                raise BonforgeError("--out DIR is needed to import a GGUF file")
            path = models.import_gguf(models.gguf_path(source) if source in models.KNOWN else Path(source), out)
    except BonforgeError as e:
        _fail(e)
    typer.echo(str(path))


@sandbox_app.command("build-image", short_help="Build the sandbox image offline.")
def sandbox_build_image(
    tag: Optional[str] = typer.Option(None, help="Image tag (default: the configured sandbox image)."),
    force: bool = typer.Option(False, help="Rebuild even when the image exists."),
) -> None:
    """Build the sandbox image offline (Debian root filesystem + docker import; no registry needed)."""
    from bonforge.sandbox import image

    typer.echo(image.build_image(tag=tag, force=force))


@sandbox_app.command("cleanup", short_help="Remove your leftover sandbox containers.")
def sandbox_cleanup(
    all_users: bool = typer.Option(False, "--all-users", help="Remove every user's bonforge sandbox containers "
                                   "on this Docker engine, not only yours."),
) -> None:
    """Remove your bonforge sandbox containers (labelled with your user name and uid when they start), e.g.
    after a crash; other users' sandboxes on a shared Docker engine are left alone."""
    from bonforge.sandbox.image import cleanup_containers

    try:
        typer.echo(f"removed {cleanup_containers(all_users=all_users)} container(s)")
    except BonforgeError as e:
        _fail(e)


if __name__ == "__main__":
    app()
