"""Machines of the remote plane on one host: agent dirs, identities, gateways, inboxes.

A *machine* here is an agent dir with its own Ed25519 identity and its own gateway process, all
on 127.0.0.1, exactly as docs/remote.md defines a machine. Every process is a real one (the
``pi-cross-session`` command line), every NATS server a real ``nats-server``; :class:`Fleet`
stops all of them and removes every runtime dir under ``/tmp`` its agent dirs map to.

By default a fleet is a **deployment** as ``remote deploy`` makes one: the servers run in operator
mode, every machine (and every :class:`RawMachine` a test plays) connects with its own user JWT
and its permissions, and the bucket is made by the deployment's administrator. ``Fleet(root,
open_deployment=True)`` is a NATS server without any authorization, for the defence-in-depth
tests: what still holds when someone else runs NATS without our permissions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from pi_cross_session._internal.plugin.remote.natsd import NatsServer
from pi_cross_session._internal.protocol.io import environment
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import CLI, InboxProcess, Result, WatchedProcess, cli_env, run_cli

#: Gateways here scan their local sessions this often (the CLI's default, 2 s, is fine too; a
#: test only waits for an event, never for a time).
READY_LINE: Final = r"gateway \S+ ready"


class GatewayProcess(WatchedProcess):
    """A running ``pi-cross-session gateway``."""

    def __init__(self, agent_dir: Path, *args: str, cwd: Path, verbose: bool = True) -> None:
        self.args = ("gateway", *args)
        flags = ["-v"] if verbose else []
        super().__init__(
            [*CLI, *flags, *self.args], env=cli_env(agent_dir), label="gateway", cwd=cwd
        )

    def stop(self, number: int = signal.SIGTERM, timeout: float = MUST_HAPPEN_S) -> int:
        if self.process.poll() is None:
            self.process.send_signal(number)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._join()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._join()

    def close(self) -> None:
        self.stop()


class Machine:
    """One agent dir with an identity; starts its gateway and sessions."""

    def __init__(self, fleet: Fleet, name: str) -> None:
        self.fleet = fleet
        self.name = name
        self.agent_dir = fleet.root / name / "agent"
        self.agent_dir.mkdir(parents=True)
        self.workdir = fleet.root / name / "work"
        self.workdir.mkdir()
        self.locations = environment.resolve(env={"PI_CODING_AGENT_DIR": str(self.agent_dir)})
        self.gateway: GatewayProcess | None = None
        # In process: a command-line start costs a second or two on a loaded machine, and
        # ``remote init``/``trust`` have tests of their own.
        from pi_cross_session._internal.plugin.remote import files

        identity = files.init_identity(self.locations, name)
        files.save_trust(self.locations, files.load_trust(self.locations).with_inbound(True))
        self.public_key = identity.key.public_text()
        self.card = identity.card()
        if fleet.deployment is not None:
            jwt = fleet.admit(self.card, name)
            files.install_nats_jwt(self.locations, jwt)

    def cli(self, *args: str, timeout: float = MUST_HAPPEN_S) -> Result:
        return run_cli(self.agent_dir, *args, cwd=self.workdir, timeout=timeout)

    def trust(self, *others: Machine | RawMachine) -> None:
        from pi_cross_session._internal.plugin.remote import files
        from pi_cross_session._internal.security.remote.identity import parse_public_key

        trust = files.load_trust(self.locations)
        for other in others:
            trust = trust.with_machine(other.name, parse_public_key(other.public_key))
        files.save_trust(self.locations, trust)

    def start_gateway(self, *args: str, urls: Sequence[str] | None = None) -> GatewayProcess:
        servers = list(urls or [self.fleet.url])
        gateway = GatewayProcess(
            self.agent_dir, "--nats", ",".join(servers), *args, cwd=self.workdir
        )
        self.fleet.processes.append(gateway)
        gateway.wait_line(READY_LINE, timeout=MUST_HAPPEN_S)
        self.gateway = gateway
        return gateway

    def spawn_gateway(self, *urls: str, args: Sequence[str] = ()) -> GatewayProcess:
        """A gateway at the default verbosity, as a person starts it, not waited for: a test
        reads what it says while it cannot serve."""
        gateway = GatewayProcess(
            self.agent_dir, "--nats", ",".join(urls), *args, cwd=self.workdir, verbose=False
        )
        self.fleet.processes.append(gateway)
        return gateway

    def inbox(self, name: str, *args: str) -> InboxProcess:
        inbox = InboxProcess(self.agent_dir, "--name", name, *args, cwd=self.workdir)
        self.fleet.processes.append(inbox)
        inbox.wait_event("ready")
        return inbox

    def peers(self) -> list[dict[str, Any]]:
        result = self.cli("peers", "--json")
        assert result.returncode == 0, result
        peers: list[dict[str, Any]] = result.json()["peers"]
        return peers

    def wait_peer(
        self,
        name: str,
        *,
        present: bool = True,
        timeout: float = MUST_HAPPEN_S,
        listing: bool = False,
    ) -> None:
        """Wait until a registration named ``name`` is here (or gone); with ``listing``, until
        ``peers`` lists it (a probe answered), which costs a command-line run per look."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            names = [p["name"] for p in (self.peers() if listing else self.registrations())]
            if (name in names) == present:
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: {name} {'never appeared' if present else 'stayed'}")

    def registrations(self) -> list[dict[str, Any]]:
        peers_dir = self.agent_dir / "peers"
        if not peers_dir.exists():
            return []
        found = []
        for path in sorted(peers_dir.glob("*.json")):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # removed or replaced while we looked
        return found


class Fleet:
    """Machines and NATS servers of one test; :meth:`close` ends every process."""

    def __init__(self, root: Path, *, open_deployment: bool = False) -> None:
        from pi_cross_session._internal.plugin.remote.deployment import Deployment

        self.root = root
        self.servers: list[NatsServer] = []
        self.processes: list[WatchedProcess] = []
        self.machines: list[Machine] = []
        self.links: list[Link] = []
        self.deployment: Deployment | None = None
        if not open_deployment:
            self.deployment = Deployment.open(root / "deployment", create=True)
            self.deployment.save(now=int(time.time()))

    @property
    def url(self) -> str:
        return self.servers[0].url

    def admit(self, card: str, name: str) -> str:
        """Admit a machine into the deployment; its user JWT."""
        from pi_cross_session._internal.plugin.remote.deployment import MachineCard

        assert self.deployment is not None
        now = int(time.time())
        self.deployment.admit(MachineCard.parse(card), now=now)
        self.deployment.save(now=now)
        return self.deployment.machine_jwt(name, now=now).decode()

    @property
    def admin_creds(self) -> str | None:
        """The deployment administrator's credentials (``None`` for an open server)."""
        return None if self.deployment is None else self.deployment.admin_creds.read_text()

    def server(self, **kwargs: Any) -> NatsServer:
        """A server of this fleet's deployment (not started)."""
        if self.deployment is not None:
            deployment = self.deployment
            kwargs.setdefault(
                "auth",
                lambda resolver: deployment.auth_config(
                    now=int(time.time()), resolver_dir=resolver
                ),
            )
        server = NatsServer(self.root / "nats", name=f"n{len(self.servers) + 1}", **kwargs)
        self.servers.append(server)
        return server

    def start_server(
        self, *, client_cert: tuple[str, str] | None = None, **kwargs: Any
    ) -> NatsServer:
        """Start a server (the deployment's bucket made on it, as its administrator would, with
        ``client_cert`` when the server verifies clients)."""
        server = self.server(**kwargs).start()
        self.make_bucket(
            [server.url], tls_ca=server.tls.ca if server.tls else None, client_cert=client_cert
        )
        return server

    def start_cluster(self, size: int = 3) -> list[NatsServer]:
        """``size`` routed servers, started, with the bucket replicated on all of them."""
        from pi_cross_session._internal.plugin.remote.natsd import free_port

        ports = [free_port() for _ in range(size)]
        nodes = [
            self.server(
                cluster_port=ports[index], routes=[p for i, p in enumerate(ports) if i != index]
            )
            for index in range(size)
        ]
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        self.make_bucket([node.url for node in nodes], replicas=size)
        return nodes

    def make_bucket(
        self,
        urls: Sequence[str],
        *,
        tls_ca: str | None = None,
        client_cert: tuple[str, str] | None = None,
        replicas: int = 1,
    ) -> None:
        """What ``remote bucket`` does: the bucket, made by the deployment's administrator (on
        an open server, the first gateway makes it)."""
        if self.deployment is None:
            return
        from pi_cross_session._internal.plugin.remote.bucket import BucketSpec
        from pi_cross_session._internal.plugin.remote.link import LinkConfig
        from pi_cross_session._internal.plugin.remote.mirror import ensure_bucket_with

        config = LinkConfig(
            servers=tuple(urls),
            machine=None,
            tls_ca=tls_ca,
            tls_cert=client_cert[0] if client_cert else None,
            tls_key=client_cert[1] if client_cert else None,
            credentials=self.admin_creds,
            bucket=BucketSpec(replicas=replicas),
        )
        import anyio

        state, detail = anyio.run(ensure_bucket_with, config)
        assert state in ("ok", "created"), detail

    def link(self) -> Link:
        """A TCP link to the first server that a test can freeze or cut (a partition)."""
        made = Link(self.servers[0].port)
        self.links.append(made)
        return made

    def machine(self, name: str) -> Machine:
        made = Machine(self, name)
        self.machines.append(made)
        return made

    def pair(self, *names: str) -> list[Machine]:
        """Machines that all trust each other."""
        made = [self.machine(name) for name in names]
        for machine in made:
            machine.trust(*(m for m in made if m is not machine))
        return made

    def bob_behind_a_proxy(self) -> tuple[Machine, Machine, GatewayProcess, dict[str, Any]]:
        """A server, ``laptop`` and ``buildbox`` with their gateways, an inbox ``bob`` on buildbox,
        and laptop's proxy registration of ``bob@buildbox`` once it is there: laptop, buildbox,
        laptop's gateway and that registration."""
        self.start_server()
        laptop, buildbox = self.pair("laptop", "buildbox")
        buildbox.inbox("bob")
        gateway = laptop.start_gateway()
        buildbox.start_gateway()
        laptop.wait_peer("bob@buildbox")
        proxy = next(r for r in laptop.registrations() if r["name"] == "bob@buildbox")
        return laptop, buildbox, gateway, proxy

    def close(self) -> None:
        for process in reversed(self.processes):
            close: Callable[[], None] = process.close  # type: ignore[attr-defined]
            try:
                close()
            except Exception:  # pragma: no cover - best effort; the next ones still stop
                if process.process.poll() is None:
                    process.process.kill()
        for link in self.links:
            link.close()
        for server in self.servers:
            server.stop(kill=True)
        for machine in self.machines:
            shutil.rmtree(machine.locations.runtime_dir, ignore_errors=True)


@contextmanager
def fleet_at(root: Path, *, open_deployment: bool = False) -> Iterator[Fleet]:
    fleet = Fleet(root, open_deployment=open_deployment)
    try:
        yield fleet
    finally:
        fleet.close()


class RawMachine:
    """A trusted machine played by the test itself: it signs envelopes and sends them straight to
    another machine's subject over its own NATS connection, so a test can choose every field
    (the clock, the nonce, a replay) and see the one reply the gateway gives."""

    def __init__(self, name: str, *, account: str = "pi-xs", fleet: Fleet | None = None) -> None:
        from pi_cross_session._internal.security.remote.identity import MachineKey
        from pi_cross_session._internal.security.remote.nats_jwt import NKey, Role, creds_text

        self.name = name
        self.account = account
        self.fleet = fleet
        self.key = MachineKey.generate()
        self.public_key = self.key.public_text()
        self.nats = NKey.generate(Role.USER)
        self.card = f"{name} {self.public_key} nats:{self.nats.public_key}"
        #: Its NATS credentials in the fleet's deployment (``None`` on an open server).
        self.creds: str | None = None
        if fleet is not None and fleet.deployment is not None:
            self.creds = creds_text(fleet.admit(self.card, name).strip(), self.nats.seed)

    async def connect(self, url: str) -> Any:
        """A NATS connection as this machine: its credentials, its inbox."""
        return await connect_as(url, self.creds, machine=self.name)

    def payload(
        self,
        to: str,
        target: str,
        text: str,
        *,
        message_id: str,
        at_ms: int | None = None,
        nonce: str | None = None,
        sender_id: str = "0" * 32,
    ) -> tuple[bytes, str]:
        """A signed ``send`` envelope, and its nonce."""
        import secrets

        from pi_cross_session._internal.protocol.remote import envelope as env

        # The machine's own clock, skewed or not, stamps both the envelope and the message.
        now = time.time_ns() // 1_000_000 if at_ms is None else at_ms
        nonce = nonce or secrets.token_hex(16)
        body = env.SendBody(
            target=target,
            sender=env.RemoteSender(
                id=f"raw-{sender_id[:8]}",
                instance_id=sender_id,
                name="raw",
                capabilities=["cancel-safe-queue-v1"],
            ),
            message=env.RemoteMessage(
                message_id=message_id, text=text, summary=text[:50], sent_at=now
            ),
        )
        envelope = env.build(
            kind=env.Kind.SEND,
            account=self.account,
            origin=self.name,
            to=to,
            nonce=nonce,
            at_ms=now,
            body=body,
        )
        return self.sealed_for(to, env.encode(envelope)), nonce

    def sealed_for(self, to: str, data: bytes) -> bytes:
        """``data`` behind the MAC of this machine's pair with the fleet's machine ``to``, as a
        gateway sends a request (a machine the fleet does not have: a MAC nobody takes)."""
        from pi_cross_session._internal.security.remote.identity import MachineKey, parse_public_key
        from pi_cross_session._internal.security.remote.pairing import derive_pair

        known = [m for m in (self.fleet.machines if self.fleet else []) if m.name == to]
        to_key = (
            parse_public_key(known[0].public_key) if known else MachineKey.generate().public_key
        )
        pair = derive_pair(
            account=self.account, me=self.name, key=self.key, other=to, other_key=to_key
        )
        assert pair is not None
        return pair.sending.seal(data)

    def record(self, instance_id: str, name: str, *, seq: int, at_ms: int | None = None) -> bytes:
        """A signed record of a live session ``name`` of this machine (for its key in the
        bucket)."""
        from pi_cross_session._internal.plugin.remote.publish import sealed_record
        from pi_cross_session._internal.protocol.remote import envelope as env

        now = time.time_ns() // 1_000_000 if at_ms is None else at_ms
        body = env.PeerRecord(
            seq=seq,
            id=f"session-{instance_id[:8]}",
            instance_id=instance_id,
            name=name,
            cwd="/work",
            status="idle",
            inbound="accept",
            started_at=now,
            updated_at=now,
            capabilities=["cancel-safe-queue-v1"],
        )
        return sealed_record(
            self.key, machine=self.name, account=self.account, body=body, at_ms=now
        )


async def connect_as(url: str, creds: str | None, *, machine: str | None = None) -> Any:
    """A NATS connection with ``creds`` (none on an open server), using ``machine``'s inbox."""
    import nats
    from nats.aio.client import RawCredentials

    from pi_cross_session._internal.protocol.remote.envelope import inbox_prefix

    options: dict[str, Any] = {}
    if creds is not None:
        options["user_credentials"] = RawCredentials(creds)
    if machine is not None:
        options["inbox_prefix"] = inbox_prefix(machine)
    return await nats.connect(url, **options)


async def raw_request(
    url: str, subject: str, payload: bytes, timeout_s: float = 6.0, *, who: RawMachine | None = None
) -> bytes | None:
    """One NATS request (as ``who``, when the server wants credentials); the reply's payload, or
    ``None`` when none came in time."""
    import nats.errors

    nc = await (who.connect(url) if who is not None else connect_as(url, None))
    try:
        msg = await nc.request(subject, payload, timeout=timeout_s)
        return bytes(msg.data)
    except nats.errors.TimeoutError:
        return None
    finally:
        await nc.close()


def reply_of(data: bytes | None) -> tuple[str, str] | None:
    """``(outcome, status)`` of a reply (its MAC not checked: the test only reads it)."""
    if data is None:
        return None
    from pi_cross_session._internal.protocol.remote import envelope as env
    from pi_cross_session._internal.security.remote.pairing import MAC_BYTES

    body = env.decode(data[MAC_BYTES:]).read_body()
    assert isinstance(body, env.ReplyBody)
    return body.outcome.value, body.status


class Link:
    """A real TCP hop between a gateway and its NATS server, on 127.0.0.1, that a test can break.

    :meth:`freeze` is a *silent* partition: the connections stay open but no byte moves either
    way (what a dead route looks like before anything times out); :meth:`thaw` lets the held
    bytes through. :meth:`cut` is a *broken* link: every connection is closed and new ones are
    closed as soon as they arrive, until :meth:`heal`. The NATS server itself never stops.
    """

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._open = threading.Event()
        self._open.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        self._open.clear()
        self._drop_all()

    def heal(self) -> None:
        self._flowing.set()
        self._open.set()

    def close(self) -> None:
        self._closed.set()
        self._open.clear()
        self._drop_all()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=MUST_HAPPEN_S)

    def _drop_all(self) -> None:
        with self._lock:
            dropped, self._sockets = self._sockets, []
        for sock in dropped:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._upstream), timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                source.settimeout(0.1)
                pump = threading.Thread(target=self._pump, args=(source, sink), daemon=True)
                self._threads.append(pump)
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                if not self._flowing.wait(timeout=0.1):
                    continue  # frozen: the bytes wait in the kernel's buffers
                try:
                    data = source.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                # A freeze that came while this pump waited in recv holds what it read too:
                # no byte moves once freeze() returned.
                while not self._flowing.wait(timeout=0.1):
                    if self._closed.is_set():
                        return
                sink.sendall(data)
        except OSError:
            pass  # cut, or the other side went
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class Tap:
    """A plain NATS subscriber beside the gateways: every message published on ``subjects``
    (``>``: everything in the account, requests, replies and the bucket's puts alike), as a
    third party on the server would see it. Use it as a context manager."""

    def __init__(
        self, url: str, subjects: Sequence[str] = (">",), *, creds: str | None = None
    ) -> None:
        self._url = url
        self._creds = creds
        self._subjects = list(subjects)
        self._seen: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Tap:
        self._thread.start()
        assert self._ready.wait(MUST_HAPPEN_S), "the tap never subscribed"
        if self._failure is not None:
            raise self._failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=MUST_HAPPEN_S)

    def seen(self) -> list[tuple[str, bytes]]:
        with self._lock:
            return list(self._seen)

    def count(self, subject: str) -> int:
        return sum(1 for seen, _ in self.seen() if seen == subject)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the test by __enter__
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        nc = await connect_as(self._url, self._creds)
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        async def seen(msg: Any) -> None:
            with self._lock:
                self._seen.append((msg.subject, bytes(msg.data)))

        try:
            for subject in self._subjects:
                await nc.subscribe(subject, cb=seen)
            await nc.flush()
            self._ready.set()
            await self._stop.wait()
            await nc.flush()
        finally:
            await nc.close()
