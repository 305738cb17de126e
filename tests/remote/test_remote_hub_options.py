"""``remote hub``'s places, checked where they are typed: a host a certificate can name, and
``ADDR:PORT`` with a port a server can listen on (a wrong one is a usage error, not a
traceback from deep in the deployment)."""

from __future__ import annotations

import pytest

from pi_cross_session._internal.cli.parser import build_parser


def parsed(*words: str) -> object:
    return build_parser().parse_args(["remote", "hub", *words])


@pytest.mark.parametrize("host", ["10.0.0.5", "hub.example.org", "fd00::5", "localhost"])
def test_hosts_a_certificate_can_name(host: str) -> None:
    assert vars(parsed("--host", host))["host"] == [host]


@pytest.mark.parametrize("host", ["a b", "", "-x", "hub/x", "é.example", "x" * 254])
def test_other_hosts_are_usage_errors(host: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        parsed("--host", host)
    assert stopped.value.code == 1


@pytest.mark.parametrize("where", ["0.0.0.0:4222", "127.0.0.1:1", "[::]:6222", "hub:65535"])
def test_places_to_listen(where: str) -> None:
    args = vars(parsed("--listen", where, "--cluster-listen", where))
    assert (args["listen"], args["cluster_listen"]) == (where, where)


@pytest.mark.parametrize("where", ["4222", ":4222", "0.0.0.0:", "0.0.0.0:0", "h:65536", "h:x"])
def test_other_places_are_usage_errors(where: str) -> None:
    for option in ("--listen", "--cluster-listen"):
        with pytest.raises(SystemExit) as stopped:
            parsed(option, where)
        assert stopped.value.code == 1
