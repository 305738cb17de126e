"""The bundled server's HTTP monitoring port (``NatsServer.monitor_port``), which the scale
benchmark reads (``bench/remote_scale.py``): off unless asked for, on loopback when asked."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from pi_cross_session._internal.plugin.remote.natsd import NatsServer, free_port, server_config


def test_no_monitoring_port_unless_asked_for(tmp_path: Path) -> None:
    config = server_config(name="n1", listen="127.0.0.1:4222", store_dir=tmp_path)
    assert "http" not in config
    assert NatsServer(tmp_path).monitor_url is None
    asked = server_config(
        name="n1", listen="127.0.0.1:4222", store_dir=tmp_path, monitor_listen="127.0.0.1:8222"
    )
    assert "http: 127.0.0.1:8222" in asked.splitlines()


def test_the_monitoring_port_answers_varz_and_connz(tmp_path: Path) -> None:
    with NatsServer(tmp_path, name="watched", monitor_port=free_port()) as server:
        assert server.monitor_url is not None
        with urllib.request.urlopen(f"{server.monitor_url}/varz", timeout=10) as answer:
            varz = json.load(answer)
        with urllib.request.urlopen(f"{server.monitor_url}/connz", timeout=10) as answer:
            connz = json.load(answer)
    assert varz["server_name"] == "watched"
    assert varz["port"] == server.port
    assert connz["num_connections"] == 0
