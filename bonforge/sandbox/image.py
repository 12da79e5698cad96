"""Build the sandbox image with no image registry, and remove leftover sandbox containers.

The image is a Debian bookworm root filesystem made by ``debootstrap --variant=minbase
--include=<BASE_PACKAGES>`` (Python 3, g++, OpenJDK 17, PyPy 3) from the machine's apt mirror and imported
into the engine (the *base*, built once, a few minutes), plus the runner's files (``IN_IMAGE``) copied into
a container of it and committed (seconds), all through the Docker SDK (``client()``: ``DOCKER_HOST`` and
the other ``DOCKER_*`` settings apply; no ``docker`` binary). The base's tag carries a hash of the package
list, the image's tag a hash of the base's tag and of those files: a changed runner or package list gets a
new image, and an old image never runs new code. ``Dockerfile`` beside this module builds the equivalent
image where a registry is reachable.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
from pathlib import Path

from bonforge.errors import SandboxError
from bonforge.runtime.processes import pid_alive

log = logging.getLogger("bonforge.sandbox")

RUNNER_PATH = Path(__file__).with_name("runner.py")
RUNNER_IN_IMAGE = "/opt/bonforge/runner.py"
# The runner's program, in the image beside runner.py (standard library only, imported by their flat names).
IN_IMAGE = ("runner.py", "zygote.py", "oskit.py", "codec.py", "wire.py")
# Debian packages of the base: the languages the sandbox runs (``languages.py``). The base's tag carries a hash
# of this list, and the image's tag the base's: a changed list is a new base and a new image, never a stale one.
BASE_PACKAGES = ("python3", "g++", "openjdk-17-jdk-headless", "pypy3")
BASE_IMAGE = "bonforge-sandbox-base:bookworm-" + hashlib.sha256(" ".join(BASE_PACKAGES).encode()).hexdigest()[:8]
LABEL = "bonforge.sandbox"
OWNER_LABEL = "bonforge.sandbox.owner"
USER_LABEL = "bonforge.sandbox.user"  # who started it: ``sandbox cleanup`` removes only its user's
APT_SOURCES = (Path("/etc/apt/sources.list.d"), Path("/etc/apt/sources.list"))


def default_tag() -> str:
    """``bonforge-sandbox:<hash>`` of every file the image gets from here: a changed file is a new image."""
    h = hashlib.sha256(BASE_IMAGE.encode() + b"\n")
    for name in IN_IMAGE:
        data = RUNNER_PATH.with_name(name).read_bytes()
        h.update(b"%s %d\n" % (name.encode(), len(data)) + data)
    digest = h.hexdigest()[:12]
    return f"bonforge-sandbox:{digest}"


def owner() -> str:
    """The owner label of containers this process starts: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def user() -> str:
    """The user label of containers this process starts: the login name and uid (a Docker engine may be
    shared by several users of a machine, each with their own sandboxes)."""
    import getpass

    return f"{getpass.getuser()}:{os.getuid()}"


def labels() -> dict[str, str]:
    """Every label of a sandbox container this process starts."""
    return {LABEL: "1", OWNER_LABEL: owner(), USER_LABEL: user()}


def sdk():
    """The Docker SDK (``docker``), imported on first use: it and ``requests`` under it take ~0.5 s to import,
    which ``import bonforge`` and the process backend never pay."""
    import docker

    return docker


@functools.cache
def client():
    """This process's Docker engine client (``DOCKER_HOST`` and the other ``DOCKER_*`` settings honoured)."""
    try:
        return sdk().from_env(timeout=120, max_pool_size=64)
    except engine_errors() as e:
        raise SandboxError(f"no Docker engine answers (backend 'docker'): {e}") from None


def engine_errors() -> tuple[type[Exception], ...]:
    """What a call to the engine may raise: the SDK's errors, and the HTTP library's (``OSError`` subclasses)."""
    return sdk().errors.DockerException, OSError


def engine_error(what: str, e: Exception) -> SandboxError:
    """A Docker engine failure as the sandbox's error, with the engine's own explanation."""
    detail = getattr(e, "explanation", None) or e
    return SandboxError(f"{what} failed: {str(detail).strip()[:1000]}")


def image_exists(tag: str) -> bool:
    try:
        client().images.get(tag)
    except sdk().errors.ImageNotFound:
        return False
    except engine_errors() as e:
        raise engine_error(f"looking up image {tag}", e) from None
    return True


def debian_mirror() -> str:
    """``BONFORGE_DEBIAN_MIRROR``, else the Debian archive this machine's apt sources name."""
    if os.environ.get("BONFORGE_DEBIAN_MIRROR"):
        return os.environ["BONFORGE_DEBIAN_MIRROR"]
    folder, listing = APT_SOURCES
    for path in [*sorted(folder.glob("*.sources")), *sorted(folder.glob("*.list")), listing]:
        try:
            text = path.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.M) or re.search(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s", text, re.M)  # fmt: skip
        if m:
            return m.group(1)
    raise SandboxError(
        "no Debian mirror for the sandbox image: this machine's apt sources (/etc/apt/sources.list, "
        "/etc/apt/sources.list.d/) name none; set BONFORGE_DEBIAN_MIRROR to a Debian archive URL, or build "
        "bonforge/sandbox/Dockerfile where a registry is reachable"
    )


def build_base(force: bool = False) -> str:
    """Import a debootstrapped Debian root filesystem with ``BASE_PACKAGES`` as ``BASE_IMAGE``."""
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
            ["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES), "bookworm", root, mirror],
            capture_output=True,
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).decode(errors="replace")[-2000:]
            raise SandboxError(f"debootstrap from {mirror} failed: {tail}")
        _slim(root)
        archive = os.path.join(tmp, "root.tar")
        proc = subprocess.run(["tar", "-C", root, "-cf", archive, "."], capture_output=True)
        if proc.returncode != 0:
            raise SandboxError(f"packing the root filesystem failed: {proc.stderr.decode(errors='replace')[-2000:]}")
        import_tar(archive, BASE_IMAGE, f"bonforge sandbox base (debootstrap bookworm + {' '.join(BASE_PACKAGES)})")
    return BASE_IMAGE


def _slim(root: str) -> None:
    """Drop what no program needs from the root filesystem: the downloaded package files debootstrap keeps,
    documentation and manual pages (about half the image)."""
    for sub in ("var/cache/apt/archives", "usr/share/doc", "usr/share/man", "usr/share/info"):
        folder = os.path.join(root, sub)
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name != "lock":
                os.unlink(entry.path)


def import_tar(path: str, tag: str, message: str) -> None:
    """``docker import`` of a root filesystem tarball as ``tag``."""
    repository, _, version = tag.rpartition(":")
    try:
        client().api.import_image_from_file(path, repository=repository, tag=version, changes=None)
    except engine_errors() as e:
        raise engine_error(f"importing {tag}", e) from None
    log.info("imported %s (%s)", tag, message)


def _runner_tar() -> bytes:
    """A tar archive holding the runner's files at their place in the image."""
    buf = io.BytesIO()
    folder = os.path.dirname(RUNNER_IN_IMAGE).lstrip("/")
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in ("opt", folder):
            info = tarfile.TarInfo(path)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in IN_IMAGE:
            source = RUNNER_PATH.with_name(name)
            data = source.read_bytes()
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(source.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_image(tag: str | None = None, force: bool = False) -> str:
    """Build the sandbox image (no registry needed) unless it exists; return its tag."""
    tag = tag or default_tag()
    if not force and image_exists(tag):
        return tag
    base = build_base(force=force)
    changes = [
        "ENV PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8",
        "USER 0:0",  # the runner: it starts each test as uid 65534 with no capabilities
        "WORKDIR /tmp",
        f'CMD ["python3", "-u", "{RUNNER_IN_IMAGE}", "--contained", "--uid", "65534:65534"]',
        f"LABEL {LABEL}.image=1",
    ]
    repository, _, version = tag.rpartition(":")
    container = None
    try:
        container = client().containers.create(base, ["true"], network_disabled=True)  # labels would stay
        container.put_archive("/", _runner_tar())
        container.commit(repository=repository, tag=version, changes=changes)
    except engine_errors() as e:
        raise engine_error(f"building {tag}", e) from None
    finally:
        if container is not None:
            remove(container.id)
    log.info("built sandbox image %s", tag)
    return tag


def ensure_image(tag: str | None, build: bool) -> str:
    """The sandbox image ``tag`` (the runner's own when None), built here when missing if ``build``; a
    ``SandboxError`` naming the command that builds it otherwise. Shared by the pool and the checker."""
    tag = tag or default_tag()
    if not image_exists(tag):
        if not build:
            raise SandboxError(f"sandbox image {tag} is missing; run `bonforge sandbox build-image`")
        build_image(tag)
    return tag


def image_id(tag: str) -> str:
    """The engine's id of image ``tag`` (a digest of its content: a rebuilt tag gets a new id)."""
    try:
        return client().images.get(tag).id
    except engine_errors() as e:
        raise engine_error(f"looking up image {tag}", e) from None


def remove(*ids: str) -> None:
    """Kill and remove containers (by id or name); those already gone are no error."""
    for cid in ids:
        try:
            client().api.remove_container(cid, force=True)
        except sdk().errors.NotFound:
            pass
        except sdk().errors.APIError as e:
            if e.status_code != 409:  # 409: its removal is already in progress (it ran with auto-remove)
                log.warning("could not remove sandbox container %s: %s", cid, e.explanation or e)
        except engine_errors() as e:
            log.warning("could not remove sandbox container %s: %s", cid, e)


def cleanup_containers(all_owners: bool = True, all_users: bool = False) -> int:
    """Remove this user's sandbox containers (those labelled with ``user()``); with ``all_owners=False``
    only those whose owning process on this host is gone (safe while other pools run); with ``all_users``
    every bonforge sandbox container on the engine, whoever started it. Returns how many were removed."""
    try:
        found = client().api.containers(all=True, filters={"label": LABEL if all_users else f"{USER_LABEL}={user()}"})
    except engine_errors() as e:
        raise engine_error("listing sandbox containers", e) from None
    host = socket.gethostname()
    doomed = []
    for c in found:
        if not all_owners:
            h, _, pid = (c.get("Labels") or {}).get(OWNER_LABEL, "").partition(":")
            if h != host or pid.isdigit() and pid_alive(int(pid)):
                continue
        doomed.append(c["Id"])
    remove(*doomed)
    return len(doomed)
