"""The unisolated baseline of ``sandbox_throughput.py``, in its own light process (standard library only),
as openai/human-eval's ``execution.check_correctness`` runs candidates: per candidate a
``multiprocessing.Manager`` and a forked ``Process`` exec-ing program + tests, joined with a timeout, from
a thread pool.

    python benchmarks/humaneval_style_harness.py PROGRAMS.json WORKERS TIMEOUT   -> prints {"seconds", "passed"}
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def _target(program: str, result) -> None:
    try:
        exec(program, {})
        result.append("passed")
    except BaseException:
        result.append("failed")


def check(program: str, timeout: float) -> bool:
    manager = multiprocessing.Manager()
    result = manager.list()
    p = multiprocessing.Process(target=_target, args=(program, result))
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    ok = len(result) > 0 and result[0] == "passed"
    manager.shutdown()
    return ok


def main() -> None:
    path, workers, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    with open(path) as f:
        programs = json.load(f)
    start = time.monotonic()
    with ThreadPoolExecutor(workers) as ex:
        passed = sum(ex.map(lambda p: check(p, timeout), programs))
    print(json.dumps({"seconds": time.monotonic() - start, "passed": passed}))


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    main()
