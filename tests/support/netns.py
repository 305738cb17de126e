"""Hosts as Linux network namespaces: machines with their own network, /tmp and HOME, on one box.

A :class:`Network` is a private Ethernet segment: a Linux bridge in a network namespace of its
own, and one namespace per :class:`Host`, joined to the bridge by a veth pair. Each host has an
address of ``10.77.0.0/24`` that exists only inside these namespaces, and loopback up; nothing is
added to the root namespace's interfaces, so no traffic can leave. Every command a host runs gets a
mount namespace (and a UTS one, with the host's name) in which a per-host directory is mounted
over ``/tmp`` and another over the home dir: each host has its own sockets, runtime dirs, agent
dir (``~/.pi/agent``) and files, as a separate machine would. What a host needs of the real
filesystem (the interpreter, the virtual environment, the checkout) stays visible even when it
lives under one of those two paths.

A test drives a host as a person at its keyboard: :meth:`Host.run` for a command line typed at a
shell, :meth:`Host.spawn` for one that keeps running (a server, a gateway, an inbox), with
``PATH`` starting with this interpreter's scripts dir. Files move between hosts only by
:meth:`Network.copy`, what ``scp`` would do. :meth:`Host.cut` and :meth:`Host.restore` take the
host's port on the bridge down and up: a partition, in which the host's TCP connections stall
(no reset, no FIN) as behind a dead switch.

A set-up is a list of steps a person types, host by host (:class:`Run`, :class:`Spawn`,
:class:`Copy`), played by :meth:`Network.play`; a step may keep what a command printed (a card, a
join line) for the later steps to paste.

:meth:`Network.close` ends every process (those it spawned, then anything else left in its
namespaces), deletes the namespaces (which deletes the bridge and the veth pairs with them) and
removes every host's files, whatever happened before. Names carry the test process's pid and a
counter, so parallel workers never meet. Creating namespaces needs root and iproute2's ``ip``
and util-linux's ``unshare`` and ``mount``: :func:`unavailable` says why a test cannot run here,
for a skip with the reason.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pi_cross_session._internal.protocol.paths import RUNTIME_PARENT
from tests.support.bounds import MUST_HAPPEN_S
from tests.support.processes import WatchedProcess

#: The segment's addresses: host N (from 1, in the order hosts are made) is ``10.77.0.N``.
SUBNET: Final = "10.77.0"
PREFIX_LENGTH: Final = 24
#: The dir each host has a private one of: where sessions keep their sockets (and where
#: programs keep their temporary files).
TMP: Final = RUNTIME_PARENT
#: The bridge, inside the network's own namespace (names there meet nobody else's).
BRIDGE: Final = "br0"
#: Each host's end of its veth pair, inside the host's namespace.
HOST_INTERFACE: Final = "eth0"
#: How long a one-shot command may run before the test fails (a send's own deadline is 5 s).
COMMAND_TIMEOUT_S: Final = MUST_HAPPEN_S
#: How long a spawned process gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S: Final = 5.0
#: What the host's processes find on PATH first: the scripts of the interpreter running the
#: tests (``pi-cross-session``, ``nats-server``, ``python``), as an installed virtualenv would be.
SCRIPTS_DIR: Final = str(Path(sys.executable).parent)
#: Where ``tests`` can be imported from (a host runs support scripts as ``python -m tests…``).
CHECKOUT: Final = str(Path(__file__).resolve().parents[2])
#: The programs a network needs.
REQUIRED_PROGRAMS: Final = ("ip", "unshare", "mount")

_networks = itertools.count(1)


class NamespaceError(RuntimeError):
    """Namespaces cannot be made here (the reason is the message)."""


def unavailable() -> str | None:
    """Why this machine cannot run a network of hosts, or ``None`` when it can (try it: making
    the network itself is the last word, and raises :class:`NamespaceError`)."""
    if sys.platform != "linux":
        return "network namespaces exist only on Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CI runs these tests as root)"
    missing = [name for name in REQUIRED_PROGRAMS if shutil.which(name) is None]
    if missing:
        return f"network namespaces need {', '.join(missing)} (iproute2, util-linux)"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NamespaceError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _needed_paths() -> list[str]:
    """What a host's processes read from the real filesystem: the interpreter, the virtual
    environment and the checkout (the package may be installed from it in editable mode)."""
    import pi_cross_session

    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        str(Path(sys.executable).resolve().parent),
        str(Path(pi_cross_session.__file__).resolve().parent),
        CHECKOUT,
    }
    real = sorted({os.path.realpath(path) for path in candidates} | candidates)
    # A path inside another one on the list comes with it.
    return [p for p in real if not any(q != p and _under(p, q) for q in real)]


@dataclass(frozen=True)
class CommandResult:
    """A finished command a host ran."""

    host: str
    command: str
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """The command's stdout as JSON (the test fails with the output if it is not JSON)."""
        try:
            return json.loads(self.stdout)
        except ValueError as exc:  # pragma: no cover - only on a failing test
            raise AssertionError(f"not JSON: {self}") from exc

    def __str__(self) -> str:
        return (
            f"{self.host}$ {self.command}\n(exit {self.returncode})\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


class HostProcess(WatchedProcess):
    """A long-running command on a host. Every wrapper of its command line execs the next, so
    this process *is* the command: a signal sent here reaches it. Ends with SIGTERM, then
    SIGKILL."""

    def wait_output(self, pattern: str, *, timeout: float = MUST_HAPPEN_S) -> re.Match[str]:
        """The first line on stdout or stderr that matches ``pattern``; waits for it."""
        regex = re.compile(pattern)

        def find() -> re.Match[str] | None:
            for line in (*self.lines, *self.err_lines):
                match = regex.search(line)
                if match is not None:
                    return match
            return None

        found: re.Match[str] = self._wait(find, f"a line matching {pattern!r}", timeout)
        return found

    def stop(self, number: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Ask it to end with ``number``; kill it if it has not after ``timeout``."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(number)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._join()
        return self.process.returncode

    def close(self) -> None:
        self.stop()


@dataclass
class Host:
    """One machine of a :class:`Network`: a network namespace, an address, its own files."""

    network: Network
    name: str
    address: str
    #: The host's network namespace (``ip netns`` name).
    namespace: str
    #: The bridge's end of the host's veth pair (in the network's namespace).
    port: str
    #: Outside paths of what the host sees as ``/tmp`` and as its home dir.
    tmp_dir: Path
    home_dir: Path
    #: The host's home dir as its processes see it.
    home: str
    #: (real path, mount point inside an overlay's source): what must stay visible inside.
    keeps: list[tuple[str, str]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment of a login on this host: its home, its agent dir, our scripts first
        on PATH. Nothing else of the test's environment leaks in (its agent dir, its TMPDIR)."""
        env = {
            "HOME": self.home,
            "PI_CODING_AGENT_DIR": f"{self.home}/.pi/agent",
            "PATH": os.pathsep.join([SCRIPTS_DIR, os.environ.get("PATH", os.defpath)]),
            "TMPDIR": TMP,
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        for name in ("LANG", "LC_ALL", "LC_CTYPE"):
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    def _argv(self, command: str, cwd: str | None) -> list[str]:
        """``command`` run by bash inside the host: its network namespace, then a mount and UTS
        namespace of the command's own where the host's /tmp and home dir are mounted."""
        q = shlex.quote
        lines = ["set -e", f"printf %s {q(self.name)} > /proc/sys/kernel/hostname"]
        lines += [f"mount --rbind {q(source)} {q(target)}" for source, target in self.keeps]
        lines += [f"mount --rbind {q(str(s))} {q(t)}" for s, t in self.network.overlays(self)]
        lines += [f"cd {q(cwd or self.home)}", 'exec bash -c "$1"']
        return [
            "ip",
            "netns",
            "exec",
            self.namespace,
            # ``ip netns exec`` makes a mount namespace too, but with slave propagation; a private
            # one of our own keeps the bind mounts of one command from anything else.
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "\n".join(lines),
            f"{self.name}-shell",
            command,
        ]

    def run(
        self, command: str, *, timeout: float = COMMAND_TIMEOUT_S, cwd: str | None = None
    ) -> CommandResult:
        """Run ``command`` as typed at a shell on this host (in its home dir) to the end."""
        try:
            done = subprocess.run(
                self._argv(command, cwd),
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="backslashreplace",
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"{self.name}$ {command}: still running after {timeout} s"
            ) from exc
        return CommandResult(self.name, command, done.returncode, done.stdout, done.stderr)

    def must(self, command: str, **kwargs: Any) -> CommandResult:
        """:meth:`run`, and the test fails unless the command exits 0."""
        result = self.run(command, **kwargs)
        assert result.returncode == 0, str(result)
        return result

    def spawn(
        self, command: str, *, label: str | None = None, cwd: str | None = None, stdin: bool = False
    ) -> HostProcess:
        """Start ``command`` on this host and leave it running; the network ends it at close."""
        process = HostProcess(
            self._argv(command, cwd),
            env=self.env,
            label=f"{self.name}: {label or command}",
            with_stdin=stdin,
        )
        self.network.processes.append(process)
        return process

    def file(self, path: str) -> Path:
        """Where a file of this host (``~/…`` or ``/tmp/…``, as its processes name it) is seen
        from outside."""
        if path == "~" or path.startswith("~/"):
            return self.home_dir / path[2:]
        if _under(path, self.home):
            return self.home_dir / os.path.relpath(path, self.home)
        if _under(path, TMP):
            return self.tmp_dir / os.path.relpath(path, TMP)
        raise ValueError(f"{path} is not one of {self.name}'s own files")

    def cut(self) -> None:
        """Take the host's link down at the bridge: its packets go nowhere, nobody is told."""
        _ip("-n", self.network.namespace, "link", "set", self.port, "down")

    def restore(self) -> None:
        """Bring the host's link back up."""
        _ip("-n", self.network.namespace, "link", "set", self.port, "up")


# -- a set-up, as a person types it -------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """``command`` on ``host``, to the end (it must exit 0). ``save`` names a regex per value to
    keep from its stdout (group 1), for later steps to paste as ``{name}``."""

    host: str
    command: str
    save: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spawn:
    """``command`` on ``host``, left running once a line matches ``ready``; the regex's named
    groups are kept for later steps. ``name`` finds the process in :meth:`Network.play`'s
    answer."""

    host: str
    command: str
    ready: str
    name: str | None = None


@dataclass(frozen=True)
class Copy:
    """A file from one host to another, as ``scp source:path target:to`` would copy it."""

    source: str
    path: str
    target: str
    to: str


Step = Run | Spawn | Copy


@dataclass
class Played:
    """What a set-up left: the values its commands printed, and its running processes."""

    values: dict[str, str]
    processes: dict[str, HostProcess]


# -- the network ---------------------------------------------------------------------------------


class Network:
    """A bridge in a namespace of its own and the hosts on it; :meth:`close` undoes everything."""

    def __init__(self, root: Path) -> None:
        reason = unavailable()
        if reason is not None:
            raise NamespaceError(reason)
        self.root = root
        self.prefix = f"pxs{os.getpid()}n{next(_networks)}"
        self.namespace = f"{self.prefix}-net"
        self.hosts: dict[str, Host] = {}
        self.processes: list[HostProcess] = []
        self._namespaces: list[str] = []
        self._needed = _needed_paths()
        # The real home dir, as the mount point of each host's own (a home the machine's
        # account database names): unless it is the root dir or holds /tmp.
        home = os.path.realpath(os.path.expanduser("~"))
        self._home = home if home != os.sep and not _under(TMP, home) else None
        root.mkdir(parents=True)
        try:
            self._add_namespace(self.namespace)
            _ip("-n", self.namespace, "link", "add", BRIDGE, "type", "bridge")
            _ip("-n", self.namespace, "link", "set", BRIDGE, "up")
        except NamespaceError:
            self.close()
            raise

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def host(self, name: str) -> Host:
        """A new host on the segment, with the next address."""
        assert name not in self.hosts, name
        number = len(self.hosts) + 1
        directory = self.root / name
        tmp_dir, home_dir = directory / "tmp", directory / "home"
        tmp_dir.mkdir(parents=True)
        tmp_dir.chmod(0o1777)
        home_dir.mkdir(mode=0o700)
        host = Host(
            network=self,
            name=name,
            address=f"{SUBNET}.{number}",
            namespace=f"{self.prefix}-{name}",
            port=f"v{number}",
            tmp_dir=tmp_dir,
            home_dir=home_dir,
            home=self._home or f"{TMP}/home",
        )
        if self._home is None:
            # No home dir to mount over: the host's home is a dir of its private /tmp.
            (tmp_dir / "home").mkdir(mode=0o700)
            host.home_dir = tmp_dir / "home"
        for needed in self._needed:
            for source, target in self.overlays(host):
                if _under(needed, target):
                    inside = source / os.path.relpath(needed, target)
                    inside.mkdir(parents=True, exist_ok=True)
                    host.keeps.append((needed, str(inside)))
        self._add_namespace(host.namespace)
        ns = self.namespace
        _ip("-n", ns, "link", "add", host.port, "type", "veth", "peer", "name", HOST_INTERFACE,
            "netns", host.namespace)  # fmt: skip
        _ip("-n", ns, "link", "set", host.port, "master", BRIDGE)
        _ip("-n", ns, "link", "set", host.port, "up")
        address = f"{host.address}/{PREFIX_LENGTH}"
        _ip("-n", host.namespace, "addr", "add", address, "dev", HOST_INTERFACE)
        _ip("-n", host.namespace, "link", "set", HOST_INTERFACE, "up")
        self.hosts[name] = host
        return host

    def overlays(self, host: Host) -> list[tuple[Path, str]]:
        """(source, mount point) of the host's /tmp and home dir, in an order where neither
        mount hides the other's source (the test's temp dir may lie under either)."""
        mounts = [(host.tmp_dir, TMP)]
        if self._home is not None:
            home = (host.home_dir, self._home)
            # The mount over a path comes after the mount whose source lies under that path.
            mounts = [home, *mounts] if _under(str(host.home_dir), TMP) else [*mounts, home]
        return mounts

    def copy(self, source: Host, path: str, target: Host, to: str) -> None:
        """What ``scp`` does: the file's bytes and mode, onto the other host."""
        origin, destination = source.file(path), target.file(to)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin, destination)
        destination.chmod(origin.stat().st_mode & 0o777)

    def play(self, steps: Sequence[Step]) -> Played:
        """Play ``steps`` in order: each command with the values kept so far pasted in (quoted,
        as a person pastes a line between quotes)."""
        played = Played({}, {})

        def filled(command: str) -> str:
            return command.format_map({k: shlex.quote(v) for k, v in played.values.items()})

        for step in steps:
            if isinstance(step, Run):
                result = self.hosts[step.host].must(filled(step.command))
                for name, pattern in step.save.items():
                    match = re.search(pattern, result.stdout, re.MULTILINE)
                    assert match is not None, f"no {name} ({pattern!r}) in:\n{result}"
                    played.values[name] = match.group(1)
            elif isinstance(step, Spawn):
                process = self.hosts[step.host].spawn(filled(step.command))
                match = process.wait_output(step.ready)
                played.values.update({k: v for k, v in match.groupdict().items() if v is not None})
                played.processes[step.name or step.command] = process
            else:
                self.copy(self.hosts[step.source], step.path, self.hosts[step.target], step.to)
        return played

    # -- tearing down ------------------------------------------------------------------------------

    def close(self) -> None:
        """End every process, delete every namespace, remove every host's files."""
        for process in reversed(self.processes):
            try:
                process.close()
            except Exception:  # pragma: no cover - best effort; the next ones still stop
                with contextlib.suppress(OSError):
                    process.process.kill()
        for name in reversed(self._namespaces):
            # Anything still in a namespace of ours was started here (a child of a command).
            _kill_all_in(name)
            with contextlib.suppress(NamespaceError):
                _ip("netns", "delete", name)
        self._namespaces.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def _kill_all_in(namespace: str) -> None:
    done = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    )
    pids = [int(word) for word in done.stdout.split() if word.isdigit()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while pids and time.monotonic() < deadline:
        # Killed processes leave their namespace only once reaped by their parent.
        pids = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        if pids:
            time.sleep(0.05)


@contextmanager
def network_at(root: Path) -> Iterator[Network]:
    """A network whose hosts keep their files under ``root``, torn down on the way out."""
    network = Network(root)
    try:
        yield network
    finally:
        network.close()
