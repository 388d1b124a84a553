"""A Flower deployment on this machine: one ``flower-superlink`` and N ``flower-supernode`` processes on
127.0.0.1 (insecure, free ports), and ``flwr run`` to start an app on them; for tests and trying a
deployment before spreading it over machines (``examples/flower/README.md`` shows the same by hand).

Every process starts in its own process group with ``FLWR_HOME`` in the federation's work directory
(Flower's configuration, installed apps and logs stay there). :meth:`LocalFederation.close` (also on
leaving a ``with`` block, whatever happened) stops each group with SIGTERM, then SIGKILL, including the
``flower-superexec`` and ``flwr-serverapp``/``flwr-clientapp`` processes Flower starts, and waits until
the ports are free.

>>> free_port() > 0
True
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["LocalFederation", "free_port", "port_open", "flower_tool"]

CONNECTION = "pflax-local"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now.

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``.

    >>> port_open(free_port())
    False
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def flower_tool(name: str) -> str:
    """The path of a Flower command (``flwr``, ``flower-superlink``, ``flower-supernode``), beside this
    Python first.

    >>> flower_tool("no-such-tool-xyz")
    Traceback (most recent call last):
    ...
    FileNotFoundError: Flower's `no-such-tool-xyz` command is not installed (pip install "pflax[flower]")
    """
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f'Flower\'s `{name}` command is not installed (pip install "pflax[flower]")')
    return found


def _node_config(config: Mapping) -> str:
    # Flower parses --node-config as space-separated TOML key=value pairs.
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in config.items())


class LocalFederation:
    """A SuperLink and one SuperNode per node config, on 127.0.0.1.

    Args:
      node_configs: one dict per SuperNode (``partition-id``, ``num-partitions``, ``data``, ``data-dir``,
        ``state-dir``, ...).
      workdir: a directory for Flower's home, the logs and run configs.
      env: extra environment variables for every process.
      startup_timeout: seconds to wait for the SuperLink's port.

    Attributes:
      port: the SuperLink's port (Fleet, Control and Runtime APIs); ``node_ports``: each SuperNode's.

    >>> import tempfile
    >>> fed = LocalFederation([{"partition-id": 0}], tempfile.mkdtemp())
    >>> fed.port != fed.node_ports[0]
    True
    """

    def __init__(self, node_configs: Sequence[Mapping], workdir: str | os.PathLike, env: Mapping | None = None,
                 startup_timeout: float = 120.0):
        self.node_configs = [dict(c) for c in node_configs]
        self.workdir = Path(workdir)
        self.home = self.workdir / "flwr-home"
        self.logs = self.workdir / "logs"
        self.env = {**os.environ, "FLWR_HOME": str(self.home), **(env or {})}
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.node_ports = []
        for _ in self.node_configs:
            port = free_port()
            while port == self.port or port in self.node_ports:
                port = free_port()
            self.node_ports.append(port)
        self.superlink: subprocess.Popen | None = None
        self.nodes: list[subprocess.Popen | None] = []
        self._groups: list[int] = []

    # -- processes

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        out = open(self.logs / log, "ab")
        try:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir,
                                    start_new_session=True)
        finally:
            out.close()
        self._groups.append(proc.pid)
        return proc

    def start(self) -> "LocalFederation":
        """Start the SuperLink, wait for its port, then start the SuperNodes.

        Returns:
          ``self``.

        >>> callable(LocalFederation.start)
        True
        """
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n')
        self.superlink = self._spawn([flower_tool("flower-superlink"), "--insecure", "--host", "127.0.0.1",
                                      "--port", str(self.port), "--disable-runtime-dependency-installation"],
                                     "superlink.log")
        deadline = time.monotonic() + self.startup_timeout
        while not port_open(self.port):
            if self.superlink.poll() is not None:
                raise RuntimeError(f"flower-superlink exited ({self.superlink.returncode}); see {self.logs / 'superlink.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"flower-superlink did not open port {self.port} in {self.startup_timeout:g} s")
            time.sleep(0.2)
        for i, (config, port) in enumerate(zip(self.node_configs, self.node_ports)):
            self.nodes.append(self._spawn(
                [flower_tool("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                 "--host", "127.0.0.1", "--port", str(port), "--node-config", _node_config(config)],
                f"supernode-{i}.log"))
        return self

    def run(self, app_dir: str | os.PathLike, run_config: Mapping | None = None, timeout: float = 600.0) -> str:
        """``flwr run <app_dir>`` on this federation, streaming its logs until the run ends.

        Args:
          app_dir: the Flower app (its ``pyproject.toml`` names the components).
          run_config: overrides of the app's run config (written to a TOML file for ``--run-config``).
          timeout: seconds before the run is abandoned (``subprocess.TimeoutExpired``).

        Returns:
          the command's output (also in ``logs/flwr-run-<n>.log``).

        >>> callable(LocalFederation.run)
        True
        """
        import tomli_w

        n = len(list(self.logs.glob("flwr-run-*.log")))
        args = [flower_tool("flwr"), "run", str(Path(app_dir).absolute()), CONNECTION, "--stream"]
        if run_config:
            path = self.workdir / f"run-config-{n}.toml"
            path.write_text(tomli_w.dumps(dict(run_config)))
            args += ["--run-config", str(path)]
        log = self.logs / f"flwr-run-{n}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir,
                                    start_new_session=True)
            self._groups.append(proc.pid)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._stop_group(proc.pid)
                raise
        return log.read_text(errors="replace")

    def kill_node(self, i: int) -> None:
        """Kill SuperNode ``i`` and everything it started (SIGKILL), as a machine that dies.

        >>> callable(LocalFederation.kill_node)
        True
        """
        proc = self.nodes[i]
        if proc is not None:
            self._stop_group(proc.pid, sig=signal.SIGKILL)
            proc.wait(timeout=30)

    def _group_alive(self, pgid: int) -> list[int]:
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil is a test dependency
            try:
                os.killpg(pgid, 0)
                return [pgid]
            except ProcessLookupError:
                return []
        alive = []
        for p in psutil.process_iter(["pid", "status"]):
            try:
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(p.pid)
            except (ProcessLookupError, psutil.Error, OSError):
                pass
        return alive

    def _stop_group(self, pgid: int, sig=signal.SIGTERM, grace: float = 10.0) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while self._group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def leftovers(self) -> list[int]:
        """Processes of this federation still running (none after :meth:`close`).

        >>> import tempfile
        >>> LocalFederation([], tempfile.mkdtemp()).leftovers()
        []
        """
        return [pid for g in self._groups for pid in self._group_alive(g)]

    def close(self) -> None:
        """Stop every process group (SuperNodes first), reap them, and wait for the ports to close.

        >>> import tempfile
        >>> LocalFederation([], tempfile.mkdtemp()).close()
        """
        for pgid in reversed(self._groups):
            self._stop_group(pgid)
        for proc in [*self.nodes, self.superlink]:
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
                    pass
        deadline = time.monotonic() + 10
        while any(port_open(p) for p in [self.port, *self.node_ports]) and time.monotonic() < deadline:
            time.sleep(0.1)

    def __enter__(self) -> "LocalFederation":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()
