"""Checker programs the machine keeps from finishing (``testlib``): a run or a build left ``unfinished`` runs again
alone, each time allowed to wait longer (``wire.rerun_stretches``); still unfinished at the last, its tests are
``unfinished`` (the candidate's ``infra_error``), never the problem's error and never a cached failure to build."""

from __future__ import annotations

from bonforge.sandbox import testlib
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.wire import Status


class Pool:
    """Answers each request from ``answers`` (request id -> a list of outcomes, one per run); records batches
    and each request's stretch (None: the first pass's)."""

    def __init__(self, answers):
        self.answers, self.batches, self.stretches = answers, [], []

    def run(self, requests):
        self.batches.append([r["id"] for r in requests])
        self.stretches.append([r.get("stretch") for r in requests])
        return [self.answers[r["id"]].pop(0) for r in requests]


def unfinished(n):
    return {"results": [{"status": "unfinished", "error": "the machine was too busy", "stderr": ""}] * n}


def test_a_checker_run_left_unfinished_runs_again_alone():
    """A checker's wall limit is 10 s x 1 + 1 here: runs alone with stretches 40, then 600 / 11 (600 s a run)."""
    accepted = {"results": [{"status": "ok", "exit_code": 0, "stderr": ""}]}
    pool = Pool({"checker-0": [unfinished(1), accepted], "checker-1": [accepted], "checker-2": [unfinished(1)] * 3})
    checkers = testlib.Checkers(CodeVerifyConfig(backend="process", wall_factor=1.0), pool=pool)
    readings = checkers.check([("bin", [("i", "o", "a")])] * 3)
    assert pool.batches == [["checker-0", "checker-1", "checker-2"], ["checker-0"], ["checker-2"], ["checker-2"]]
    assert pool.stretches == [[None] * 3, [40.0], [40.0], [600 / 11]]
    assert [r[0][0] for r in readings] == ["passed", "passed", Status.UNFINISHED]
    assert testlib.reading({"status": "unfinished", "error": "busy"})[0] == Status.UNFINISHED


def test_a_checker_build_left_unfinished_is_not_kept_as_a_failure():
    checker = {"source": "int main() {}  // unfinished build"}
    name = testlib.build_request(checker, CodeVerifyConfig(backend="process"))["id"]
    pool = Pool({name: [dict(unfinished(0), unfinished=True), dict(unfinished(0), unfinished=True)]})
    checkers = testlib.Checkers(CodeVerifyConfig(backend="process"), pool=pool)
    (binary,) = checkers.compile([checker])
    assert binary.startswith(testlib.UNFINISHED_BUILD) and pool.batches == [[name], [name]]
    pool.answers[name] = [{"results": [], "artifact": "AAAA"}]  # the next call builds it again
    assert checkers.compile([checker]) == ["AAAA"]
