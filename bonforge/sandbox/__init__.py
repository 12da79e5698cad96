"""Code sandbox: a warm pool of isolated runners, the judge and program extraction.

Importing this package starts nothing (no Docker call); pools start on first use.

* ``config.CodeVerifyConfig``: settings; ``spec``: the JSON test spec of code problems;
* ``pool.SandboxPool``: the warm pool (backends 'docker' and 'process'); ``ray_pool.node_pool``: one
  pool per Ray node, shared by that node's workers;
* ``image.build_image`` / ``image.cleanup_containers``: the image with no registry, leftover containers;
* ``runner.py``: the standalone in-sandbox runner; ``judge`` and ``extract``: host-side helpers.
"""

import bonforge.config  # noqa: F401  (first: it defines the Model base our config needs, then imports it)
from bonforge.sandbox.config import CodeVerifyConfig

__all__ = ["CodeVerifyConfig"]
