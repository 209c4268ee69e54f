"""A real HDFS for tests: runs tests/minidfs/start.sh (Hadoop's MiniDFSCluster) as a child process.

The launcher prints ``MINIDFS_READY hdfs://127.0.0.1:<port>`` once the cluster is up and stops
when its stdin reaches EOF (see :mod:`harness.java_cluster`). In Kerberos mode the URL is
followed by ``key=value`` fields naming the KDC's krb5.conf, the user's principal and keytab, a
client Hadoop configuration folder and the user's delegation token file (:class:`Kerberos`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.java_cluster import ClusterStartError, JavaCluster

START_SH = Path(__file__).resolve().parent.parent / "minidfs" / "start.sh"

#: The variables through which Kerberos and Hadoop clients find credentials and configuration:
#: a child process gets exactly the ones :meth:`Kerberos.environment` sets, whatever the test
#: process's environment holds (a developer's own ticket, say).
KERBEROS_VARIABLES = (
    "KRB5_CONFIG",
    "KRB5CCNAME",
    "KRB5_CLIENT_KTNAME",
    "KRB5_KTNAME",
    "HADOOP_TOKEN_FILE_LOCATION",
    "HADOOP_CONF_DIR",
    "HADOOP_HOME",
    "HADOOP_USER_NAME",
    "HADOOP_PROXY_USER",
)


class MiniDfsError(ClusterStartError):
    """The cluster failed to start (or vanished); the message ends with the launcher's stderr."""


@dataclass(frozen=True)
class Kerberos:
    """What a client of a Kerberized MiniDFS needs, as its launcher's ready line names it."""

    #: For MIT krb5 (``KRB5_CONFIG``): the realm and its KDC on 127.0.0.1.
    krb5_conf: Path
    #: The user principal (``alice@EXAMPLE.COM``), owner of ``/user/<name>``.
    principal: str
    #: The user's keytab.
    keytab: Path
    #: A client ``HADOOP_CONF_DIR``: ``hadoop.security.authentication=kerberos`` and the
    #: cluster's ``dfs.data.transfer.protection``, without which hdfs-native speaks plain RPC.
    conf_dir: Path
    #: The user's HDFS delegation token, as YARN hands it to a container.
    token_file: Path
    #: ``authentication``, ``integrity`` or ``privacy``, on RPC and on data transfer.
    protection: str

    @property
    def user(self) -> str:
        return self.principal.split("@", 1)[0]

    def environment(
        self, *, keytab: bool = False, ticket_cache: Path | None = None, token: bool = False
    ) -> dict[str, str]:
        """This process's environment for a child that uses the cluster with the given
        credentials: the user's ``keytab`` (``KRB5_CLIENT_KTNAME``; tickets got with it go to
        ``ticket_cache`` when given, as ``kinit -kt`` would put them), a ``ticket_cache``
        (``KRB5CCNAME``), the delegation ``token`` (``HADOOP_TOKEN_FILE_LOCATION``), or none.
        Without a ticket cache the child gets an empty in-memory one, never the default
        ``/tmp/krb5cc_<uid>``."""
        env = {k: v for k, v in os.environ.items() if k not in KERBEROS_VARIABLES}
        env["HADOOP_CONF_DIR"] = str(self.conf_dir)
        env["KRB5_CONFIG"] = str(self.krb5_conf)
        env["KRB5CCNAME"] = f"FILE:{ticket_cache}" if ticket_cache else "MEMORY:sparktrain-test"
        if keytab:
            env["KRB5_CLIENT_KTNAME"] = str(self.keytab)
        if token:
            env["HADOOP_TOKEN_FILE_LOCATION"] = str(self.token_file)
        return env


class MiniDfs(JavaCluster):
    """Context manager for one MiniDFSCluster on 127.0.0.1; ``url`` is its ``hdfs://`` address.

    ``block_size`` and ``replication`` become the NameNode's server defaults, which clients that
    ask the server (hdfs-native does) use when they create files without explicit values.
    With ``kerberos`` the cluster is secured by a KDC of its own, with ``protection`` on RPC and
    data transfer (the launcher's default: privacy); :attr:`kerberos` then says how to reach it.
    ``host`` runs it at that IPv4 address instead of 127.0.0.1, under ``wrapper`` (the command
    that enters the host, as :meth:`harness.netns.Host.argv` gives it).
    """

    name = "MiniDFS"
    start_sh = START_SH
    ready_prefix = "MINIDFS_READY "
    error = MiniDfsError

    def __init__(
        self,
        datanodes: int = 1,
        block_size: int | None = None,
        ready_timeout: float = 180.0,
        *,
        replication: int = 1,
        kerberos: bool = False,
        protection: str | None = None,
        extra_args: tuple[str, ...] = (),
        host: str | None = None,
        wrapper: tuple[str, ...] = (),
    ) -> None:
        super().__init__(ready_timeout)
        self.datanodes = datanodes
        self.block_size = block_size
        self.replication = replication
        self.secured = kerberos
        self.protection = protection
        self.extra_args = extra_args
        self.host = host
        self._wrapper = wrapper

    def wrapper(self) -> list[str]:
        return list(self._wrapper)

    def arguments(self, work_dir: Path) -> list[str]:
        args = ["--datanodes", str(self.datanodes), "--replication", str(self.replication)]
        args += ["--base-dir", str(work_dir / "dfs")]
        if self.block_size is not None:
            args += ["--block-size", str(self.block_size)]
        if self.host is not None:
            args += ["--host", self.host]
        if self.secured:
            args.append("--kerberos")
            if self.protection is not None:
                args += ["--protection", self.protection]
        return args + list(self.extra_args)

    @property
    def url(self) -> str:
        # The ready line's first field; Kerberos mode adds key=value fields after it.
        return self.address.split()[0]

    @property
    def kerberos(self) -> Kerberos | None:
        """How to reach a Kerberized cluster; None for an unsecured one."""
        fields = dict(field.split("=", 1) for field in self.address.split()[1:])
        if not fields:
            return None
        try:
            return Kerberos(
                krb5_conf=Path(fields["krb5_conf"]),
                principal=fields["principal"],
                keytab=Path(fields["keytab"]),
                conf_dir=Path(fields["conf_dir"]),
                token_file=Path(fields["token_file"]),
                protection=fields["protection"],
            )
        except KeyError as e:
            raise self.error(f"{self.name}'s ready line lacks {e}: {self.address!r}") from None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def base_dir(self) -> Path:
        """The NameNode's and DataNodes' storage."""
        return self.work_dir / "dfs"

    def __enter__(self) -> MiniDfs:
        self.start()
        return self
