"""Shared pytest fixtures. Each real component gets its own section below."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from harness import azurite
from harness.minidfs import MiniDfs
from harness.s3 import MotoServer, new_bucket, s3a_keys
from harness.spark import local_cluster_session

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import SparkSession

# --- HDFS (MiniDFSCluster) -------------------------------------------------------------------
# One cluster per session (per xdist worker). tests/run.sh starts a single cluster shared by
# cargo test and pytest and passes its URL in SPARKTRAIN_TEST_HDFS; then nothing is started here.


@pytest.fixture(scope="session")
def hdfs_url() -> Iterator[str]:
    """``hdfs://127.0.0.1:<port>`` of a running HDFS; tests should use a unique path under it."""
    external = os.environ.get("SPARKTRAIN_TEST_HDFS")
    if external:
        yield external.rstrip("/")
        return
    with MiniDfs() as dfs:
        yield dfs.url


# --- S3 (moto's standalone server) -----------------------------------------------------------
# One server per session (per xdist worker), or the one tests/run.sh started and named in
# SPARKTRAIN_TEST_S3. This process's storage is pointed at it with Hadoop's S3A keys, which
# sparktrain's Spark entry points carry to their tasks and trainers.


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a running S3-compatible server."""
    # The S3 tests run in the main environment (tests/requirements.txt has moto and boto3);
    # the PySpark 3.5 environment collects them without those packages.
    pytest.importorskip("boto3", reason="moto and boto3 are in tests/requirements.txt, not here")
    external = os.environ.get("SPARKTRAIN_TEST_S3")
    if external:
        yield external.rstrip("/")
        return
    with MotoServer() as server:
        yield server.url


@pytest.fixture(scope="session")
def s3_url(s3_endpoint: str) -> str:
    """``s3://<bucket>`` of a fresh bucket, with this process configured to reach it; tests
    should use a unique path under it."""
    from sparktrain import fs

    fs.configure(s3a_keys(s3_endpoint))
    return f"s3://{new_bucket(s3_endpoint)}"


# --- Azure Blob Storage (Azurite, from the npm registry) ---------------------------------------
# One emulator per session (per xdist worker), installed into .azurite by tests/run.sh; this
# process's environment points sparktrain's Azure client at it.


@pytest.fixture(scope="session")
def azure_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a running Azurite Blob service."""
    pytest.importorskip(
        "azure.storage.blob", reason="azure-storage-blob is in tests/requirements.txt, not here"
    )
    reason = azurite.missing()
    if reason:
        if os.environ.get("CI") == "true":  # CI installs it (tests/run.sh): never skip there
            pytest.fail(reason)
        pytest.skip(reason)
    with azurite.Azurite() as server:
        yield server.url


@pytest.fixture(scope="session")
def azure_url(azure_endpoint: str) -> str:
    """``abfs://<container>@devstoreaccount1.dfs.core.windows.net`` of a fresh container; tests
    should use a unique path under it."""
    container = azurite.new_container(azure_endpoint)
    return f"abfs://{container}@{azurite.ACCOUNT}.dfs.core.windows.net"


# --- Spark (pyspark wheel, local-cluster) ----------------------------------------------------
# Separate executor JVMs and Python workers, as on a real cluster (see harness/spark.py).


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A SparkSession on ``local-cluster[2,2,1024]`` with the sparktrain jar loaded: four task
    slots, so a barrier stage of three trainers fits and one of five does not."""
    session = local_cluster_session("sparktrain-tests", cores=2)
    # The executors register seconds after the session starts, later on a busy machine: a
    # test's barrier stage must find their slots, not spend its grace period waiting for them.
    deadline = time.monotonic() + 180
    while session.sparkContext._jsc.sc().getExecutorIds().size() < 2:
        assert time.monotonic() < deadline, "the local-cluster's 2 executors did not register within 180 s"
        time.sleep(0.25)
    yield session
    session.stop()


# --- MLflow (a tracking server from .venv-mlflow) ---------------------------------------------
# One server per session (per xdist worker): SQLite store, local artifacts, on 127.0.0.1.


@pytest.fixture(scope="session")
def mlflow_server() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a running MLflow tracking server."""
    # The client (mlflow-skinny) is in tests/requirements.txt; the PySpark 3.5 environment
    # collects these tests without it.
    pytest.importorskip("mlflow", reason="mlflow-skinny is in tests/requirements.txt, not here")
    from harness.mlflow_server import MlflowServer

    with MlflowServer() as server:
        yield server.url


# --- TensorFlow (tensorflow-cpu) -------------------------------------------------------------
# A fixture rather than a module-level import: importing TensorFlow takes seconds, which a run
# that deselects the TensorFlow tests should not pay while collecting them.


@pytest.fixture(scope="session")
def tf() -> ModuleType:
    """The ``tensorflow`` module, without its C++ start-up log lines."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    return tensorflow


# --- Markers ---------------------------------------------------------------------------------
# The fast tier (bash tests/run.sh --fast) selects tests by marker, so a test that starts Spark or
# HDFS or needs TensorFlow must carry the marker, or it would run there. A test that gets these
# through the fixtures above, directly or through other fixtures, is marked here; a test that
# starts them another way (spark-submit, a MiniDfs of its own, TensorFlow in a trainer process,
# a fixture taken with request.getfixturevalue) carries the marker itself.

FIXTURE_MARKERS = {
    "spark": "spark",
    "hdfs_url": "hdfs",
    "tf": "tensorflow",
    "azure_endpoint": "azure",
    "mlflow_server": "mlflow",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in FIXTURE_MARKERS.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(FIXTURE_MARKERS[fixture])
    # PySpark 3.5 (tests/run.sh's second environment) has no Python data source API: the tests
    # of it are skipped there, saying so, rather than failing or passing without running.
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        skip = pytest.mark.skip(
            reason=f"needs PySpark 4 (the Python data source API); this is PySpark {pyspark.__version__}"
        )
        for item in items:
            if item.get_closest_marker("spark4") is not None:
                item.add_marker(skip)
