"""I9: AUTH/ACL and TLS work, with real servers that require them."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_zset_scheduler
from celery_zset_scheduler.errors import StoreUnavailable
from celery_zset_scheduler.testing import RedisServer, free_port

from ..support.helpers import AppFactory, wait_for


@pytest.fixture
def acl_server() -> Iterator[RedisServer]:
    # The default user is off: only alice, with a password, may do anything.
    server = RedisServer(username="alice", password="s3cret", extra=[
        "--user", "default", "off", "--user", "alice", "on", ">s3cret", "~*", "&*", "+@all",
    ])
    with server:
        yield server


def test_acl_credentials_in_the_url(acl_server: RedisServer, apps: AppFactory) -> None:
    app = apps(zset_scheduler_url=acl_server.url)
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "acl"}, countdown=0.3)
    shard = apps.store(app).keys.shard_of(result.id)
    assert acl_server.client().zcard(f"{{zt:{shard}}}:due") == 1
    apps.dispatcher(app)
    apps.worker(app)
    assert result.get(timeout=20) == "acl"


def test_wrong_credentials_fail_at_the_call_site(acl_server: RedisServer, apps: AppFactory) -> None:
    app = apps(zset_scheduler_url=acl_server.url.replace("s3cret", "wrong"))
    with pytest.raises(StoreUnavailable, match=r"zset store at redis://alice:\*\*\*@127.0.0.1:\d+/0: .*(?i:password)"):
        app.tasks["t.record"].apply_async(countdown=10)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[RedisServer, Path]]:
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make a test certificate")
    run = lambda *args: subprocess.run(args, cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=zset-test-ca")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")
    tls_port = free_port()
    server = RedisServer(extra=[
        "--tls-port", str(tls_port), "--tls-cert-file", str(tmp_path / "server.crt"),
        "--tls-key-file", str(tmp_path / "server.key"), "--tls-ca-cert-file", str(tmp_path / "ca.crt"),
        "--tls-auth-clients", "no",
    ])
    try:
        server.start()
    except RuntimeError as exc:
        pytest.skip(f"this redis-server has no TLS support: {exc}")
    server.tls_port = tls_port  # type: ignore[attr-defined]
    try:
        yield server, tmp_path / "ca.crt"
    finally:
        server.close()


def test_tls_store(tls_server: tuple[RedisServer, Path], apps: AppFactory) -> None:
    server, ca = tls_server
    url = f"rediss://127.0.0.1:{server.tls_port}/0?ssl_ca_certs={ca}"  # type: ignore[attr-defined]
    app = apps(zset_scheduler_url=url)
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "tls"}, countdown=0.3)
    assert celery_zset_scheduler.lookup(app, result.id) is not None
    assert server.client().dbsize() > 0  # stored on the TLS server (read back over plain TCP)
    apps.dispatcher(app)
    apps.worker(app)
    assert result.get(timeout=20) == "tls"
    wait_for(lambda: celery_zset_scheduler.lookup(app, result.id) is None, what="the entry acked")


def test_tls_with_an_untrusted_certificate_is_refused(tls_server: tuple[RedisServer, Path], apps: AppFactory) -> None:
    server, _ = tls_server
    app = apps(zset_scheduler_url=f"rediss://127.0.0.1:{server.tls_port}/0")  # type: ignore[attr-defined]
    with pytest.raises(StoreUnavailable, match="(?i)certificate"):
        app.tasks["t.record"].apply_async(countdown=10)
