"""A client in its own OS process, for the kernel-checked-peer tests (standard library only).

It prints ``{"pid": <its pid>}``, then reads one JSON line from stdin: ``{"socket": path,
"lines": [frame, ...]}``. It connects, writes the frames (compact JSON, one LF each) in one write,
reads until the receiver closes, and prints ``{"replies": [line, ...], "end": "eof" | "reset"}``.
Waiting for instructions after announcing its pid lets a test publish a registration naming this
process before it connects.
"""

from __future__ import annotations

import json
import os
import socket
import sys

#: A guard against a receiver that never closes; the test fails on the missing output first.
SOCKET_TIMEOUT_S = 20.0


def main() -> int:
    print(json.dumps({"pid": os.getpid()}), flush=True)
    order = json.loads(sys.stdin.readline())
    payload = b"".join(
        json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        for frame in order["lines"]
    )
    received = b""
    end = "eof"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(SOCKET_TIMEOUT_S)
        sock.connect(order["socket"])
        try:
            sock.sendall(payload)
            while chunk := sock.recv(65_536):
                received += chunk
        except (ConnectionResetError, BrokenPipeError):
            end = "reset"
    replies = [line.decode("utf-8") for line in received.split(b"\n") if line]
    print(json.dumps({"replies": replies, "end": end, "tail": received.endswith(b"\n")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
