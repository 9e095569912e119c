"""The load balancer's configuration (``ticketry_devstack.haproxy.render``)
is one the real HAProxy accepts (``haproxy -c``), wherever its run folder is:
a deep one (an xdist worker's test folder) still gets a stats socket HAProxy
can bind (its path is at most 97 characters)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ticketry_devstack.haproxy import SOCKET_PATH_MAX, LbSettings, haproxy_binary, render, stats_socket


@pytest.mark.parametrize("depth", [1, 12])
def test_haproxy_accepts_the_configuration_in_a_shallow_or_a_deep_folder(tmp_path: Path, depth: int) -> None:
    binary = haproxy_binary()
    assert binary is not None, "haproxy not installed: run infra/bootstrap.sh"
    run_dir = tmp_path.joinpath(*(["a-rather-long-folder-name"] * depth))
    run_dir.mkdir(parents=True)
    cfg = LbSettings(port=18080, apis=["127.0.0.1:18000", "127.0.0.1:18010"], notifiers=["127.0.0.1:18001"],
                     stats_port=18090)  # fmt: skip
    path = run_dir / "haproxy.cfg"
    path.write_text(render(cfg, run_dir))
    checked = subprocess.run([binary, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    socket = stats_socket(run_dir)
    assert len(str(socket)) <= SOCKET_PATH_MAX and f"stats socket {socket} " in path.read_text()
    assert stats_socket(run_dir) == socket  # the same folder, the same socket
