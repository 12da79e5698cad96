"""A real store for the viewer tests, built once per session: HumanEval (verified in Docker sandboxes), then
GSM8K with FusioN (the fusor and the selector a scripted local OpenAI-compatible server), then
`bonforge eval-selector` on it, so that the latest run has every stage the viewer shows.

The fusor is hostile: each fused answer starts with a ``<script>`` and an ``<img onerror>`` that would
set ``window.__pwned`` if the page ever rendered candidate text as HTML."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
HOSTILE = '<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned = \'img\'">'
FUSION_PROBLEMS = 12
CODE_PROBLEMS = 4
_BLOCK = re.compile(r"### Response (\d+)\n(.*?)(?=\n\n### Response \d+\n|\n\nStudy the responses)", re.S)


def fusor_and_selector(n: int, body: dict):
    """Fusion prompts: the first half of response 0's lines, then the rest of response 1 (so that two
    teachers own parts of the answer), after a hostile HTML prefix. Selection prompts: candidate 0."""
    from llm_server import answer

    prompt = body["messages"][0]["content"]
    reply = answer(body)
    if "### Candidate 0" in prompt:
        text = f"{HOSTILE}\nThe first one holds up.\nJudgment: 0"
    else:
        texts = [m.group(2) for m in _BLOCK.finditer(prompt)]
        a, b = texts[0].splitlines(), texts[1 % len(texts)].splitlines()
        text = "\n".join([HOSTILE, *a[: len(a) // 2], *b[len(b) // 2:]])
    reply["choices"][0]["message"]["content"] = text
    return 200, {}, reply


@pytest.fixture(scope="session")
def viewer_store(tmp_path_factory, gsm8k_pool, sandbox_image, data_dir):
    """(store, {"code": run id, "fusion": run id, "selector": run id}); the selector's run is the latest."""
    import ray
    from llm_server import ScriptedServer

    from bonforge.cli import app
    from bonforge.config import load_recipe
    from bonforge.flows.build import build
    from bonforge.storage.store import StageStore

    import os

    keep = os.environ.get("BONFORGE_VIEWER_STORE")  # a folder to build into once and reuse (iterating on the page)
    root = Path(keep) if keep else tmp_path_factory.mktemp("viewer") / "store"
    if keep and len(StageStore(root).runs()) == 3:
        store = StageStore(root)
        code_run, fusion_run, selector_run = (r["run_id"] for r in store.runs())
        return store, {"code": code_run, "fusion": fusion_run, "selector": selector_run}
    code = build(load_recipe(RECIPES / "humaneval-genselect.yaml", [f"problems.limit={CODE_PROBLEMS}"]),
                 str(root), str(RECIPES))
    fusion_recipe = RECIPES / "gsm8k-fusion.yaml"
    with ScriptedServer(fusor_and_selector) as server:
        selector = f"{{name: selector, engine: openai, model: s, base_url: '{server.url}', api_key_env: null}}"
        sets = [f"problems.limit={FUSION_PROBLEMS}", f"fusion.fusor.base_url={server.url}",
                f"fusion.selector={selector}"]
        fused = build(load_recipe(fusion_recipe, sets), str(root), str(RECIPES))
        res = CliRunner().invoke(app, ["eval-selector", str(fusion_recipe), "--selector", f"openai:judge@{server.url}",
                                       "--store", str(root), *[x for s in sets for x in ("--set", s)]])
        assert res.exit_code == 0, res.output
    ray.shutdown()
    store = StageStore(root)
    return store, {"code": code["run_id"], "fusion": fused["run_id"], "selector": store.run()["run_id"]}


# -- a live `bonforge view` and Debian's Chromium ------------------------------------------------------
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright's browser is the system Chromium (`playwright install` cannot download here)."""
    import shutil

    path = shutil.which("chromium")
    if path is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    return {**browser_type_launch_args, "executable_path": path, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def viewer_url(viewer_store, tmp_path_factory):
    """`bonforge view` serving the test store on a free loopback port; yields its URL."""
    from viewer_helpers import serving

    store, _ = viewer_store
    with serving(store.root, tmp_path_factory.mktemp("view") / "view.log") as url:
        yield url


@pytest.fixture
def viewing(page):
    """``viewing(url)``: the viewer at ``url`` in ``page``, with a list of the page's console errors and uncaught
    exceptions; the test fails on any, except the HTTP statuses a test names in ``view.expected`` (the 4xx an
    error page is built from), and on any stored text that ran (``window.__pwned``) or became an element."""
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))

    class View:
        expected: list[str] = []

        def __init__(self, url: str):
            self.page, self.url = page, url

        def open(self, hash_: str = ""):
            page.goto("about:blank")  # a new document, not a hash change of the old one
            page.goto(self.url + hash_)
            return self.ready()

        def ready(self):
            page.wait_for_selector("main[data-ready]")
            return page

        def then(self, action):
            """Do ``action`` (a click that changes the URL) and wait until the page has drawn the new view."""
            before = page.locator("main").get_attribute("data-ready")
            action()
            page.locator(f"main[data-ready]:not([data-ready='{before}'])").wait_for()
            return page

    made: list[View] = []
    yield lambda url: made.append(View(url)) or made[-1]
    assert page.evaluate("window.__pwned") is None  # no stored text ever ran
    assert page.locator("main script, main img").count() == 0
    allowed = [s for v in made for s in v.expected]
    assert [e for e in errors if not any(s in e for s in allowed)] == []
