"""``python -m bonforge``: the same CLI as the ``bonforge`` command (handy from a checkout)."""

from bonforge.cli import app

if __name__ == "__main__":
    app(prog_name="bonforge")
