"""``pi-cross-session gateway``: this machine's gateway to the remote plane (docs/remote.md).

Runs until interrupted (Ctrl-C, SIGTERM), then withdraws what it published and removes its
proxies. Prints one line when it serves (``gateway <machine> ready …``) and, on SIGUSR1, its
status as JSON. Until it can connect it says why at each try, with the fix and when it tries
again (docs/remote.md, "When something is wrong"). SIGHUP makes it stop and start again from
this machine's files as they are then: ``remote rotate`` sends it once the new keys are in place
(docs/remote.md, "Rotating a machine's keys"), and says when the gateway is back with them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pi_cross_session._internal.cli import exits, words
from pi_cross_session._internal.cli.console import Console
from pi_cross_session._internal.protocol.io import environment

if TYPE_CHECKING:  # only for annotations: the remote plane's extra is imported when it runs
    import anyio
    import anyio.abc

    from pi_cross_session._internal.plugin.remote.gateway import Gateway, GatewayOptions
    from pi_cross_session._internal.plugin.remote.link import Link
    from pi_cross_session._internal.plugin.remote.trust_watch import TrustWatch
    from pi_cross_session._internal.protocol.paths import Locations
    from pi_cross_session._internal.security.remote.trust import TrustConfig

#: The password of ``--user`` comes from here, never from the command line (``ps`` shows that).
PASSWORD_ENV = "PI_XS_NATS_PASSWORD"


def hold_sighup() -> None:
    """Ignore SIGHUP until the gateway runs and handles it (its default would end the process,
    skipping every clean-up): call it first thing."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


async def _reload_this_process() -> None:
    os.kill(os.getpid(), signal.SIGHUP)


async def connect_until(link: Link, console: Console, machine: str) -> None:
    """Connect ``link``, trying again on a schedule said out loud (one line per failure, with
    its cause and fix, from ``NATS_START_RETRY_FIRST_S`` doubling up to
    ``NATS_START_RETRY_MAX_S``) until it connects: a gateway started before its server, or as a
    service, comes up when the server does. The caller stops it by cancelling."""
    import anyio

    from pi_cross_session._internal.plugin.remote.link import ConnectError
    from pi_cross_session._internal.protocol.remote.settings import (
        NATS_START_RETRY_FIRST_S,
        NATS_START_RETRY_MAX_S,
    )

    delay = NATS_START_RETRY_FIRST_S
    while True:
        try:
            await link.connect()
            return
        except ConnectError as exc:
            console.problem(words.gateway_not_connected(machine, str(exc), delay))
        await anyio.sleep(delay)
        delay = min(delay * 2, NATS_START_RETRY_MAX_S)


def run(
    args: argparse.Namespace,
    console: Console,
    *,
    alongside: Callable[[anyio.abc.TaskGroup], Awaitable[None]] | None = None,
) -> int:
    """Run the gateway until a signal ends it; ``alongside`` (the hub's admissions) is started
    in the same task group once the gateway is ready. SIGHUP makes it stop and start again from
    this machine's files (its keys, credentials and trust as they are now: ``remote rotate``
    sends it), while ``alongside`` runs on."""
    import anyio

    from pi_cross_session._internal.plugin.remote import files

    hold_sighup()
    locations = environment.resolve()
    identity = files.load_identity(locations)
    joined = files.load_joined(locations)
    servers = tuple(url for part in args.nats for url in part.split(",") if url)
    if not servers and joined is None:
        console.problem(words.GATEWAY_NO_SERVER)
        return exits.EXIT_LOCAL
    lock = files.gateway_lock(locations)
    if lock.try_acquire():
        lock.write_note(str(os.getpid()).encode())
    else:
        console.problem(
            f"pi-cross-session gateway: another gateway already serves this agent dir ({lock.path})"
        )
        return exits.EXIT_LOCAL
    serving = _Serving(args, console, locations, alongside)
    try:
        anyio.run(serving.main)
    finally:
        hold_sighup()  # the signal receiver gave SIGHUP its default back as it closed
        lock.release()
    console.result(f"gateway {identity.machine} stopped")
    return exits.EXIT_LOCAL if serving.failed else exits.EXIT_OK


class _Serving:
    """One gateway process: the gateway, started again on SIGHUP, and what runs alongside."""

    def __init__(
        self,
        args: argparse.Namespace,
        console: Console,
        locations: Locations,
        alongside: Callable[[anyio.abc.TaskGroup], Awaitable[None]] | None,
    ) -> None:
        self.args = args
        self.console = console
        self.locations = locations
        self.alongside = alongside
        self.current: _Running | None = None
        #: One (re)start at a time (made in :meth:`main`, inside the event loop); the one still
        #: preparing or connecting, which a newer SIGHUP supersedes.
        self._starting: anyio.Lock
        self._pending: anyio.CancelScope | None = None
        self._alongside_started = False
        #: A restart stopped the gateway and could not serve again: the process ends, and fails.
        self.failed = False

    def _prepare(self) -> _Setup:
        """The gateway as this machine's files say now (blocking)."""
        from pi_cross_session._internal.plugin.remote import files
        from pi_cross_session._internal.plugin.remote.bucket import BucketSpec
        from pi_cross_session._internal.plugin.remote.gateway import GatewayOptions
        from pi_cross_session._internal.plugin.remote.link import Link, LinkConfig
        from pi_cross_session._internal.plugin.remote.trust_watch import DeploymentKey, TrustWatch
        from pi_cross_session._internal.security.remote.identity import PublicKey
        from pi_cross_session._internal.security.remote.nats_jwt import public_key_bytes

        args, locations = self.args, self.locations
        identity = files.load_identity(locations)
        joined = files.load_joined(locations)
        own = files.load_trust(locations)
        if args.account is not None:
            own = own.with_account(args.account)
        servers = tuple(url for part in args.nats for url in part.split(",") if url)
        tls_ca = args.tls_ca
        tls_first = False
        if not servers and joined is not None:
            servers = joined.servers
            tls_ca = tls_ca or files.ca_path(locations)
            tls_first = joined.tls_first
        credentials = None if args.user else files.load_nats_credentials(locations)
        link = Link(
            LinkConfig(
                servers=servers,
                machine=identity.machine,
                tls_ca=tls_ca,
                tls_first=tls_first,
                tls_cert=args.tls_cert,
                tls_key=args.tls_key,
                user=args.user,
                password=os.environ.get(PASSWORD_ENV) if args.user else None,
                credentials=credentials,
                name=f"pi-cross-session gateway {identity.machine}",
                bucket=BucketSpec(ttl_s=args.record_ttl, replicas=args.kv_replicas),
            )
        )
        # A connection given up for good (new keys, or revoked): start again from the files, as
        # on SIGHUP; with keys that no longer work, that says so on its retry schedule.
        link.on_lost = _reload_this_process
        deployment = None
        if joined is not None:
            key = PublicKey(public_key_bytes(joined.deployment))
            deployment = DeploymentKey(joined.deployment, key)
        watch = TrustWatch(
            locations, machine=identity.machine, own=own, deployment=deployment, apply=self._apply
        )
        trust = watch.trust
        options = GatewayOptions(
            machine=identity.machine,
            key=identity.key,
            trust=trust,
            inbound=trust.inbound if args.inbound is None else args.inbound == "on",
            max_proxies=args.max_proxies,
            record_ttl_s=args.record_ttl,
            publish_every_s=args.record_ttl / 3,
            watch=watch,
            inbound_fixed=args.inbound is not None,
        )
        return _Setup(identity.machine, link, watch, options)

    async def _apply(self, trust: TrustConfig) -> None:
        if self.current is not None:
            await self.current.gateway.apply_trust(trust)

    async def _start(self, setup: _Setup, *, task_status: anyio.abc.TaskStatus[_Running]) -> None:
        """Serve ``setup``'s gateway until its scope is cancelled."""
        import anyio

        from pi_cross_session._internal.plugin.remote.gateway import Gateway

        gateway = Gateway(self.locations, setup.options, setup.link)
        gateway.on_trust_changed = self.console.result
        running = _Running(setup, gateway, anyio.CancelScope(), anyio.Event())
        try:
            with running.scope:
                async with anyio.create_task_group() as group:
                    await group.start(gateway.run)
                    task_status.started(running)
        finally:
            running.done.set()

    def _say_ready(self, running: _Running) -> None:
        trusted = sorted(running.setup.watch.trust.machines)
        self.console.result(
            f"gateway {running.setup.machine} ready: account {running.setup.watch.trust.account}, "
            f"remote inbound {'on' if running.gateway.options.inbound else 'off'}, trusting "
            f"{', '.join(trusted) or 'nobody'}"
        )

    async def main(self) -> None:
        import anyio

        setup = self._prepare()  # unusable files end the command (SIGHUP is ignored meanwhile)
        self._starting = anyio.Lock()
        # One receiver from the start: a signal while the gateway connects is handled too.
        with anyio.open_signal_receiver(
            signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP
        ) as signals:
            try:
                async with anyio.create_task_group() as group:
                    self._start_soon(group, setup)
                    async for signum in signals:
                        if signum == signal.SIGUSR1:
                            if self.current is not None:
                                self.console.result(json.dumps(self.current.gateway.snapshot()))
                            continue
                        if signum == signal.SIGHUP:
                            self._start_soon(group, None)
                            continue
                        break
                    group.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    if self.current is not None:
                        await self.current.setup.link.close()

    def _start_soon(self, group: anyio.abc.TaskGroup, setup: _Setup | None) -> None:
        """(Re)start the gateway: from ``setup``, or (SIGHUP) from the files as they are now. A
        restart still preparing or connecting gives way to this one."""
        import anyio

        if self._pending is not None:
            self._pending.cancel()
        scope = anyio.CancelScope()
        self._pending = scope
        group.start_soon(self._restart, group, scope, setup)

    async def _restart(
        self, group: anyio.abc.TaskGroup, scope: anyio.CancelScope, setup: _Setup | None
    ) -> None:
        """Connect the new gateway's link while the running gateway serves on, then put it in
        that one's place. A failure before the swap (files that cannot be used, a newer SIGHUP)
        leaves the running gateway as it was; one after it ends the process, saying why."""
        import anyio

        async with self._starting:
            with scope:
                if setup is None:
                    try:
                        setup = await anyio.to_thread.run_sync(self._prepare)
                    except Exception as exc:  # any fault: the running gateway goes on
                        self.console.problem(
                            words.gateway_not_reloaded(str(exc), running=self.current is not None)
                        )
                        return
                    self.console.result(words.gateway_reloading(setup.machine))
                try:
                    await connect_until(setup.link, self.console, setup.machine)
                except BaseException:  # superseded or stopped: this link is nobody's to close
                    with anyio.CancelScope(shield=True):
                        await setup.link.close()
                    raise
            if scope.cancelled_caught or setup is None:
                return
            if self._pending is scope:
                self._pending = None
            old, self.current = self.current, None
            if old is not None:
                old.scope.cancel()
                await old.done.wait()
                await old.setup.link.close()
            try:
                self.current = await group.start(self._start, setup)
            except Exception as exc:
                with anyio.CancelScope(shield=True):
                    await setup.link.close()
                self.console.problem(words.gateway_not_served(setup.machine, str(exc)))
                self.failed = True
                group.cancel_scope.cancel()
                return
            except BaseException:  # stopped meanwhile
                with anyio.CancelScope(shield=True):
                    await setup.link.close()
                raise
            self._say_ready(self.current)
            if self.alongside is not None and not self._alongside_started:
                self._alongside_started = True
                await self.alongside(group)


@dataclass(frozen=True, slots=True)
class _Setup:
    machine: str
    link: Link
    watch: TrustWatch
    options: GatewayOptions


@dataclass(slots=True)
class _Running:
    setup: _Setup
    gateway: Gateway
    scope: anyio.CancelScope
    done: anyio.Event
