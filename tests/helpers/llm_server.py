"""A real HTTP server speaking the OpenAI chat/completions API, answering from a script (test helper)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

# A script step: (status, headers, body-or-None). None body means "the normal answer".
Step = tuple[int, dict, object]


def answer(body: dict) -> dict:
    """A deterministic chat completion: the text depends on the prompt and the seed only."""
    prompt = json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True)
    digest = hashlib.sha256(f"{prompt}|{body.get('seed')}".encode()).hexdigest()[:12]
    text = f"<think>seed {body.get('seed')}</think>The answer is \\boxed{{{int(digest, 16) % 100}}} ({digest})"
    if "messages" in body:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    else:
        choice = {"index": 0, "text": text, "finish_reason": "length"}
    return {"id": "cmpl-" + digest, "object": "chat.completion", "choices": [choice],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 7, "total_tokens": len(prompt) // 4 + 7}}


def adder(text: str) -> Callable[[int, dict], Step]:
    """A script for prompts asking "What is A + B?": right for one seed in four (pass rate 0.25), else off by
    one. ``text`` is the reply, with ``{value}`` for the sum given and ``{temperature}`` for the request's."""

    def script(n: int, body: dict) -> Step:
        a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", body["messages"][0]["content"]).groups())
        reply = answer(body)
        value = a + b if body["seed"] % 4 == 0 else a + b + 1
        reply["choices"][0]["message"]["content"] = text.format(value=value, temperature=body.get("temperature"))
        return 200, {}, reply

    return script



def continuing(model: Callable[[dict, str], str | tuple[str, str]]) -> Callable[[int, dict], Step]:
    """A script for a server that continues the final message in place, as vLLM serve does for fenced tool
    blocks: ``model(body, so_far)`` gives the model's whole text (it must start with ``so_far``: the last
    assistant message of a ``continue_final_message`` request, else ""), or ``(text, "length")`` for a text cut
    at the token limit. The reply is the part after ``so_far`` up to the earliest stop string of the request
    (cut, and named in ``stop_reason``), finish reason ``stop``, else the whole part (EOS: ``stop_reason`` null)."""

    def script(n: int, body: dict) -> Step:
        so_far = body["messages"][-1]["content"] if body.get("continue_final_message") else ""
        whole, finish = (got if isinstance(got := model(body, so_far), tuple) else (got, "stop"))
        assert whole.startswith(so_far), "the sequence must go on where it stopped"
        text, stop = whole[len(so_far):], None
        if finish == "stop":
            cut = min(((i, s) for s in body.get("stop") or [] if (i := text.find(s)) >= 0), default=None)
            text, stop = (text[:cut[0]], cut[1]) if cut else (text, None)
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                  "stop_reason": stop}
        return 200, {}, {"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}

    return script

class ScriptedServer:
    """``script(n, body)`` decides the reply of the n-th request (0-based); default: always answer.

    Records every request body, the number of requests and the most requests in flight at once.
    """

    def __init__(self, script: Callable[[int, dict], Step] | None = None, delay_s: float = 0.0):
        self.script = script or (lambda n, body: (200, {}, None))
        self.delay_s = delay_s
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    n = len(server.bodies)
                    server.bodies.append({"path": self.path, **body})
                    server.auth.append(self.headers.get("Authorization"))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                counted = True
                try:
                    refused = server.admit()
                    if refused is None:
                        time.sleep(server.delay_s)
                    status, headers, payload = refused or server.script(n, body)
                    if payload is None:
                        payload = answer(body)
                    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                    with server.lock:  # answered: the client may send its next request as soon as it reads the
                        server.in_flight -= 1  # answer, before this thread would get to its ``finally``
                        counted = False
                    self.send_response(status)
                    for k, v in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    if status == 200:
                        server.served()
                finally:
                    if counted:
                        with server.lock:
                            server.in_flight -= 1

        class Server(ThreadingHTTPServer):
            request_queue_size = 128

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def admit(self) -> Step | None:
        """A reply that refuses the request at once (checked as it arrives, counted in flight), or None."""
        return None

    def served(self) -> None:
        """A request was answered (HTTP 200)."""

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def count(self) -> int:
        return len(self.bodies)


class LimitedServer(ScriptedServer):
    """Takes ``limit`` requests at once (``delay_s`` each) and answers 429 with ``Retry-After`` at once past
    that; ``limit`` may change while it runs (``at_answers``: ``{answers: new limit}``, applied as answers
    come in). Counts the refusals and answers, and keeps when its limit changed, to say what share of its
    capacity a client used (``capacity_share``)."""

    def __init__(self, limit: int, delay_s: float, retry_after: str = "1", at_answers: dict[int, int] | None = None,
                 script: Callable[[int, dict], Step] | None = None):
        super().__init__(script, delay_s)
        self.limit, self.retry_after, self.at_answers = limit, retry_after, dict(at_answers or {})
        self.refused = self.answered = 0
        self.first: float | None = None
        self.last = 0.0
        self.limits: list[tuple[float, int]] = []  # (when, limit) from the first request on

    def admit(self) -> Step | None:
        with self.lock:
            now = time.perf_counter()
            if self.first is None:
                self.first = now
                self.limits.append((now, self.limit))
            if self.in_flight > self.limit:
                self.refused += 1
                return 429, {"Retry-After": self.retry_after}, {"error": {"message": "too many requests"}}
        return None

    def served(self) -> None:
        with self.lock:
            self.answered += 1
            self.last = time.perf_counter()
            if self.answered in self.at_answers:
                self.limit = self.at_answers[self.answered]
                self.limits.append((self.last, self.limit))

    def capacity_share(self) -> float:
        """The answers served over the most the server could have served from its first request to its last
        answer (its limit at each moment, each answer taking ``delay_s``)."""
        ends = [t for t, _ in self.limits[1:]] + [self.last]
        capacity = sum(limit * (end - start) / self.delay_s for (start, limit), end in zip(self.limits, ends))
        return self.answered / capacity if capacity else 0.0
