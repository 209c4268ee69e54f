"""sparktrain against a Kerberized HDFS: a real KDC (Hadoop's MiniKdc) and a MiniDFSCluster that
wants Kerberos on RPC, block access tokens and SASL (privacy) on data transfer.

Each credential situation runs in a process of its own (harness/kerberos_client.py): the HDFS
client is per process and finds its credentials when it first connects. The situations are the
ones sparktrain meets: a keytab (``KRB5_CLIENT_KTNAME``), a ticket cache from ``kinit``
(``KRB5CCNAME``), the delegation token YARN gives a container (``HADOOP_TOKEN_FILE_LOCATION``),
and nothing at all, which must fail at once with an error that says what to do.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.minidfs import Kerberos, MiniDfs
from harness.processes import run_in_group

# One worker runs the whole module under xdist's loadgroup, so the module starts one cluster.
pytestmark = [pytest.mark.hdfs, pytest.mark.xdist_group("kerberos")]

CLIENT = Path(__file__).resolve().parent / "harness" / "kerberos_client.py"
#: Seconds a client process may take: a short training run on two slow cores, with margin.
CLIENT_TIMEOUT = 90.0
#: A call without credentials must fail faster than this (a retry loop would take minutes).
FAIL_FAST_S = 5.0


@pytest.fixture(scope="module")
def secure_dfs() -> Iterator[MiniDfs]:
    with MiniDfs(kerberos=True) as dfs:
        yield dfs


@pytest.fixture(scope="module")
def kerberos(secure_dfs: MiniDfs) -> Kerberos:
    info = secure_dfs.kerberos
    assert info is not None
    return info


@pytest.fixture
def base(secure_dfs: MiniDfs, kerberos: Kerberos, request: pytest.FixtureRequest) -> str:
    """A fresh folder in the user's home, the one place the user may write."""
    return f"{secure_dfs.url}/user/{kerberos.user}/{request.node.originalname}-{uuid.uuid4().hex[:8]}"


def client(env: dict[str, str], base: str, *steps: str, timeout: float = CLIENT_TIMEOUT) -> dict[str, Any]:
    """Runs ``steps`` of harness/kerberos_client.py in a fresh process with ``env``."""
    done = run_in_group([sys.executable, str(CLIENT), base, *steps], timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def assert_files_work(result: dict[str, Any]) -> None:
    assert result["written"] == [2_000, 2_000]
    parts = ["part-00000.tfrecord.gz", "part-00001.tfrecord.gz"]
    assert result["listing"] == ["_SUCCESS", *parts]
    assert result["read_files"] == parts
    assert result["glob"] == parts
    assert result["rows"] == 4_000
    assert result["labels_equal"]
    assert result["blob_equal"]
    assert result["blob_size"] == 3 * 1024 * 1024
    assert result["moved_away"]
    assert result["deleted"]
    assert result["gone"]


def test_the_ready_line_names_what_a_client_needs(secure_dfs: MiniDfs, kerberos: Kerberos) -> None:
    assert secure_dfs.url.startswith("hdfs://127.0.0.1:")
    assert kerberos.principal == "alice@EXAMPLE.COM"
    assert kerberos.protection == "privacy"
    for path in (kerberos.krb5_conf, kerberos.keytab, kerberos.token_file):
        assert path.is_file(), path
    core = (kerberos.conf_dir / "core-site.xml").read_text()
    assert "<name>hadoop.security.authentication</name><value>kerberos</value>" in core
    assert "dfs.data.transfer.protection" in (kerberos.conf_dir / "hdfs-site.xml").read_text()
    # The KDC listens on loopback, like the cluster.
    assert "kdc = 127.0.0.1:" in kerberos.krb5_conf.read_text()


def test_a_keytab_alone_gives_files_tfrecords_and_the_users_identity(kerberos: Kerberos, base: str) -> None:
    result = client(kerberos.environment(keytab=True), base, "files", "denied", "doctor")
    assert_files_work(result["files"])
    # The NameNode knows the client as the keytab's user, not as the superuser: the root
    # folder belongs to "hdfs" and is closed to alice.
    denied = result["denied"]
    assert denied["type"] == "StorageError"
    assert "Permission denied: user=alice" in denied["message"]
    assert result["doctor"]["level"] == "ok"
    assert "credentials for alice@EXAMPLE.COM" in result["doctor"]["message"]


def test_a_ticket_cache_alone_is_enough(kerberos: Kerberos, base: str, tmp_path: Path) -> None:
    cache = tmp_path / "krb5cc"
    # What `kinit -kt <keytab> <principal>` does: GSSAPI gets a ticket with the keytab and
    # stores it in the cache.
    got = client(kerberos.environment(keytab=True, ticket_cache=cache), base, "credentials")
    assert got["credentials"]["principal"] == "alice@EXAMPLE.COM"
    assert got["credentials"]["lifetime_s"] > 3600
    assert cache.stat().st_size > 0

    result = client(kerberos.environment(ticket_cache=cache), base, "files", "doctor")
    assert_files_work(result["files"])
    assert result["doctor"]["level"] == "ok"
    assert "alice@EXAMPLE.COM" in result["doctor"]["message"]


def test_a_delegation_token_alone_is_enough(kerberos: Kerberos, base: str) -> None:
    """What YARN executors have: no ticket, the token Spark's YARN client obtained."""
    result = client(kerberos.environment(token=True), base, "files", "doctor")
    assert_files_work(result["files"])
    assert result["doctor"]["level"] == "ok"
    assert str(kerberos.token_file) in result["doctor"]["message"]


def test_training_writes_checkpoints_and_event_files(kerberos: Kerberos, base: str) -> None:
    result = client(kerberos.environment(keytab=True), base, "train")["train"]
    assert result["steps"] == [20, 30]
    assert result["resumed_from"] == 20
    assert result["model_dir"] == [
        "_index",
        "checkpoint.json",
        "ckpt-0000000010-g0",
        "ckpt-0000000020-g0",
        "ckpt-0000000030-g0",
    ]
    assert result["index"]["latest"] == "ckpt-0000000030-g0"
    assert result["event_files"] == 2
    assert result["loss_events"] == 6  # every 5 steps: 5..20, then 25 and 30


def test_without_credentials_calls_fail_at_once_saying_how_to_get_them(kerberos: Kerberos, base: str) -> None:
    result = client(kerberos.environment(), base, "fails", "doctor")
    for call in ("ls", "write_batches"):
        failure = result["fails"][call]
        assert failure["type"] == "StorageError", failure
        assert failure["seconds"] < FAIL_FAST_S, failure
        message = failure["message"]
        assert str(failure["path"]).startswith(base)
        assert f"HDFS error on {failure['path']}: Kerberos credentials are missing or expired" in message
        # The library's own detail: the (empty) cache it looked in.
        assert "MEMORY:sparktrain-test" in message
        for way in ("kinit", "KRB5CCNAME", "KRB5_CLIENT_KTNAME", "HADOOP_TOKEN_FILE_LOCATION"):
            assert way in message, (way, message)
    doctor = result["doctor"]
    assert doctor["level"] == "error"
    assert "no Kerberos credentials" in doctor["message"]
    assert "MEMORY:sparktrain-test" in doctor["message"]
    assert "kinit" in doctor["fix"]


#: How long a delegation token stays valid on the cluster of the next test unless it is renewed
#: (``dfs.namenode.delegation.token.renew-interval``). Nobody renews the trainers' tokens: the
#: driver obtains new ones instead, as Spark does.
TOKEN_LIFETIME_S = 20


@pytest.fixture
def short_lived_tokens() -> Iterator[MiniDfs]:
    """A Kerberized MiniDFS whose delegation tokens expire :data:`TOKEN_LIFETIME_S` after they
    were issued or last renewed and whose NameNode closes a connection idle for 2 s, so that a
    client presents its tokens again at nearly every call. (Their maximum lifetime stays an
    hour: hdfs-native does not present a token within a minute of it.)"""
    settings = {
        "dfs.namenode.delegation.token.renew-interval": TOKEN_LIFETIME_S * 1000,
        "dfs.namenode.delegation.token.max-lifetime": 3600 * 1000,
        # Idle connections are closed after twice this, checked every half second, however
        # few connections there are.
        "ipc.client.connection.maxidletime": 1000,
        "ipc.client.connection.idle-scan-interval.ms": 500,
        "ipc.client.idlethreshold": 0,
    }
    extra = tuple(f"--conf={key}={value}" for key, value in settings.items())
    with MiniDfs(kerberos=True, extra_args=extra) as dfs:
        yield dfs


@pytest.mark.spark
def test_trainers_outlive_their_first_delegation_tokens_on_the_drivers_renewed_ones(
    short_lived_tokens: MiniDfs, tmp_path: Path
) -> None:
    """A week-long job, in a minute: the trainers have no Kerberos credentials of their own and
    the tokens expire after 20 s, yet every trainer writes to HDFS for more than twice that,
    because the driver (logged in with a ticket cache, as after ``kinit``) hands out new tokens before
    the old expire. The first tokens alone, which is all a container's token file ever holds,
    are refused by then."""
    kerberos = short_lived_tokens.kerberos
    assert kerberos is not None
    base = f"{short_lived_tokens.url}/user/{kerberos.user}/renewed-{uuid.uuid4().hex[:8]}"
    cache = tmp_path / "krb5cc"
    client(kerberos.environment(keytab=True, ticket_cache=cache), base, "credentials")

    # Spark's start, then 12 writes 4 s apart.
    result = client(kerberos.environment(ticket_cache=cache), base, "renewed", timeout=300)["renewed"]
    trainers = result["trainers"]
    assert len(trainers) == 2
    for trainer in trainers:
        assert trainer["seconds"] > 2 * TOKEN_LIFETIME_S
        # Renewed at three quarters of their life: new tokens reached the trainer each time.
        assert trainer["token_sets"] >= 3, trainer
    assert result["files"] == [f"rank{r}-{i:02d}" for r in range(2) for i in range(12)]

    # What the trainers had at their start is dead by now: without the renewal (a container's
    # token file), every write above after the first 20 s would have failed.
    first = tmp_path / "first.tokens"
    first.write_bytes(bytes.fromhex(trainers[0]["first_tokens"]))
    env = kerberos.environment()
    env["HADOOP_TOKEN_FILE_LOCATION"] = str(first)
    failure = client(env, base, "fails")["fails"]["ls"]
    assert failure["type"] == "StorageError", failure
    assert "expired" in failure["message"], failure
