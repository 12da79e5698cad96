"""The report's open-ended tables: win rates per language and category (with the stage's bootstrap settings
and the judge's warning), the Best-of-N picks, and the fused answers beside Best-of-N."""

from __future__ import annotations

import re

from open_store import open_store

from bonforge.report import open_ended
from bonforge.storage.catalog import connect


def _cells(page: str, section: str) -> list[list[str]]:
    body = re.search(rf'<section id="{section}".*?</section>', page, re.S).group(0)
    return [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", body)[1:]]


def test_open_ended_tables_per_language_and_category(tmp_path):
    store = open_store(tmp_path)
    run = store.run("r")
    page = "".join(open_ended.sections(connect(store, "r"), store, run))
    rates = {tuple(c[:4]): c[4:] for c in _cells(page, "win_rates")}
    # de1: a win in both orders; en1: the orders disagree (scored 0.5)
    assert rates[("fused", "teacher:b", "all", "all")][:8] == ["2", "1", "0", "0", "1", "0", "0", "0.750"]
    assert rates[("fused", "teacher:b", "language", "de")][:2] == ["1", "1"]  # from the problem's field
    assert rates[("fused", "teacher:b", "language", "en")][4] == "1"  # from the language scorer's expectation
    assert rates[("fused", "teacher:b", "category", "chat")][0] == "2"
    assert "90% interval from 100 bootstrap resamples" in page and "Warning: the judge (j) is the fusor" in page
    bon = {tuple(c[:3]): c[3:] for c in _cells(page, "bon_scores")}
    assert bon[("rm", "language", "de")] == ["1", "1", "1.000", "1.000"]
    assert bon[("rm", "all", "all")][-1] == "1.500"
    assert _cells(page, "fusion_scores")[0][0] == "rm (selection scorer)"
