"""Redis servers for the test suite: found or started once per session, never faked.

* Standalone: ``REDIS_URL`` if set, else the local server at 127.0.0.1:6379 if it answers,
  else a ``redis-server`` started on a free port (no persistence).
* Cluster: ``REDIS_CLUSTER_URL`` if set, else three masters started on free ports and
  joined with ``redis-cli --cluster create``.
* Servers the session starts (and the private ones tests kill) run ``REDIS_SERVER`` if
  set (a path to ``redis-server`` or ``valkey-server`` of another version), else the
  ``redis-server`` on the PATH.

Every URL handed out carries a fresh key prefix (``?prefix=t-<hex>``), so tests never see
each other's keys; :meth:`RedisServers.cleanup` deletes a prefix's keys (and those of
prefixes that extend it, like ``t-<hex>.failed``). Without a server and without a
``redis-server`` binary the tests are skipped with a reason -- except on CI (``CI=true``),
where they fail: a Redis test is never silently skipped there.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
import redis.cluster

ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SERVER = os.environ.get("REDIS_SERVER") or "redis-server"


def free_port() -> int:
    """A loopback port that is free, and so is its Cluster bus port (port + 10000)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for redis-server")


def answers(host: str, port: int) -> bool:
    try:
        return bool(redis.Redis(host=host, port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def unavailable(reason: str) -> None:
    """Fail on CI, skip elsewhere."""
    if ON_CI:
        pytest.fail(f"CI=true and {reason}: Redis tests must run on CI", pytrace=False)
    pytest.skip(reason)


@dataclass
class Server:
    """A ``redis-server`` the test session started (and may stop, kill and restart)."""

    port: int
    workdir: Path
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True) -> Server:
        if shutil.which(SERVER) is None:
            unavailable("no Redis server is reachable and no redis-server binary is installed")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # fmt: off
        command = [
            SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.workdir), *self.extra,
        ]
        # fmt: on
        log = (self.workdir / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        if wait:
            self.wait()
        return self

    def wait(self, timeout: float = 15) -> None:
        password = None
        if "--requirepass" in self.extra:
            password = self.extra[self.extra.index("--requirepass") + 1]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, password=password, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                if self.process is not None and self.process.poll() is not None:
                    break
                time.sleep(0.05)
        log = (self.workdir / f"redis-{self.port}.log").read_text(errors="replace")
        raise RuntimeError(f"redis-server on port {self.port} did not start:\n{log[-2000:]}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class RedisServers:
    """The session's servers, found or started on first use (see the module docstring)."""

    started: list[Server] = field(default_factory=list)
    prefixes: dict[str, str] = field(default_factory=dict)  # prefix -> base URL
    _standalone: str | None = None
    _cluster: str | None = None
    _tmp: Path | None = None

    def tmpdir(self) -> Path:
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="statekeeper-redis-"))
        return self._tmp

    def private(self, *extra: str) -> Server:
        """A server of its own (for tests that kill it); stopped at session end."""
        port = free_port()
        server = Server(port, self.tmpdir() / f"private-{port}", extra).start()
        self.started.append(server)
        return server

    def standalone(self) -> str:
        if self._standalone is None:
            if os.environ.get("REDIS_URL"):
                self._standalone = os.environ["REDIS_URL"]
            elif answers("127.0.0.1", 6379):
                self._standalone = "redis://127.0.0.1:6379/0"
            else:
                port = free_port()
                self.started.append(Server(port, self.tmpdir() / f"standalone-{port}").start())
                self._standalone = f"redis://127.0.0.1:{port}/0"
        return self._standalone

    def cluster(self) -> str:
        if self._cluster is None:
            if os.environ.get("REDIS_CLUSTER_URL"):
                self._cluster = os.environ["REDIS_CLUSTER_URL"]
            else:
                self._cluster = self._start_cluster()
        return self._cluster

    def _start_cluster(self) -> str:
        if shutil.which("redis-cli") is None or shutil.which(SERVER) is None:
            unavailable("Redis Cluster tests need the redis-server and redis-cli binaries")
        ports = [free_port() for _ in range(3)]
        nodes = []
        for port in ports:
            conf = self.tmpdir() / f"cluster-{port}" / f"nodes-{port}.conf"
            extra = ("--cluster-enabled", "yes", "--cluster-config-file", str(conf))
            nodes.append(Server(port, conf.parent, extra).start(wait=False))
        self.started.extend(nodes)
        for node in nodes:
            node.wait()
        # fmt: off
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )
        # fmt: on
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            infos = [_cluster_info(p) for p in ports]
            if all("cluster_state:ok" in info for info in infos):
                return f"redis+cluster://127.0.0.1:{ports[0]}"
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def url(self, kind: str) -> str:
        """A URL with a fresh prefix on the ``"standalone"`` or ``"cluster"`` server."""
        base = self.standalone() if kind == "standalone" else self.cluster()
        prefix = f"t-{uuid.uuid4().hex}"
        self.prefixes[prefix] = base
        return f"{base}{'&' if '?' in base else '?'}prefix={prefix}"

    def cleanup(self, url: str) -> None:
        """Delete the keys of ``url``'s prefix (and of prefixes that extend it)."""
        prefix = parse_qs(urlsplit(url).query)["prefix"][0].split(".", 1)[0]
        base = self.prefixes.pop(prefix, None)
        if base is not None:
            delete_prefix(base, prefix)

    def stop(self) -> None:
        for prefix, base in list(self.prefixes.items()):
            with contextlib.suppress(redis.RedisError, redis.cluster.RedisClusterException):
                delete_prefix(base, prefix)
        self.prefixes.clear()
        for server in self.started:
            server.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def client_for(base: str) -> redis.Redis | redis.cluster.RedisCluster:
    """A plain redis-py client for a base URL (no prefix)."""
    parts = urlsplit(base)
    if parts.scheme.endswith("+cluster"):
        return redis.cluster.RedisCluster(host=parts.hostname, port=parts.port or 6379)
    return redis.Redis.from_url(base.split("?", 1)[0])


def delete_prefix(base: str, prefix: str) -> int:
    """Delete every key that starts with ``prefix`` (a test prefix: no glob characters)."""
    assert prefix.startswith("t-"), prefix
    assert prefix[2:].isalnum(), prefix
    client = client_for(base)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for key in keys:
            client.unlink(key)
        return len(keys)
    finally:
        client.close()


def _cluster_info(port: int) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "cluster", "info"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout


REDIS = RedisServers()
