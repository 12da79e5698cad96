"""``python -m bonforge``: the same CLI as the ``bonforge`` command (handy from a checkout)."""

from bonforge.cli import app

app(prog_name="bonforge")
