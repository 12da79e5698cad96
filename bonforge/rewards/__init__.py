"""Reward functions for trainers, one module per reward: ``genselect``, ``math``, ``code``.

Each checks a response with the same code as the verdicts stage (no second implementation) and offers
both calling conventions:

* verl: ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict`` with
  ``score`` and the details verl logs; load it with ``reward.custom_reward_function.path=pkg://<module>``.
* TRL: ``<name>_reward(prompts, completions, **columns) -> list[float]``, taking the dataset's columns
  (``reward_model``, ``extra_info``) as TRL passes them, one call per batch.

Every function is safe to call from threads and worker processes: nothing relies on SIGALRM. None
raises on a response, whatever it holds (lone surrogates, NUL bytes, megabytes of whitespace), and each
returns within a bound known in advance (docs/training.md, "How long a reward call takes"): responses
are untrusted data, read by linear-time scans only.
A dataset's ``manifest.json`` names the function to use under ``trainers`` (see docs/training.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: Any) -> str:
    """A response as text that encodes to UTF-8: lone surrogates (which a str may hold, but no file, pipe
    or Arrow column can) become U+FFFD, as a UTF-8 decoder turns bytes it cannot read; None is empty."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a string, or conversational messages (the assistant turns joined)."""
    if completion is None or isinstance(completion, str):
        return valid_text(completion)
    if isinstance(completion, dict):
        return valid_text(completion.get("content") or "")
    return valid_text("".join(str(m.get("content") or "") for m in completion
                              if isinstance(m, dict) and m.get("role", "assistant") == "assistant"))


def ground_truth_of(reward_model: Any) -> str:
    """``reward_model.ground_truth`` of one row (a dict, as verl and TRL give it)."""
    if not isinstance(reward_model, dict) or not isinstance(reward_model.get("ground_truth"), str):
        raise ValueError(f"reward_model: expected a mapping with a string ground_truth, got {reward_model!r:.200}")
    return reward_model["ground_truth"]


def settings_of(extra_info: dict | None) -> dict:
    """The verdicts stage's checking settings a row carries (``extra_info.verify``, JSON), else none."""
    raw = (extra_info or {}).get("verify")
    return json.loads(raw) if raw else {}
