"""How a maths verdict is reached: one candidate text against one gold answer (``judge``), the rules that run
in the checker child of ``bonforge.judging.math``.

Both the answer and the gold are read by math-verify itself (``parse`` with its LaTeX and expression
extraction, boxed answers first by default), and compared by ``verify(gold, pred)``, gold first. A recipe's
regexes (GSM8K's ``A: x``) come before math-verify's extraction where the recipe names them; the last
number of a text without LaTeX is a fallback only where math-verify finds nothing. One-word answers of a
closed pair (yes/no, true/false, odd/even) are read where the text states them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from bonforge.judging.config import MathVerifyConfig
from bonforge.judging.extract import before_open_block

MAX_EXTRACTED_CHARS = 1000  # the verdict row keeps at most this much of the extracted answer


@dataclass(frozen=True)
class MathResult:
    """The verdict on one answer.

    ``status``: ``correct`` | ``wrong_answer`` | ``no_answer`` (nothing to compare was found) | ``timeout``
    (killed at the hard limit) | ``error`` (unreadable gold answer, or the verifier failed).
    ``extracted``: the answer as math-verify read it (its string form), or None.
    ``detail``: why the status is not ``correct`` / ``wrong_answer``, else None.
    """

    status: str
    extracted: str | None = None
    detail: str | None = None
    latency_ms: float = 0.0

    @property
    def correct(self) -> bool:
        return self.status == "correct"


# -- reading answers (runs in the child) ---------------------------------------------------------------------
# A lone number by math-verify's expression rules, optionally with a currency sign, a percent sign or unit
# words ("12 apples"): read as plain text, where "2,74" is 2.74 and "1 000" is 1000 (in $...$ they would be
# the set {2, 74} and the product 1*0).
_PLAIN_NUMBER = re.compile(
    r"[$€£¥]?\s*[-+]?(?:[1-9]\d{0,2}(?:[ ,]\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?|\.\d+)"
    r"\s*(?:%|[Pp]ercent)?(?:\s+[A-Za-z]{2,})*\s*\.?"
)
_LATEX_MARKUP = re.compile(r"\$[^$]+\$|\\\(|\\\[|\\boxed")
_COMMANDS = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname|begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+")
# "2,74" reads as 2.74 in plain text and as the pair {2, 74} in LaTeX: such a gold answer accepts both
_COMMA_PAIR = re.compile(r"[-+]?\d+,\d+")
_THOUSANDS = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+")
_WORD = re.compile(r"(?<![A-Za-z])(?!(?:and|or)\b)[A-Za-z]{2,}")  # an English word, not a variable or \command
_FORMULA = re.compile(r"(?:\\.|[\w\s+\-*/^=<>()\[\]{}|,.!'&])+")  # no ':', '#', '?', ... ("A: 4" is text)
_ONE_WORD = re.compile(r"[A-Za-z]+")
# One-word answers that come in a closed pair: against such a gold, a text's answer is the pair's word it
# states, wherever it is stated (a recipe pattern's value, a box, else the last sentence naming one, preferring
# what follows "answer" in a sentence); a place naming both words of the pair states none
_PAIRS = {w: pair for pair in (("yes", "no"), ("true", "false"), ("odd", "even")) for w in pair}
_GOLD_WORD = re.compile(r"(?:\\boxed\{|\\text\{)*([A-Za-z]+)\}*\.?")  # of a stripped gold: no blanks to trade
_SENTENCES = re.compile(r"[^.!?;\n]+")
_WRAPPER = re.compile(r"\\(?:text(?:bf|it|rm|sf|tt)?|math(?:rm|bf|it|sf)|mbox|emph)\s*\{([^{}]*)\}")
_DELIMITERS = re.compile(r"\$|\\[()\[\]]")
# what stands next to a word up to the nearest letter or separator (, ; :), blanks included: signs, digits,
# commands or brackets, where only brackets, quotes and punctuation may stand around a stated word
_BEFORE = re.compile(r"(?:\\[A-Za-z]+|[^A-Za-z,;:])*$")
_AFTER = re.compile(r"[^A-Za-z,;:]*")
_NEGATION = re.compile(r"(?<![A-Za-z])(?:not|never|neither|nor|non|[A-Za-z]+n['\u2019]t)[\s\x22'\u201c\u2018-]*$",
                       re.IGNORECASE)  # "is not even", "isn't 'odd'", "non-even": the word is not stated
_DASH = re.compile(r"\s[-\u2013\u2014]+\s")  # "yes - it is prime": a dash in prose, no minus sign
_PUNCTUATION = set(".,;:!?'\"()[]{}\u201c\u201d\u2018\u2019\u00ab\u00bb")  # all that may touch a stated word
_MISSING_GOLD = {"nan", "<na>", "nat"}  # what pandas writes for a missing value: never a gold answer
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


# Writing that math-verify misreads, rewritten the same way in candidate texts and gold answers before anything
# reads them (recipe patterns included)
_REWRITES = [
    (re.compile("\u2212"), "-"),  # the Unicode minus sign: math-verify finds no number in "−5"
    (re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))"), ""),  # 10\,000: math-verify reads 10{,}000 but not 10\,000
    (re.compile(r"\\(?:fbox|boxed)\s*\{"), r"\\boxed{"),  # \fbox{7} and \boxed {7} are answer boxes too
    (re.compile(r"(?<![\w*])\*\*(?=\S)([^*\n]+?)(?<=\S)\*\*(?![\w*])"), r"\1"),  # Markdown bold: **42** is 42
    # a sentence's full stop after a number: math-verify reads "7/3." as 7/3.0, a float unequal to 7/3
    (re.compile(r"(?<=\d)\.(?=\s|$|\$|\\[)\]])"), ""),
    (re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d{1,3})(?![\w.])"), r"\1*10^(\2)"),  # 3.2e5: it reads 3.2
]


def _normalised(text: str) -> str:
    for pattern, repl in _REWRITES:
        text = pattern.sub(repl, text)
    return text


@dataclass(frozen=True, eq=False)  # one per settings (``_rules`` is cached): hashed by identity
class _Rules:
    patterns: tuple[re.Pattern, ...]
    targets: tuple  # math-verify extraction configs
    choices: bool
    last_number: bool
    verify_kw: dict


@lru_cache(maxsize=16)
def _rules(cfg_json: str) -> _Rules:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

    cfg = MathVerifyConfig.model_validate_json(cfg_json)
    if cfg.choices:
        targets = (StringExtractionConfig(strings=tuple(cfg.choices)),)
    else:
        targets = (LatexExtractionConfig(boxed_match_priority=cfg.boxed_match_priority), ExprExtractionConfig())
    return _Rules(
        patterns=tuple(re.compile(p, re.MULTILINE) for p in cfg.patterns),
        targets=targets,
        choices=bool(cfg.choices),
        last_number=cfg.last_number and not cfg.choices,
        verify_kw={"float_rounding": cfg.float_rounding, "numeric_precision": cfg.numeric_precision,
                   "strict": cfg.strict, "allow_set_relation_comp": cfg.allow_set_relation_comp},
    )


def _mv_parse(text: str, rules: _Rules) -> list:
    """math-verify's ``parse``; short strings (answers, gold, captured values) once each."""
    return _mv_parse_short(text, rules) if len(text) <= MAX_EXTRACTED_CHARS else _mv_parse_any(text, rules)


def _mv_parse_any(text: str, rules: _Rules) -> list:
    from math_verify import parse

    return parse(text, rules.targets, parsing_timeout=None)


_mv_parse_short = lru_cache(maxsize=8192)(_mv_parse_any)


def _pattern_answer(text: str, rules: _Rules) -> tuple[int, str] | None:
    """(pattern number, value) of the last match of the first recipe pattern that matches."""
    for n, pattern in enumerate(rules.patterns, 1):
        m = None
        for m in pattern.finditer(text):  # noqa: B007  (the last match is the one kept)
            pass
        if m is not None:
            value = (m.group(1) if m.groups() else m.group(0)) or ""
            if value.strip():
                return n, value.strip()
    return None


def _parse_answer(answer: str, rules: _Rules) -> list:
    """An answer on its own (a plain gold answer, a value a recipe pattern captured, a one-line reply),
    read the way math-verify reads gold: text with LaTeX markup or words, or a lone number, as text; a
    bare formula as LaTeX (``\\frac{\\sqrt{3}}{2}``, ``[0,1)``, ``x >= 5``, ``3, 5, 7``, ``x=5 or x=-3``)."""
    answer = answer.strip()
    if (rules.choices or _LATEX_MARKUP.search(answer) or not _FORMULA.fullmatch(answer)
            or _PLAIN_NUMBER.fullmatch(answer) or _WORD.search(_COMMANDS.sub(" ", answer))):
        return _mv_parse(answer, rules)
    return _mv_parse(f"${answer}$", rules) or _mv_parse(answer, rules)


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, cfg_json: str) -> list:
    """Parsed once per distinct gold answer (worked solutions too): a problem's candidates share it."""
    rules = _rules(cfg_json)
    gold = _normalised(gold)
    hit = _pattern_answer(gold, rules)
    answer = (hit[1] if hit else gold).strip()
    parsed = _parse_answer(answer, rules)
    if not rules.choices and _COMMA_PAIR.fullmatch(answer) and not _THOUSANDS.fullmatch(answer):
        parsed = parsed + _mv_parse(f"${answer}$", rules)
    if not parsed and not rules.choices and _ONE_WORD.fullmatch(answer):  # "yes": math-verify reads \text{yes}
        parsed = _mv_parse(f"$\\text{{{answer}}}$", rules)
    return parsed


def gold_answer(gold: str, cfg_json: str) -> str:
    """The final answer of a gold as the judge reads it, as text (the RL export's ``ground_truth``): the value of
    the recipe pattern that matches (GSM8K's ``#### 18``), else the last ``\\boxed{...}`` (MATH's worked
    solutions), else a one-line gold as it is, else the text math-verify extracts from the worked solution."""
    rules, text = _rules(cfg_json), _normalised(gold)
    hit = _pattern_answer(text, rules)
    if hit:
        return hit[1]
    text, box = text.strip(), _last_box(text)
    if box is not None and box.strip():
        return box.strip()
    if "\n" not in text and len(text) <= MAX_EXTRACTED_CHARS:
        return text
    parsed = _parse_gold(gold, cfg_json)
    return _shown(parsed) if parsed else text


def _bare(text: str) -> str:
    """``text`` without the markup a word is written in: ``\\text{...}`` and its kin (their content kept),
    ``$`` and ``\\(``-style delimiters."""
    while (unwrapped := _WRAPPER.sub(lambda m: m.group(1).strip(), text)) != text:
        text = unwrapped
    return _DELIMITERS.sub("", text)


def _pair_words(text: str, pair: tuple[str, str]) -> tuple[set[str], bool]:
    """The words of ``pair`` that ``text`` states (its markup left out), and whether it names one with a
    sign, an operator, a digit or a command beside it (``-even``, ``-( \\text{even})``, ``even^2``, ``2 yes``,
    ``\\neg yes``), or after a negation (``not even``, ``isn't odd``): not a statement of the word."""
    said, touched = set(), False
    text = _bare(text)
    for m in re.finditer(rf"(?<![A-Za-z])(?:{pair[0]}|{pair[1]})(?![A-Za-z])", text, re.IGNORECASE):
        before = _BEFORE.search(text[max(m.start() - 64, 0):m.start()]).group()
        after = _DASH.sub(" ", _AFTER.match(text[m.end():m.end() + 64]).group())
        negated = _NEGATION.search(text[max(m.start() - 64, 0):m.start()])
        if set("".join((before + after).split())) <= _PUNCTUATION and not negated:
            said.add(m.group().lower())
        else:
            touched = True
    return said, touched


def _last_box(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced, at most 1,000 characters), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, min(len(text), i + MAX_EXTRACTED_CHARS)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def _judge_word(text: str, word: str, rules: _Rules) -> tuple[str, str | None, str | None]:
    """(status, extracted, detail) of a text against a gold of a closed pair (``_PAIRS``). A recipe pattern's
    value or a box naming a word of the pair states it only as the word alone (``\\boxed{-(\\text{even})}``,
    ``\\boxed{\\text{yes}+1}`` are wrong answers); a sentence states it only without a sign, an operator, a
    digit or a command beside it."""
    pair = _PAIRS[word]
    places = [hit[1] for hit in [_pattern_answer(text, rules)] if hit] + [b for b in [_last_box(text)] if b]
    place = next((p for p in places if any(_pair_words(p, pair))), None)
    if place is not None:
        alone = _bare(place).strip().rstrip(".").strip().lower()
        if alone not in pair:
            return "wrong_answer", place[:MAX_EXTRACTED_CHARS], None
        found = {alone}
    else:  # the last sentence saying "answer ..." with a word of the pair after it, else the last stating one
        stating = [s for s in _SENTENCES.findall(text) if _pair_words(s, pair)[0]]
        cued = [w for s in stating if (i := s.lower().rfind("answer")) >= 0 and (w := _pair_words(s[i:], pair)[0])]
        found = cued[-1] if cued else _pair_words(stating[-1], pair)[0] if stating else set()
    if len(found) != 1:
        return "no_answer", None, (f"the answer says both {pair[0]!r} and {pair[1]!r}" if found
                                   else f"no {pair[0]}/{pair[1]} answer in the text")  # fmt: skip
    said = found.pop()
    return ("correct" if said == word else "wrong_answer"), said, None


def _gold_word(gold: str, rules: _Rules) -> str | None:
    """The gold's word when it is one of a closed pair (``yes``, ``\\boxed{No}``, ``\\text{True}``), else None."""
    if rules.choices:
        return None
    hit = _pattern_answer(gold, rules)
    m = _GOLD_WORD.fullmatch((hit[1] if hit else gold).strip())
    return m.group(1).lower() if m and m.group(1).lower() in _PAIRS else None


def _shown(parsed: list) -> str:
    """math-verify's string form of what it extracted (the matched text, normalised)."""
    text = next((p for p in reversed(parsed) if isinstance(p, str)), None)
    return (text if text is not None else str(parsed[0]))[:MAX_EXTRACTED_CHARS]


def _extract(text: str, rules: _Rules) -> tuple[list, str | None]:
    """(parsed answer, why there is none)."""
    hit = _pattern_answer(text, rules)
    if hit:
        parsed = _parse_answer(hit[1], rules)
        return parsed, None if parsed else f"math-verify cannot read {hit[1][:200]!r} (matched by pattern {hit[0]})"
    one_line = "\n" not in text.strip() and len(text) <= MAX_EXTRACTED_CHARS
    if parsed := (_parse_answer(text, rules) if one_line else _mv_parse(text, rules)):
        return parsed, None
    if one_line and not rules.choices and _ONE_WORD.fullmatch(word := text.strip().rstrip(".")):
        return _mv_parse(f"$\\text{{{word}}}$", rules), None  # a one-word reply, read as a one-word gold is
    latex = "\\" in text or "$" in text
    if rules.last_number and not latex and (numbers := _LAST_NUMBER.findall(text)):
        return _mv_parse(numbers[-1], rules), None
    what = "no recipe pattern matched and " if rules.patterns else ""
    what += "math-verify found no " + ("choice letter" if rules.choices else "answer") + " in the text"
    if rules.last_number and latex:
        what += " (the last-number fallback skips texts with LaTeX)"
    return [], what


def judge(text: str, gold: str, cfg_json: str) -> tuple[str, str | None, str | None]:
    """(status, extracted, detail) of one item, without any time limit: call it only in a killable child."""
    from math_verify import verify

    rules = _rules(cfg_json)
    if gold.strip().lower() in _MISSING_GOLD:
        return "error", None, f"the gold answer {gold.strip()!r} is a missing value, not an answer"
    if (word := _gold_word(_normalised(gold), rules)) is not None:
        return _judge_word(_normalised(text), word, rules)
    gold_parsed = _parse_gold(gold, cfg_json)
    if not gold_parsed:
        return "error", None, f"math-verify cannot read the gold answer {gold[:200]!r}"
    pred, why = _extract(_normalised(before_open_block(text)), rules)
    if not pred:
        return "no_answer", None, why
    key = (gold, cfg_json, _exact_form(pred))  # a problem's candidates often give the same answer: verified once
    ok = _VERIFIED.get(key)
    if ok is None:
        ok = verify(gold_parsed, pred, timeout_seconds=None, **rules.verify_kw)
        if len(_VERIFIED) >= 65536:
            _VERIFIED.clear()
        _VERIFIED[key] = ok
    return ("correct" if ok else "wrong_answer"), _shown(pred), None


_VERIFIED: dict[tuple, bool] = {}


def _exact_form(parsed: list) -> tuple:
    """What ``verify`` sees of a parsed answer, exactly (sympy's ``srepr`` keeps types and assumptions)."""
    from sympy import srepr

    return tuple(p if isinstance(p, str) else srepr(p) for p in parsed)
