"""Engines held across the sampling stages of one build (early stopping's rounds, ``bonforge.flows.rounds``): a
``vllm`` or ``transformers`` teacher's model loads once per build instead of once per round.

The rule for ``vllm`` teachers: they are held only when all their replicas fit in the Ray cluster at once
with a CPU to spare (their GPUs, ``tensor_parallel_size x num_replicas`` summed, within the cluster's; their CPU
replicas' cores, summed, below the cluster's CPUs), because a held engine keeps its reservation while the other
teachers sample and verification runs on Ray beside it. Otherwise each stage starts and closes the engine as
before (a replica that waits for cores a held one keeps would wait forever). A ``vllm`` teacher on CPU with the
default ``cpus_per_replica`` (every core) is never held. A ``transformers`` teacher (in the build's own process,
outside Ray) is held on CPU always, and on a GPU unless a ``vllm`` teacher uses GPUs too (its model would keep
GPU memory while vLLM starts). Holding is an execution detail: no stage key sees it, and sample ``k`` of a
problem is the same text whichever engine process draws it.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

log = logging.getLogger("bonforge")


def reservation(teacher: Any, cluster: dict) -> Counter:
    """What all the replicas of a ``vllm`` teacher reserve in Ray (``vllm_engine.actor_options``)."""
    from bonforge.llm.vllm_engine import actor_options

    options = actor_options(teacher, cluster)
    kind = "GPU" if teacher.device == "gpu" else "CPU"
    return Counter({kind: options["num_gpus" if kind == "GPU" else "num_cpus"] * teacher.num_replicas})


def fit_at_once(teachers: list, cluster: dict) -> bool:
    """Whether every ``vllm`` teacher's replicas fit in ``cluster`` (Ray's resources) together, one CPU left."""
    total = sum((reservation(t, cluster) for t in teachers if t.engine == "vllm"), Counter())
    return total["GPU"] <= cluster.get("GPU", 0) and total["CPU"] <= cluster.get("CPU", 0) - 1


def _ray_resources() -> dict:
    from bonforge.runtime.cluster import ensure_ray

    return ensure_ray().cluster_resources()


class HeldEngines:
    """The engines of one build's ``vllm`` and ``transformers`` teachers, lent to its sampling stages; a context
    manager that closes them all at its end (on error too). Ray's resources are looked up at the first start of a
    ``vllm`` engine only."""

    def __init__(self, teachers: list):
        self.teachers = [t for t in teachers if t.engine == "vllm"]
        gpus = any(t.device == "gpu" for t in self.teachers)
        local = [t for t in teachers if t.engine == "transformers" and (t.device == "cpu" or not gpus)]
        self.lent = {t.name: Lent(t, self) for t in [*self.teachers, *local]}
        self.hold: bool | None = None  # the vllm teachers': decided at the first start

    def engine(self, teacher: Any) -> "Lent | None":
        """The engine lent to ``teacher``'s stages, or None: the stage makes its own (a teacher never held)."""
        return self.lent.get(teacher.name)

    def holds(self, teacher: Any) -> bool:
        return teacher.engine == "transformers" or self.holding()

    def holding(self) -> bool:
        """Whether the vllm teachers are held (looks Ray's resources up once)."""
        if self.hold is None:
            self.hold = fit_at_once(self.teachers, _ray_resources())
            log.info("vllm teachers %s: engines %s", ", ".join(t.name for t in self.teachers),
                     "held across the rounds" if self.hold else "started per round (they do not fit at once with "
                     "a CPU to spare)")
        return self.hold

    def __enter__(self) -> "HeldEngines":
        return self

    def __exit__(self, *exc) -> None:
        for lent in self.lent.values():
            lent.release()


class Lent:
    """An engine as a sampling stage sees it: started on first use; its ``close`` (the stage's end) keeps it
    loaded while the engines are held; a failed ``generate`` closes it, so that a retry starts it afresh."""

    def __init__(self, teacher: Any, owner: HeldEngines):
        self.teacher, self.owner, self.name = teacher, owner, teacher.engine
        self.engine: Any = None

    def start(self) -> None:
        if self.engine is None:
            from bonforge import llm

            self.owner.holds(self.teacher)
            self.engine = llm.make_engine(self.teacher)
        self.engine.start()

    def generate(self, requests: list, *args, **kwargs) -> list:
        self.start()
        try:
            return self.engine.generate(requests, *args, **kwargs)
        except BaseException:
            self.release()
            raise

    def close(self) -> None:
        if not self.owner.holds(self.teacher):
            self.release()

    def release(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    def __getattr__(self, name: str) -> Any:
        engine = self.__dict__.get("engine")
        if engine is None:
            raise AttributeError(name)
        return getattr(engine, name)
