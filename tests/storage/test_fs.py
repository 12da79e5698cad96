import os
import socket
import subprocess
import sys

from bonforge.storage.fs import LocalDir


def test_only_the_temps_of_writers_that_no_longer_run_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    crashed = tmp_path / f".part-0.parquet.tmp-{host}-{dead.pid}"
    live = tmp_path / f".part-1.parquet.tmp-{host}-{os.getpid()}"
    elsewhere = tmp_path / f".part-2.parquet.tmp-{host}x-{dead.pid}"  # another host's writer: not ours to judge
    kept = tmp_path / "part-3.parquet"
    for f in (crashed, live, elsewhere, kept):
        f.write_bytes(b"x")
    LocalDir(tmp_path).remove_dead_temps(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, elsewhere.name, kept.name])
