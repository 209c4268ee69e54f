"""HDFS delegation tokens for the trainers, obtained on the driver and renewed before they
expire. Runs in the driver, next to the rendezvous service.

A trainer reaches a Kerberized HDFS with the delegation tokens its container was given when it
started (``HADOOP_TOKEN_FILE_LOCATION``). Spark renews tokens for its executor JVMs, but a
Python process never sees them: after the tokens' lifetime (a day without renewal, seven days
at most on a default NameNode) every HDFS call of a long job would fail. So a driver that has
Kerberos credentials of its own (``kinit``, or Spark's ``--principal``/``--keytab``) obtains
tokens itself, as Spark's token manager does (``FileSystem.addDelegationTokens`` for
``fs.defaultFS`` and ``spark.kerberos.access.hadoopFileSystems``), hands them to every task
through the rendezvous service (sealed, see ``rust/cluster/src/tokens.rs``), and obtains new
ones when three quarters of their time is gone. Each task keeps them in a file of its own that
its trainer's ``HADOOP_TOKEN_FILE_LOCATION`` names (:mod:`sparktrain.cluster.task.run`), and
HDFS clients read that file at every new connection.

A driver without Kerberos credentials, or on a cluster without Kerberos, hands out nothing:
the trainers keep whatever credentials their containers gave them.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: Share of the tokens' remaining time after which new ones are obtained (Spark's
#: ``spark.security.credentials.renewalRatio`` default).
RENEWAL_RATIO = 0.75
#: Bounds of the wait between two renewals: not in a loop against a NameNode that hands out
#: tokens of a few seconds, and at least once a day.
MIN_WAIT_S = 5.0
MAX_WAIT_S = 24 * 3600.0
#: The wait when the tokens' expiry cannot be learned (a kind the driver may not renew).
UNKNOWN_EXPIRY_WAIT_S = 3600.0
#: The wait before another try after a renewal failed.
RETRY_WAIT_S = 60.0


class DelegationTokens:
    """Obtains HDFS delegation tokens with the driver's Kerberos login, hands them to the
    tasks with ``publish`` (the rendezvous service's ``set_tokens``), and renews them on a
    thread until :meth:`stop`."""

    def __init__(self, sc: Any, publish: Callable[[bytes], int], log: Callable[[str], None]) -> None:
        self._jvm = sc._jvm
        self._hadoop_conf = sc._jsc.hadoopConfiguration()
        self._spark_conf = sc.getConf()
        self._publish = publish
        self._log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: When the tokens handed out last expire (``time.time()``), when known.
        self.expires_at: float | None = None

    @classmethod
    def start(
        cls, sc: Any, publish: Callable[[bytes], int], log: Callable[[str], None] | None = None
    ) -> DelegationTokens | None:
        """Hands the first tokens out and starts renewing them; None when this driver has no
        Kerberos credentials to obtain tokens with (then nothing is handed out). A driver whose
        login cannot obtain tokens says why (through ``log``) and hands out nothing."""
        tokens = cls(sc, publish, log or _stderr)
        if not tokens._kerberos_login():
            return None
        try:
            wait = tokens._obtain_and_publish()
        except Exception as e:  # the trainers keep their own credentials
            tokens._log(
                f"sparktrain: could not obtain HDFS delegation tokens for the trainers ({_first_line(e)}); "
                "they use the credentials their containers have"
            )
            return None
        tokens._thread = threading.Thread(
            target=tokens._renew, args=(wait,), name="sparktrain-tokens", daemon=True
        )
        tokens._thread.start()
        return tokens

    def stop(self) -> None:
        """Stops renewing."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _kerberos_login(self) -> bool:
        ugi = self._jvm.org.apache.hadoop.security.UserGroupInformation
        if not ugi.isSecurityEnabled():
            return False
        user = ugi.getCurrentUser()
        return bool(user.hasKerberosCredentials())

    def _file_systems(self) -> list[str]:
        """``fs.defaultFS`` and the file systems ``spark.kerberos.access.hadoopFileSystems``
        names, as Spark's own token provider chooses them."""
        names = [self._hadoop_conf.get("fs.defaultFS") or ""]
        extra = self._spark_conf.get("spark.kerberos.access.hadoopFileSystems", "") or ""
        names += [n.strip() for n in extra.split(",")]
        return list(dict.fromkeys(n for n in names if n and not n.startswith("file:")))

    def _obtain(self) -> tuple[bytes, float | None]:
        """New tokens for every file system, in Hadoop's token storage format, and when the
        first of them expires (``time.time()``), if the NameNode says."""
        jvm = self._jvm
        user = jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser()
        # Tokens this driver may renew: renewing one at once is how its expiry is learned.
        renewer = user.getShortUserName()
        credentials = jvm.org.apache.hadoop.security.Credentials()
        names = self._file_systems()
        for name in names:
            fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI.create(name), self._hadoop_conf)
            try:
                fs.addDelegationTokens(renewer, credentials)
            except Exception as e:
                raise RuntimeError(f"{name}: {_first_line(e)}") from e
        if credentials.numberOfTokens() == 0:
            raise RuntimeError(f"no file system of {names} issued a delegation token")
        expiry: float | None = None
        for token in credentials.getAllTokens().toArray():
            try:
                expires = token.renew(self._hadoop_conf) / 1000.0
            except Exception:  # a kind this driver cannot renew: its expiry stays unknown
                continue
            expiry = expires if expiry is None else min(expiry, expires)
        stream = jvm.java.io.ByteArrayOutputStream()
        out = jvm.java.io.DataOutputStream(stream)
        credentials.writeTokenStorageToStream(out)
        out.flush()
        return bytes(stream.toByteArray()), expiry

    def _obtain_and_publish(self) -> float:
        """Hands out new tokens; returns the seconds until the next renewal."""
        data, expiry = self._obtain()
        self._publish(data)
        self.expires_at = expiry
        if expiry is None:
            return UNKNOWN_EXPIRY_WAIT_S
        return min(MAX_WAIT_S, max(MIN_WAIT_S, RENEWAL_RATIO * (expiry - time.time())))

    def _renew(self, wait: float) -> None:
        """Renews the tokens, the first time ``wait`` seconds from now, until :meth:`stop`."""
        while not self._stop.wait(wait):
            try:
                wait = self._obtain_and_publish()
            except Exception as e:  # tried again; the trainers' tokens may still be valid
                left = None if self.expires_at is None else self.expires_at - time.time()
                wait = RETRY_WAIT_S if left is None else max(MIN_WAIT_S, min(RETRY_WAIT_S, left / 4))
                when = "" if left is None else f"; the trainers' tokens expire in {max(left, 0.0):.0f} s"
                self._log(
                    f"sparktrain: could not renew the trainers' HDFS delegation tokens "
                    f"({_first_line(e)}){when}; trying again in {wait:.0f} s"
                )


def _first_line(error: BaseException) -> str:
    """The error's first line; for an error of the JVM, its Java exception's."""
    java = getattr(error, "java_exception", None)
    text = str(java.toString() if java is not None else error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
