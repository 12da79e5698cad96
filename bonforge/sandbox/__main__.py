"""``python -m bonforge.sandbox build-image [--tag T] [--force]`` and ``... cleanup`` (usable before the CLI)."""

from __future__ import annotations

import argparse
import logging
import sys

from bonforge.errors import SandboxError
from bonforge.sandbox.image import build_image, cleanup_containers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bonforge.sandbox")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-image", help="build the sandbox image with no registry (debootstrap)")
    build.add_argument("--tag", default=None, help="image tag (default: bonforge-sandbox:<runner hash>)")
    build.add_argument("--force", action="store_true", help="rebuild the base and the image")
    clean = sub.add_parser("cleanup", help="remove this user's bonforge sandbox containers")
    clean.add_argument("--all-users", action="store_true", help="every user's, on a shared Docker engine")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "build-image":
            print(build_image(args.tag, force=args.force))
        else:
            print(f"removed {cleanup_containers(all_users=args.all_users)} sandbox container(s)")
    except SandboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
