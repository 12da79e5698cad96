"""Running programs in isolation: a warm pool of locked-down runners. Judging their results lives in
``bonforge.judging``; nothing here imports it.

Importing this package starts nothing (no Docker call); pools start on first use.

* ``config.CodeVerifyConfig``: settings;
* ``pool.SandboxPool``: the warm pool (backends 'docker' and 'process'); ``ray_pool.node_pool``: one
  pool per Ray node, shared by that node's workers;
* ``image.build_image`` / ``image.cleanup_containers``: the image with no registry, leftover containers;
* ``runner.py`` (+ ``zygote.py``, ``oskit.py``): the standalone in-sandbox runner; ``wire.py`` and ``codec.py``:
  the typed wire and the value codec; ``check_process.py``: the process that runs assert-style checks,
  ``check_host.py`` its host side; ``worker.py``: one worker of the pool;
  ``languages.py``: C++, Java, PyPy (built once per candidate); ``testlib.py``: problems' checker programs,
  ``checker_cache.py``: their compiled binaries kept on disk.
"""

from bonforge.sandbox.config import CodeVerifyConfig

__all__ = ["CodeVerifyConfig"]
