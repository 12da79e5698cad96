"""Known model names: their stage identity needs nothing prepared; other names and paths pass through."""

from __future__ import annotations

import pytest

from bonforge.errors import ConfigError
from bonforge.llm import models
from bonforge.tasks.sample import model_identity


def test_a_known_name_has_a_fixed_identity_and_other_models_pass_through(tmp_path):
    ident = model_identity("smollm2-135m-instruct", None)
    assert ident == {"name": "smollm2-135m-instruct", "gguf_sha256": models.KNOWN["smollm2-135m-instruct"].sha256,
                     "convert": models.CONVERT_VERSION, "revision": None}
    assert model_identity("Qwen/Qwen3-1.7B", "abc") == {"name": "Qwen/Qwen3-1.7B", "revision": "abc"}
    assert models.resolve("Qwen/Qwen3-1.7B") == "Qwen/Qwen3-1.7B" and models.resolve(str(tmp_path)) == str(tmp_path)


def test_import_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.gguf: no such GGUF file"):
        models.import_gguf(tmp_path / "missing.gguf", tmp_path / "out")
    (tmp_path / "m.gguf").write_bytes(b"not a gguf file")
    (tmp_path / "out").mkdir()
    with pytest.raises(ConfigError, match=r"out exists already"):
        models.import_gguf(tmp_path / "m.gguf", tmp_path / "out")


def test_a_missing_model_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(models.KNOWN, "absent-model", models.Known("no_such_package_xyz", "m.gguf", "0" * 64, "pip x"))
    with pytest.raises(ConfigError, match=r"model 'absent-model' ships in the Python package no_such_package_xyz, "
                                          r"which is not installed: pip x"):
        models.resolve("absent-model")
