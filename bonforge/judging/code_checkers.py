"""The problems' checker programs in the code judge (``judging.code``): the tests that ran to the end are
read by their problem's checker (``sandbox.testlib``), and a checker that crashed on one candidate's output is
run again on the jury's answer to say whose failure that was."""

from __future__ import annotations

import logging

from bonforge.judging.spec import TestSpec
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.testlib import CRASHED, PROBLEM_ERROR, UNFINISHED_BUILD, Checkers
from bonforge.sandbox.wire import Status

log = logging.getLogger("bonforge.sandbox")


class Readings:
    """The problems' checker programs, compiled before the candidates run, on a pool of their own (never a
    candidate's containers); each outcome's outputs are read by its checker as the outcome arrives (on the
    pool's thread) and dropped then: a batch never holds every test's output until it is judged (48 responses
    x 4 tests x 1 MiB of output grew the host by ~181 MiB while they waited for the batch's end)."""

    def __init__(self, specs: list[TestSpec], cfg: CodeVerifyConfig):
        self.specs, self.checkers = specs, Checkers(cfg)
        by_spec = {id(s): s.checker for s in specs if s.checker is not None}  # one spec object per problem
        self.binaries = dict(zip(by_spec, self.checkers.compile(list(by_spec.values())), strict=True))

    def read(self, i: int, kept: dict) -> dict:
        """Request ``i``'s judged outcome with its tests that ran to the end (status ``ok``) read by its
        problem's checker; a test whose checker failed is the problem's error (``PROBLEM_ERROR``), and so is
        each of them when the checkers' sandbox itself fails (never the batch's failure); a checker whose
        build the machine kept from finishing leaves them unfinished."""
        spec = self.specs[i]
        waiting = [k for k, r in enumerate(kept.get("results") or ()) if r["status"] == "ok"]
        if spec.checker is None or not waiting:
            return kept
        binary = self.binaries[id(spec)]
        for group in by_bytes(waiting, kept["results"]):
            try:
                if binary.startswith(("!", UNFINISHED_BUILD)):  # it does not build: the problem's; or the machine's
                    status = PROBLEM_ERROR if binary.startswith("!") else Status.UNFINISHED
                    readings = [(status, binary[1:])] * len(group)
                else:
                    items = [(spec.inputs[k], kept["results"][k].pop("stdout"), spec.outputs[k]) for k in group]
                    readings = self.checkers.check([(binary, items)])[0]
                    del items  # the outputs read: dropped before the next group is sent
            except Exception as e:  # noqa: BLE001  (the checkers' sandbox failed: the problem's error, not the batch's)
                readings = [(PROBLEM_ERROR, f"the problem's checker could not run: {type(e).__name__}: {e}"[:500])
                            ] * len(group)  # fmt: skip
            for k, (status, note) in zip(group, readings, strict=True):
                kept["results"][k].pop("stdout", None)
                kept["results"][k].update(status=status, error=note)
        return kept

    def close(self) -> None:
        self.checkers.close()


CHECK_BYTES = 1 << 20  # a checker request's outputs, about: more tests' outputs go in a request of their own


def by_bytes(tests: list[int], results: list[dict]) -> list[list[int]]:
    """``tests`` in order, in groups whose outputs come to about ``CHECK_BYTES`` (one test at least): small
    outputs share one request (the checker's binary is sent once), megabytes go a test at a time."""
    groups: list[list[int]] = []
    size = 0
    for k in tests:
        n = len(results[k]["stdout"])
        if not groups or size + n > CHECK_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += n
    return groups


def blame_crashes(specs: list[TestSpec], kept: list[dict], binaries: dict[int, str], checkers: Checkers) -> None:
    """A checker that crashed on a candidate's output (``CRASHED``: not testlib's FAIL) is run once more per
    such test with the jury's answer as the output. Accepted: the candidate's output made it crash, and the
    test is that candidate's ``wrong_answer`` (an RL policy must not earn the problem's error, a verdict that
    is never reused and that says "nothing is known", by finding outputs that crash a buggy checker). Not
    accepted: the checker is broken whatever it reads, the problem's error."""
    crashed = [(i, k) for i, req in enumerate(kept) for k, r in enumerate(req.get("results") or ())
               if r["status"] == CRASHED]  # fmt: skip
    controls: dict[tuple[int, int], int] = {}  # (spec, test) -> its control's place among the jobs
    for i, k in crashed:
        controls.setdefault((id(specs[i]), k), len(controls))
    if not controls:
        return
    spec_of = {id(specs[i]): specs[i] for i, _ in crashed}
    jobs = [(binaries[sid], [(spec_of[sid].inputs[k], spec_of[sid].outputs[k], spec_of[sid].outputs[k])])
            for sid, k in controls]  # fmt: skip
    control = [readings[0] for readings in checkers.check(jobs)]
    for i, k in crashed:
        res = kept[i]["results"][k]
        status, note = control[controls[id(specs[i]), k]]
        if status == "passed":
            log.warning("a checker crashed on one candidate's output and accepts the jury's answer: %s", res["error"])
            res.update(status="wrong_answer", error="the checker crashed on this output (it accepts the jury's "
                       f"answer): {res['error']}")  # fmt: skip
        elif status == Status.UNFINISHED:  # the control could not tell: nothing known, the machine's
            res.update(status=status, error=f"{res['error']} (its control run did not finish: {note})")
        else:
            res.update(status=PROBLEM_ERROR, error=f"{res['error']} (on the jury's answer too: {note or status})")

