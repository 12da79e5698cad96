"""The rule for holding engines across early stopping's rounds: every vllm teacher's replicas fit in the Ray cluster
at once, with a CPU left for verification; a transformers teacher is held unless it would share GPUs with vLLM."""

from __future__ import annotations

from bonforge.llm.config import TransformersTeacher, VLLMTeacher
from bonforge.llm.held import HeldEngines, fit_at_once


def gpu(name: str, **kw) -> VLLMTeacher:
    return VLLMTeacher(engine="vllm", name=name, model="org/m", **kw)


def cpu(name: str, **kw) -> VLLMTeacher:
    return VLLMTeacher(engine="vllm", name=name, model="org/m", device="cpu", **kw)


def test_gpu_teachers_are_held_when_their_gpus_fit_together():
    assert fit_at_once([gpu("a")], {"GPU": 1, "CPU": 2})
    assert fit_at_once([gpu("a", tensor_parallel_size=2), gpu("b", num_replicas=2)], {"GPU": 4, "CPU": 2})
    assert not fit_at_once([gpu("a", tensor_parallel_size=2), gpu("b", num_replicas=2)], {"GPU": 3, "CPU": 2})


def test_a_cpu_teacher_is_held_only_with_a_core_to_spare():
    assert not fit_at_once([cpu("a")], {"CPU": 8})  # the default: every core, none left for verification
    assert fit_at_once([cpu("a", cpus_per_replica=7)], {"CPU": 8})
    assert not fit_at_once([cpu("a", cpus_per_replica=4), cpu("b", cpus_per_replica=4)], {"CPU": 8})
    assert fit_at_once([cpu("a", cpus_per_replica=2, num_replicas=2), cpu("b", cpus_per_replica=3)], {"CPU": 8})


def test_other_engines_reserve_nothing():
    local = TransformersTeacher(engine="transformers", name="t", model="org/m")
    assert fit_at_once([local, gpu("a")], {"GPU": 1, "CPU": 1})


def test_a_transformers_teacher_is_held_unless_it_shares_gpus_with_vllm():
    def local(device: str) -> TransformersTeacher:
        return TransformersTeacher(engine="transformers", name="t", model="org/m", device=device)

    assert HeldEngines([local("cpu"), gpu("a")]).engine(local("cpu")) is not None
    assert HeldEngines([local("cuda:0"), cpu("a")]).engine(local("cuda:0")) is not None
    assert HeldEngines([local("cuda:0"), gpu("a")]).engine(local("cuda:0")) is None  # vLLM would start beside it
