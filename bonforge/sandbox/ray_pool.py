"""One sandbox pool per Ray node, shared by every worker process on that node.

``node_pool(cfg)`` returns a client for a named actor pinned to the caller's node (created on first
use, found by name afterwards); the actor owns a ``SandboxPool`` and serves ``run`` calls from many
workers concurrently (a threaded actor). Pass the client as ``verify_code(..., pool=...)``. The actor
is detached (a named actor is otherwise collected as soon as the task that made it returns): it stays
warm for later jobs until ``shutdown_node_pools()`` or the cluster stops; its containers go with its
process. The only module of the sandbox that imports Ray, and only when called.
"""

from __future__ import annotations

import hashlib

from bonforge.sandbox.config import CodeVerifyConfig


NAMESPACE = "bonforge"
PREFIX = "bonforge-sandbox-"


class _PoolActor:
    def __init__(self, cfg_json: str):
        from bonforge.sandbox.pool import SandboxPool

        self.pool = SandboxPool(CodeVerifyConfig.model_validate_json(cfg_json))
        self.pool.start()

    def run(self, requests: list[dict]) -> list[dict]:
        return self.pool.run(requests)

    def close(self) -> None:
        self.pool.close()


class RayPoolClient:
    """Speaks to the node's pool actor; picklable (holds only the actor handle)."""

    PIECE = 16  # requests per actor call: with ``on_outcome``, the caller holds one piece's outcomes at a time
    streams_outcomes = True

    def __init__(self, actor):
        self.actor = actor

    def run(self, requests: list[dict], on_outcome=None) -> list[dict]:
        """As ``SandboxPool.run``; with ``on_outcome`` the requests go in pieces, all at once (the actor runs
        them concurrently), and each piece's outcomes are handed to it as the piece comes back."""
        import ray

        if on_outcome is None:
            return ray.get(self.actor.run.remote(requests))
        out: list = [None] * len(requests)
        starts = {self.actor.run.remote(requests[s : s + self.PIECE]): s for s in range(0, len(requests), self.PIECE)}
        pending = list(starts)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            start = starts[done[0]]
            for k, outcome in enumerate(ray.get(done[0])):
                out[start + k] = on_outcome(start + k, outcome)
        return out


def node_pool(cfg: CodeVerifyConfig) -> RayPoolClient:
    """The shared pool of this node for ``cfg`` (one actor per node and distinct sandbox settings)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node_id = ray.get_runtime_context().get_node_id()
    cfg_json = cfg.model_dump_json()
    name = f"{PREFIX}{node_id[:16]}-{hashlib.sha256(cfg_json.encode()).hexdigest()[:8]}"
    actor = (
        ray.remote(_PoolActor)
        .options(
            name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached", num_cpus=0,
            max_concurrency=max(4, 4 * cfg.pool_size),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        )  # fmt: skip
        .remote(cfg_json)
    )
    return RayPoolClient(actor)


def shutdown_node_pools() -> int:
    """Stop every node's pool actor (and so its containers); returns how many were stopped."""
    import ray

    stopped = 0
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == NAMESPACE and entry["name"].startswith(PREFIX):
            actor = ray.get_actor(entry["name"], namespace=NAMESPACE)
            try:
                ray.get(actor.close.remote(), timeout=60)
            finally:
                ray.kill(actor)
            stopped += 1
    return stopped


def pool_for(cfg: CodeVerifyConfig):
    """In a process of a Ray session: the node's shared pool (one per node for all workers); else this
    process's own (``bonforge.sandbox.pool.shared_pool``)."""
    import ray

    if ray.is_initialized():
        return node_pool(cfg)
    from bonforge.sandbox.pool import shared_pool

    return shared_pool(cfg)
