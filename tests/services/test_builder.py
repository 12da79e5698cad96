"""The warm builder's own rules: what it declines (another Python or bonforge, a changed module) and its wire
(a message with the caller's terminal attached)."""

from __future__ import annotations

import os
import socket

from bonforge.services import builder


def request(**changes) -> dict:
    return {**builder._identity(), **changes}


def test_it_takes_a_build_of_the_same_code():
    assert builder.declined(request(), builder.fingerprint()) is None


def test_it_declines_another_python_or_bonforge():
    started = builder.fingerprint()
    assert "this command /other/python" in builder.declined(request(python="/other/python"), started)
    elsewhere = "/elsewhere/bonforge/__init__.py"
    assert f"it runs bonforge {builder._identity()['bonforge']}, this command {elsewhere}" in builder.declined(
        request(bonforge=elsewhere), started)


def test_it_declines_when_a_module_it_imported_changed_on_disk():
    started = builder.fingerprint()
    path = builder.__file__
    started[path] = (started[path][0] - 1, started[path][1])  # as if the file had been edited since
    reason = builder.declined(request(), started)
    assert "1 bonforge module(s) changed" in reason and path in reason and "bonforge down" in reason


def test_a_message_carries_the_callers_descriptors():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r, w = os.pipe()
    with a, b:
        builder._send(a, {"big": "x" * 1000}, [w])
        message, fds = builder._recv(b, maxfds=3)
        assert message == {"big": "x" * 1000} and len(fds) == 1
        os.write(fds[0], b"through the passed descriptor")
        assert os.read(r, 100) == b"through the passed descriptor"
    for fd in (r, w, *fds):
        os.close(fd)
