"""The verdict vocabulary: `correct` is the column every domain shares; each domain's statuses are the closed
sets the schema names, and docs/stages.md lists every one of them with the word that means correct."""

from __future__ import annotations

import re
from pathlib import Path

from bonforge.schema import CODE_STATUSES, MATH_STATUSES, VERDICTS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "stages.md"


def test_every_domain_shares_the_correct_column():
    assert VERDICTS.field("correct").type == "bool" and not VERDICTS.field("correct").nullable
    assert VERDICTS.field("status").type == "string"


def test_the_docs_list_every_status_of_each_domain():
    rows = {m.group(1): m for m in re.finditer(r"^\| (maths|code) \| `(\w+)` \| (.*) \|$", DOCS.read_text(), re.M)}
    for domain, statuses, accepted in (("maths", MATH_STATUSES, "correct"), ("code", CODE_STATUSES, "passed")):
        assert domain in rows, f"docs/stages.md has no verdict-words row for {domain}"
        assert rows[domain].group(2) == accepted
        assert re.findall(r"`(\w+)`", rows[domain].group(3)) == list(statuses)
