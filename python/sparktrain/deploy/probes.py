"""What ``sparktrain doctor`` looks at on a live Spark application: the Spark version and its
jar, the local files on ``spark.jars``, the task slots, the executors' Python and sparktrain
(one small Spark job), storage folders (a probe file written, read back and removed) and
Kerberos credentials. Each check returns a
:class:`~sparktrain.cluster.driver.preflight.Finding`. Runs on the driver.
"""

from __future__ import annotations

import os
import posixpath
import socket
import sys
import threading
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from sparktrain import _spark
from sparktrain.cluster.driver.preflight import TASK_CPUS_CONF, Finding, conf_value
from sparktrain.deploy import kerberos
from sparktrain.errors import SparktrainError

#: Seconds a network service (a standalone master, a NameNode) has to accept a connection:
#: Spark and the HDFS client retry an unreachable one for minutes before they give up.
CONNECT_TIMEOUT: Final = 10.0
#: The Hadoop conf that turns Kerberos on.
HADOOP_AUTH_CONF: Final = "hadoop.security.authentication"
#: The most tasks the executors' probe starts: enough to reach every executor of a usual cluster.
MAX_PROBE_TASKS: Final = 256

#: How PySpark says an executor's Python is not the driver's (Spark 4 and older wordings).
_PYTHON_MISMATCH = ("PYTHON_VERSION_MISMATCH", "Python in worker has different version")
_PACK_FIX = (
    "ship the driver's environment to the executors: `sparktrain pack` it and pass the archive "
    "with --archives (spark.archives), pointing spark.pyspark.python into it; or install the "
    "same Python and sparktrain on every node"
)


def spark_version_finding(version: str, conf: Any) -> Finding:
    """Whether sparktrain supports Spark ``version``, and whether the sparktrain jar on
    ``spark.jars`` (if any) is the build for it: the other build fails in every task that
    touches the JVM TFRecord format, with errors that do not say why."""
    from sparktrain.errors import InvalidArgumentError
    from sparktrain.jvm import SPARK35_JAR_SUFFIX, spark_line

    check = "spark-version"
    try:
        line = spark_line(version)
    except InvalidArgumentError:
        return Finding(
            check,
            "error",
            f"this is Spark {version}; sparktrain supports Spark 3.5 and 4.x",
            "run on Spark 3.5 or 4.x",
        )
    jars = [
        name
        for name in map(posixpath.basename, _spark_jars(conf))
        if name.startswith("sparktrain-hadoop-") and name.endswith(".jar")
    ]
    for name in jars:
        built_for = "3.5" if name.endswith(SPARK35_JAR_SUFFIX) else "4"
        if built_for != line:
            return Finding(
                check,
                "error",
                f"spark.jars has {name}, sparktrain's jar for Spark {built_for}, but this is Spark {version}",
                f"use sparktrain.jar_path() with this Spark's pyspark (the build for Spark {line}); "
                "`sparktrain submit` adds the right one by itself",
            )
    if line == "4":
        return Finding(check, "ok", f"Spark {version}")
    tfrecord = (
        "format('tfrecord') is sparktrain's jar"
        if jars
        else "format('tfrecord') needs sparktrain's jar on spark.jars here; tfrecord.write and "
        "read_dataframe do not"
    )
    return Finding(
        check,
        "ok",
        f"Spark {version}: all of sparktrain but the Python data source API (Spark 4); {tfrecord}",
    )


def jars_finding(conf: Any) -> Finding:
    """Whether every file ``spark.jars`` names on the driver's file system (a bare path or a
    ``file:`` URL) exists: Spark logs an error for a missing one and starts without it, and
    the tasks that need its classes fail later with ``ClassNotFoundException``. Other URLs
    (``hdfs:``, ``local:`` on every node) are not looked at."""
    missing = []
    for entry in _spark_jars(conf):
        parts = urlsplit(entry)
        if parts.scheme not in ("", "file"):
            continue
        if not os.path.isfile(parts.path if parts.scheme else entry):
            missing.append(entry)
    if missing:
        return Finding(
            "jars",
            "error",
            f"spark.jars names {', '.join(missing)}, not a file here: Spark starts without it, "
            "and tasks that need its classes fail with ClassNotFoundException",
            "correct the path (sparktrain.jar_path() gives sparktrain's own jar)",
        )
    return Finding("jars", "ok", "every local file on spark.jars exists")


def _spark_jars(conf: Any) -> list[str]:
    """The entries of ``spark.jars`` (paths or URLs), in order."""
    return [j.strip() for j in (conf_value(conf, "spark.jars") or "").split(",") if j.strip()]


def slots_finding(conf: Any, slots: int, executors: int, num_workers: int | None, waited: float) -> Finding:
    check = "slots"
    cpus = conf_value(conf, TASK_CPUS_CONF) or "1"
    have = f"{slots} task slot(s) on {executors} executor(s) ({TASK_CPUS_CONF}={cpus})"
    if num_workers is None:
        if slots == 0:
            return Finding(
                check,
                "warning",
                f"no executor offered a task slot within {waited:.0f} s",
                "start executors (spark.executor.instances), or wait for them before training",
            )
        return Finding(check, "ok", have)
    if slots < num_workers:
        return Finding(
            check,
            "error",
            f"{num_workers} trainer(s) need {num_workers} task slot(s) at once, but the cluster has {have} "
            f"after waiting {waited:.0f} s",
            "add executors (spark.executor.instances) or cores, lower spark.task.cpus, or train "
            "fewer workers",
        )
    return Finding(check, "ok", f"{num_workers} trainer(s) fit: {have}")


def executor_versions_finding(sc: Any, slots: int, timeout: float) -> Finding:
    """Asks the executors, in one small Spark job, which Python and sparktrain they run."""
    check = "executor-versions"
    if slots < 1:
        return Finding(check, "warning", "no executor to ask for its Python and sparktrain versions")
    driver = (tuple(sys.version_info[:3]), _driver_version(), sys.executable)
    try:
        rows = _probe_executors(sc, min(slots, MAX_PROBE_TASKS), timeout)
    except TimeoutError as e:
        return Finding(check, "error", str(e), "look at the executors' logs; check that tasks can start")
    except Exception as e:
        from sparktrain.cluster.failures import spark_error_summary

        text = str(e)
        if any(marker in text for marker in _PYTHON_MISMATCH):
            return Finding(
                check,
                "error",
                f"the executors run another Python than the driver's {_dotted(driver[0])}: "
                f"{spark_error_summary(text)}",
                _PACK_FIX,
            )
        return Finding(
            check,
            "error",
            f"a Spark job asking executors for their versions failed: {spark_error_summary(text) or e!r}",
            _PACK_FIX,
        )
    broken = sorted({(host, exe, problem) for host, _, version, exe, problem in rows if version is None})
    if broken:
        where = ", ".join(sorted({f"{host} ({exe})" for host, exe, _ in broken}))
        return Finding(
            check,
            "error",
            f"sparktrain cannot be imported on the executors of {where}: {broken[0][2]}",
            _PACK_FIX,
        )
    seen = sorted({(tuple(py), str(version), exe) for _, py, version, exe, _ in rows})
    hosts = sorted({row[0] for row in rows})
    where = f"{len(rows)} task(s) on {len(hosts)} host(s)"
    described = "; ".join(f"Python {_dotted(py)}, sparktrain {v} ({exe})" for py, v, exe in seen)
    driver_text = f"Python {_dotted(driver[0])}, sparktrain {driver[1]}"
    if any(py[:2] != driver[0][:2] or v != driver[1] for py, v, _ in seen):
        return Finding(check, "error", f"{where} run {described}; the driver runs {driver_text}", _PACK_FIX)
    if any(py != driver[0] for py, _, _ in seen):
        return Finding(
            check,
            "warning",
            f"{where} run {described}; the driver runs {driver_text}: another patch release of Python",
            _PACK_FIX,
        )
    return Finding(check, "ok", f"{where} run {described}, as the driver does")


def _driver_version() -> str:
    import sparktrain

    return str(sparktrain.__version__)


def _dotted(version: Sequence[int]) -> str:
    return ".".join(str(part) for part in version)


#: What each probe task reports: host, Python version, sparktrain version (None when it cannot
#: be imported), interpreter, and why sparktrain could not be imported.
_ProbeRow = tuple[str, tuple[int, ...], str | None, str, str | None]


def _probe_executors(sc: Any, tasks: int, timeout: float) -> list[_ProbeRow]:
    """Runs ``tasks`` tasks that report what their Python worker runs; raises TimeoutError
    (after cancelling the job) when they do not finish within ``timeout`` seconds."""

    # Defined here so that cloudpickle ships the function itself: a module-level function
    # travels as a reference to this module, which an executor without sparktrain cannot load.
    def probe(_: Iterator[int]) -> Iterator[_ProbeRow]:
        import socket
        import sys

        version: str | None = None
        problem: str | None = None
        try:
            import sparktrain

            version = str(sparktrain.__version__)
        except Exception as e:  # not installed, or its native module does not load there
            problem = f"{type(e).__name__}: {e}"
        yield socket.gethostname(), tuple(sys.version_info[:3]), version, sys.executable, problem

    rows = run_probe_job(sc, tasks, timeout, probe, "versions")
    return [(str(h), tuple(py), v, str(exe), p) for h, py, v, exe, p in rows]


def run_probe_job(
    sc: Any, tasks: int, timeout: float, probe: Callable[[Iterator[int]], Iterator[Any]], what: str
) -> list[Any]:
    """Runs ``tasks`` tasks of ``probe`` in one Spark job and collects what they yield; raises
    TimeoutError (after cancelling the job) when they do not finish within ``timeout`` seconds.
    ``what`` names the probe in the job's description and the error."""
    group = f"sparktrain-doctor-{uuid.uuid4().hex[:8]}"
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            with _spark.job_group(sc, group, f"sparktrain doctor: executor {what}"):
                outcome["rows"] = sc.parallelize(range(tasks), tasks).mapPartitions(probe).collect()
        except BaseException as e:  # handed to the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name=group, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        _spark.cancel(sc, group)
        thread.join(10.0)
        raise TimeoutError(
            f"a Spark job of {tasks} task(s) asking executors for {what} took over {timeout:g} s"
        )
    if "error" in outcome:
        raise outcome["error"]
    return list(outcome["rows"])


def unreachable(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why nothing at ``host:port`` accepts a TCP connection within ``timeout`` seconds (an
    unknown name, a refused or timed-out connection), or None when something does."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as e:
        return str(e) or type(e).__name__


def master_finding(master: str) -> Finding | None:
    """For a standalone master (``spark://host:port[,host:port]``), an error when none of its
    addresses accepts a connection, found in seconds where Spark gives up after a minute;
    None for any other master, or when one answers."""
    if not master.startswith("spark://"):
        return None
    failures = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            return None  # Spark names a malformed master itself
        why = unreachable(host, int(port))
        if why is None:
            return None
        failures.append(f"{address}: {why}")
    return Finding(
        "spark",
        "error",
        f"cannot reach the Spark master {master} ({'; '.join(failures)})",
        "correct --master (spark://HOST:PORT, the master's own URL on its web UI) or start the master",
    )


def storage_findings(paths: Sequence[str]) -> list[Finding]:
    """For each folder in ``paths``: writes a small probe file into it, reads it back and
    removes it. A folder that does not exist yet is created for the probe and removed again,
    as far as it was created. Runs on the driver, with its network and credentials."""
    return [_probe_path(path) for path in paths]


def _parent(path: str) -> str:
    """The folder holding ``path``; the root is its own parent."""
    parts = urlsplit(path)
    if parts.scheme:
        folder = posixpath.dirname(parts.path.rstrip("/")) or "/"
        return urlunsplit(parts._replace(path=folder))
    return os.path.dirname(path.rstrip("/")) or "/"


def _probe_path(path: str) -> Finding:
    from sparktrain import fs

    check = "storage"
    folder = path.rstrip("/") or "/"
    if not urlsplit(folder).scheme:
        folder = os.path.abspath(folder)  # so that its parents can be walked up to the root
    fix = "use a folder the job's user may write, or give that user write permission on it"
    parts = urlsplit(folder)
    if parts.scheme in ("hdfs", "viewfs", "webhdfs") and parts.hostname and parts.port:
        # A NameNode that cannot be reached is found in seconds; its client would retry for
        # minutes. (A name without a port is an HA nameservice: the Hadoop conf resolves it.)
        why = unreachable(parts.hostname, parts.port)
        if why is not None:
            return Finding(
                check,
                "error",
                f"cannot reach the NameNode of {path} at {parts.hostname}:{parts.port}: {why}",
                "correct the host and port in the path (or fs.defaultFS), or start HDFS",
            )
    try:
        if fs.exists(folder):
            if not fs.status(folder).is_dir:
                return Finding(check, "error", f"{path} is a file, not a folder", "give a folder")
            created: list[str] = []
        else:
            # The folders write_bytes is about to create, deepest first, to remove them again.
            created = [folder]
            while (parent := _parent(created[-1])) != created[-1] and not fs.exists(parent):
                created.append(parent)
    except SparktrainError as e:
        # Not a permission (that comes when writing): the path, the store or its settings.
        return Finding(
            check, "error", f"cannot look at {path}: {e}", "check the path and the storage's settings"
        )
    probe = f"{folder.rstrip('/')}/.sparktrain-doctor-{uuid.uuid4().hex}"
    data = b"sparktrain doctor probe\n"
    failure: SparktrainError | None = None
    read = b""
    try:
        fs.write_bytes(probe, data)
        read = fs.read_bytes(probe)
    except SparktrainError as e:
        failure = e
    # Whatever failed, what the probe made is removed: the file, and the folders it created.
    leftovers = _remove_probe([probe, *created])
    left = f"; it could not remove {', '.join(leftovers)}" if leftovers else ""
    if failure is not None:
        return Finding(check, "error", f"cannot write a file under {path}: {failure}{left}", fix)
    if read != data:
        return Finding(
            check, "error", f"{path}: a probe file read back differs from what was written{left}", fix
        )
    if leftovers:
        return Finding(
            check,
            "warning",
            f"{path} is writable, but the probe could not remove {', '.join(leftovers)}",
            "remove them by hand",
        )
    made = " (created for the probe and removed again)" if created else ""
    return Finding(check, "ok", f"{path} is writable and readable{made}")


def _remove_probe(targets: Sequence[str]) -> list[str]:
    """Removes each of ``targets`` (the probe file, then the folders made for it, deepest
    first) that exists; returns those that could not be removed."""
    from sparktrain import fs

    leftovers = []
    for target in targets:
        try:
            fs.delete(target, recursive=False)  # a folder that is not empty stays, and is named
        except SparktrainError:
            # Someone else's files appeared there meanwhile, or no right to remove it; or it
            # was never made. Named unless it is known not to be there.
            try:
                still_there = fs.exists(target)
            except SparktrainError:
                still_there = True
            if still_there:
                leftovers.append(target)
    return leftovers


def hadoop_authentication(sc: Any | None = None) -> str | None:
    """``hadoop.security.authentication`` from ``$HADOOP_CONF_DIR/core-site.xml``, else from
    the Hadoop conf of ``sc``'s JVM; None when neither says."""
    conf_dir = os.environ.get("HADOOP_CONF_DIR")
    if conf_dir:
        site = Path(conf_dir) / "core-site.xml"
        try:
            for prop in ElementTree.parse(site).getroot().iter("property"):
                if (prop.findtext("name") or "").strip() == HADOOP_AUTH_CONF:
                    return (prop.findtext("value") or "").strip() or None
        except (OSError, ElementTree.ParseError):
            pass  # the JVM's conf below, or none
    if sc is not None:
        try:
            value = sc._jsc.hadoopConfiguration().get(HADOOP_AUTH_CONF)
        except Exception:  # no JVM to ask: nothing known
            return None
        return str(value) if value else None
    return None


def kerberos_finding(authentication: str | None = None) -> Finding | None:
    """Whether the driver can authenticate to a Kerberized Hadoop, when ``authentication``
    (default: the value of ``hadoop.security.authentication`` in
    ``$HADOOP_CONF_DIR/core-site.xml``) is ``kerberos``; None otherwise.

    It looks where sparktrain's HDFS client looks (:mod:`sparktrain.deploy.kerberos`): the
    default credentials of MIT's GSSAPI library (a valid ticket in the cache ``KRB5CCNAME``
    names, or a client keytab in ``KRB5_CLIENT_KTNAME``), else delegation tokens in
    ``HADOOP_TOKEN_FILE_LOCATION`` (as YARN gives its containers). A ticket that expires
    within the hour is a warning unless a client keytab can renew it."""
    if authentication is None:
        authentication = hadoop_authentication()
    if (authentication or "").lower() != "kerberos":
        return None
    check = "kerberos"
    fix = (
        "run `kinit <principal>` (or `kinit -kt <keytab> <principal>`) before starting the job, or "
        "set KRB5_CLIENT_KTNAME to a keytab; for jobs that outlive a ticket pass --principal and "
        "--keytab to sparktrain submit (or spark-submit) so that Spark renews its own delegation tokens"
    )
    try:
        credentials = kerberos.default_credentials()
    except kerberos.NoCredentials as e:
        tokens = kerberos.token_file()
        if tokens is not None:
            return Finding(
                check,
                "ok",
                f"Hadoop uses Kerberos; no ticket, but delegation tokens in {tokens} "
                "(HADOOP_TOKEN_FILE_LOCATION), as YARN gives its containers",
            )
        if not kerberos.gssapi_available():
            return Finding(
                check,
                "error",
                f"Hadoop uses Kerberos, but {kerberos.GSSAPI_LIBRARY} (MIT Kerberos), which "
                "sparktrain's HDFS client authenticates with, cannot be loaded",
                "install libgssapi-krb5-2 (Debian, Ubuntu) or krb5-libs (RHEL, CentOS)",
            )
        return Finding(
            check, "error", f"Hadoop uses Kerberos, but there are no Kerberos credentials: {e}", fix
        )
    left = credentials.lifetime_s
    valid = "" if left is None else f", valid for {_duration(left)}"
    message = f"Hadoop uses Kerberos, and GSSAPI finds credentials for {credentials.principal}{valid}"
    if left is not None and left < 3600 and not os.environ.get("KRB5_CLIENT_KTNAME"):
        return Finding(check, "warning", f"{message}: a job that runs longer loses access to HDFS then", fix)
    return Finding(check, "ok", message)


def _duration(seconds: int) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{max(seconds // 60, 1)} min"


__all__ = [
    "executor_versions_finding",
    "hadoop_authentication",
    "kerberos_finding",
    "slots_finding",
    "spark_version_finding",
    "storage_findings",
]
