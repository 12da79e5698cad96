"""Build the sandbox image with no image registry, and remove leftover sandbox containers.

The image is a Debian bookworm root filesystem made by ``debootstrap --variant=minbase
--include=python3`` and loaded with ``docker import`` (the *base*, built once, ~1 minute), plus the runner
copied in with ``docker commit`` (seconds). The tag carries a hash of the runner, so a changed runner
gets a new image and an old image never runs new code. ``Dockerfile`` beside this module builds the
equivalent image where a registry is reachable.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from bonforge.errors import SandboxError

log = logging.getLogger("bonforge.sandbox")

RUNNER_PATH = Path(__file__).with_name("runner.py")
RUNNER_IN_IMAGE = "/opt/bonforge/runner.py"
BASE_IMAGE = "bonforge-sandbox-base:bookworm"
LABEL = "bonforge.sandbox"
OWNER_LABEL = "bonforge.sandbox.owner"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def default_tag() -> str:
    digest = hashlib.sha256(RUNNER_PATH.read_bytes()).hexdigest()[:12]
    return f"bonforge-sandbox:{digest}"


def owner() -> str:
    """The owner label of containers this process starts: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _docker(*args: str, check: bool = True, input: bytes | None = None, timeout: float = 600) -> str:
    try:
        proc = subprocess.run(["docker", *args], input=input, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise SandboxError("the docker client is not installed (backend 'docker')") from None
    except subprocess.TimeoutExpired:
        raise SandboxError(f"docker {args[0]} did not answer within {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        raise SandboxError(f"docker {' '.join(args[:2])} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout.decode()


def image_exists(tag: str) -> bool:
    return bool(_docker("images", "-q", tag).strip())


def debian_mirror() -> str:
    """``BONFORGE_DEBIAN_MIRROR``, else the host's apt source, else deb.debian.org."""
    if os.environ.get("BONFORGE_DEBIAN_MIRROR"):
        return os.environ["BONFORGE_DEBIAN_MIRROR"]
    sources = sorted(Path("/etc/apt").glob("sources.list.d/*.sources")) + [Path("/etc/apt/sources.list")]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.M) or re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s", text, re.M)
        if m:
            return m.group(1)
    return DEFAULT_MIRROR


def build_base(force: bool = False) -> str:
    """Import a debootstrapped Debian root filesystem with python3 as ``BASE_IMAGE``."""
    if not force and image_exists(BASE_IMAGE):
        return BASE_IMAGE
    if shutil.which("debootstrap") is None:
        raise SandboxError(
            "building the sandbox image needs debootstrap (apt-get install debootstrap), "
            "or build bonforge/sandbox/Dockerfile where a registry is reachable"
        )
    mirror = debian_mirror()
    log.info("building %s with debootstrap from %s", BASE_IMAGE, mirror)
    with tempfile.TemporaryDirectory(prefix="bonforge-rootfs-") as tmp:
        root = os.path.join(tmp, "root")
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", root, mirror],
            capture_output=True,
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).decode(errors="replace")[-2000:]
            raise SandboxError(f"debootstrap from {mirror} failed: {tail}")
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(
            ["docker", "import", "-m", "bonforge sandbox base (debootstrap bookworm + python3)", "-", BASE_IMAGE],
            stdin=tar.stdout, capture_output=True,
        )
        tar.stdout.close()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise SandboxError(f"docker import failed: {imp.stderr.decode(errors='replace').strip()}")
    return BASE_IMAGE


def build_image(tag: str | None = None, force: bool = False) -> str:
    """Build the sandbox image (no registry needed) unless it exists; return its tag."""
    tag = tag or default_tag()
    if not force and image_exists(tag):
        return tag
    base = build_base(force=force)
    name = f"bonforge-build-{os.getpid()}"
    _docker("rm", "-f", name, check=False)
    try:
        _docker("run", "--name", name, "--network", "none", base, "mkdir", "-p", os.path.dirname(RUNNER_IN_IMAGE))
        _docker("cp", str(RUNNER_PATH), f"{name}:{RUNNER_IN_IMAGE}")
        changes = [
            "ENV PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8",
            "USER 0:0",  # the runner: it starts each test as uid 65534 with no capabilities
            "WORKDIR /tmp",
            f'CMD ["python3", "-u", "{RUNNER_IN_IMAGE}", "--contained", "--uid", "65534:65534"]',
            f"LABEL {LABEL}.image=1",
        ]
        args = [a for c in changes for a in ("--change", c)]
        _docker("commit", *args, name, tag)
    finally:
        _docker("rm", "-f", name, check=False)
    log.info("built sandbox image %s", tag)
    return tag


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_containers(all_owners: bool = True) -> int:
    """Remove sandbox containers; with ``all_owners=False`` only those whose owning process on this
    host is gone (safe while other pools run). Returns how many were removed."""
    out = _docker("ps", "-a", "--filter", f"label={LABEL}=1", "--format", f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}')
    host = socket.gethostname()
    doomed = []
    for line in out.splitlines():
        cid, _, own = line.partition(" ")
        if not cid:
            continue
        if not all_owners:
            h, _, pid = own.partition(":")
            if h == host and pid.isdigit() and _pid_alive(int(pid)):
                continue
            if h != host:
                continue
        doomed.append(cid)
    if doomed:
        _docker("rm", "-f", *doomed, check=False)
    return len(doomed)
