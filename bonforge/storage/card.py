"""The dataset card of a dataset version: ``README.md`` beside its files.

Its YAML header is what Hugging Face ``datasets`` and the Hub read: ``configs`` (one per format, its data
files per split; the trainer's format is the default), ``dataset_info`` (the features) and ``license``;
under ``bonforge`` the rows per split and the lineage: the bonforge version, the recipe and its ``--set``
overrides, the stage keys, the source files with their content digests, the build's summary (problems
kept and dropped by reason, candidates, verdicts by status). The body says the same for people.
``datasets.load_dataset(<version folder>)`` loads the default config by this card.
"""

from __future__ import annotations

import pyarrow as pa
import yaml

_DTYPES = {"double": "float64", "float": "float32", "halffloat": "float16"}


def features(schema: pa.Schema) -> list[dict]:
    """The schema in the card's feature notation (``datasets.Features`` reads it back)."""
    return [{"name": f.name, **_feature(f.type)} for f in schema]


def _feature(t: pa.DataType) -> dict:
    if pa.types.is_struct(t):
        return {"struct": [{"name": f.name, **_feature(f.type)} for f in t]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _feature(t.value_type)
        return {"list": inner["dtype"] if "dtype" in inner else inner.get("struct", inner)}
    if pa.types.is_map(t) or pa.types.is_union(t) or pa.types.is_dictionary(t):
        raise ValueError(f"no card feature for {t}")
    return {"dtype": _DTYPES.get(str(t), str(t))}


def configs(manifest: dict) -> dict[str, dict[str, str]]:
    """format -> split -> file, the trainer's format first."""
    out: dict[str, dict[str, str]] = {}
    for rel in manifest["files"]:
        fmt, name = rel.split("/", 1)
        out.setdefault(fmt, {})[name.removesuffix(".parquet")] = rel
    first = [t["train_file"].split("/", 1)[0] for t in (manifest.get("trainers") or {}).values()]
    order = [f for f in dict.fromkeys(first) if f in out] + [f for f in out if f not in first]
    return {f: dict(sorted(out[f].items(), key=lambda kv: kv[0] != "train")) for f in order}


def header(manifest: dict, schemas: dict[str, pa.Schema]) -> dict:
    """The YAML header's data (``schemas``: format -> the schema of its files)."""
    cfgs = configs(manifest)
    rows = {rel: f["rows"] for rel, f in manifest["files"].items()}
    info = []
    for fmt in cfgs:
        entry = {"config_name": fmt}
        try:
            entry["features"] = features(schemas[fmt])
        except ValueError:
            pass  # left for `datasets` to read from the Parquet files
        info.append(entry)
    # `datasets` caches a local folder's data under its name (`v3`) and a hash of its card, not of its files:
    # the content checksum in each config's description keeps two versions from sharing a cache entry
    about = f"{manifest['name']} v{manifest['version']}, content sha256 {manifest['content_sha256']}"
    lineage = {k: manifest[k] for k in ("bonforge_version", "recipe", "overrides", "summary", "sources", "stages")
               if k in manifest}
    return {
        "license": manifest.get("license") or "unknown",
        "pretty_name": f"{manifest['name']} v{manifest['version']}",
        "tags": ["bonforge"],
        "configs": [{"config_name": fmt, **({"default": True} if i == 0 else {}), "description": about,
                     "data_files": [{"split": s, "path": rel} for s, rel in splits.items()]}
                    for i, (fmt, splits) in enumerate(cfgs.items())],
        "dataset_info": info,
        "bonforge": {"version": manifest["version"], "created": manifest["created"],
                     "content_sha256": manifest["content_sha256"],
                     "rows": {fmt: {s: rows[rel] for s, rel in splits.items()} for fmt, splits in cfgs.items()},
                     **lineage},
    }  # fmt: skip


def render(manifest: dict, schemas: dict[str, pa.Schema]) -> str:
    """The whole ``README.md``."""
    head = yaml.safe_dump(header(manifest, schemas), sort_keys=False, allow_unicode=True, width=1000)
    cfgs = configs(manifest)
    lines = [f"# {manifest['name']} v{manifest['version']}", "",
             f"Built {manifest['created']} by bonforge {manifest.get('bonforge_version', '?')} from the recipe "
             f"`{manifest.get('recipe', '?')}`" + _overrides(manifest.get("overrides")) + ".", "",
             "| config | split | rows | sha256 |", "|---|---|---|---|"]  # fmt: skip
    for fmt, splits in cfgs.items():
        for split, rel in splits.items():
            f = manifest["files"][rel]
            lines.append(f"| {fmt} | {split} | {f['rows']} | `{f['sha256'][:16]}` |")
    default = next(iter(cfgs), None)
    lines += ["", "```python", "from datasets import load_dataset",
              f"ds = load_dataset(\"<this folder>\")  # config {default!r}; the others: name=..." if default else "",
              "```"]  # fmt: skip
    if "kept" in (summary := manifest.get("summary") or {}):
        dropped = ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in summary["dropped"].items())
        lines += ["", f"Problems: {summary['problems']} in, {summary['kept']} kept"
                  + (f"; dropped: {dropped}" if dropped else "") + "."]
    if sources := manifest.get("sources"):
        lines += ["", "| source | file | content |", "|---|---|---|"]
        for s in sources:
            lines.append(f"| {s['role']} | {s.get('path') or s.get('url') or ''} | "
                         + ", ".join(f"{k} `{v}`" for k, v in s["content"].items()) + " |")
    if manifest.get("stages"):
        lines += ["", "Stage keys (the store's `stages/<stage>/<key>`): " + "; ".join(
            f"{stage} {', '.join(keys)}" for stage, keys in manifest["stages"].items()) + "."]
    return f"---\n{head}---\n\n" + "\n".join(lines) + "\n"


def _overrides(overrides: list[str] | None) -> str:
    return f" with `--set {' '.join(overrides)}`" if overrides else ""
