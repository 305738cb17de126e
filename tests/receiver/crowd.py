"""Another process holding every connection slot of a receiver, and taking back any it loses.

:func:`crowd` runs a small script in its own process (so the kernel names another pid than the
test's) that keeps ``count`` connections open to a socket, in turn: silent, a hello begun and never
finished, and a probe hello answered ``ready`` followed by a second frame begun and never finished.
Whenever the receiver closes one (it sheds it for a newcomer, or cuts it at a deadline), the script
opens another in the same phase. It stops when its stdin closes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from pi_cross_session._internal.protocol.registration import Registration

#: The holder: argv = socket path, count, the first line of a probe (without its LF).
SCRIPT: Final = r"""
import os, selectors, socket, sys
path, count, probe = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
OPENINGS = (b"", probe[:20], probe + b"\n" + b'{"v":1,"type":"mess')
selector = selectors.DefaultSelector()
selector.register(sys.stdin, selectors.EVENT_READ, "stdin")

def open_one(phase):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        if OPENINGS[phase]:
            sock.sendall(OPENINGS[phase])
    except OSError:
        sock.close()
        return
    selector.register(sock, selectors.EVENT_READ, phase)

for n in range(count):
    open_one(n % len(OPENINGS))
print("held", flush=True)
while True:
    for key, _ in selector.select():
        if key.data == "stdin":
            if not os.read(sys.stdin.fileno(), 1024):
                sys.exit(0)
            continue
        try:
            data = key.fileobj.recv(65536)
        except OSError:
            data = b""
        if data:
            continue  # a ready: the connection stays, its second frame never ends
        selector.unregister(key.fileobj)
        key.fileobj.close()
        open_one(key.data)
"""


@contextmanager
def crowd(target: Registration, count: int) -> Iterator[subprocess.Popen[str]]:
    """Hold ``count`` connections to ``target`` from another process until the block ends."""
    probe = json.dumps(
        {
            "v": 1,
            "type": "hello",
            "requestId": "crowd",
            "token": target.token,
            "target": {"id": target.id, "instanceId": target.instance_id},
        },
        separators=(",", ":"),
    )
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, target.socket_path, str(count), probe],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.communicate()
