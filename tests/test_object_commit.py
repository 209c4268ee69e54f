"""A write task retried after its commit failed half-way, on object stores, for real: Spark's
local-cluster writes with ``tfrecord.write`` to moto's S3 server and to Azurite, with the
executors' stores made to fail a request of task 0's first attempt in its commit (the storage
layer's fault hook, ``SPARKTRAIN_TEST_OBJECT_FAULTS``, set for the executors alone). Spark runs
the task again; the output must hold every row exactly once, with ``_SUCCESS`` and nothing left
under ``_temporary``.

The faults must reach the executors' environment, which a running session's cannot take: the
test runs this file as a script, with a session of its own, in a child process.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = 3000
PARTITIONS = 3
#: The requests that fail, by name: what each does to attempt 0 of task 0 under a root.
FAULTS = {
    # The task commit's second copy out of the attempt's folder fails.
    "second-copy": "copy 2 {root}/_temporary/*/_attempt_00000_0",
}

#: What the child prints before its report.
REPORT = "OBJECT-COMMIT-REPORT "

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_write_task_retried_after_a_failed_commit_leaves_every_row_once(
    fault: str, s3_url: str, s3_endpoint: str, azure_url: str, azure_endpoint: str, tmp_path: Path
) -> None:
    from harness.azurite import blob_service
    from harness.processes import run_in_group
    from harness.s3 import boto3_client, s3a_keys
    from sparktrain import tfrecord

    name = f"{fault}-{uuid.uuid4().hex[:8]}"
    roots = {"s3": f"{s3_url}/{name}", "azure": f"{azure_url}/{name}"}
    job = {"roots": roots, "s3_keys": s3a_keys(s3_endpoint), "fault": FAULTS[fault].format(root=name)}
    path = os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("SPARKTRAIN_TEST_OBJECT_FAULTS", None)  # the executors' alone, never the driver's
    done = run_in_group([sys.executable, __file__, str(tmp_path), json.dumps(job)], timeout=420, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    # Spark's console may put escape codes before the report, on the same line.
    report = json.loads(done.stdout.rpartition(REPORT)[2])

    def s3_names(url: str) -> list[str]:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        listing = boto3_client(s3_endpoint).list_objects_v2(Bucket=bucket, Prefix=prefix + "/")
        return sorted(o["Key"][len(prefix) + 1 :] for o in listing.get("Contents", []))

    def azure_names(url: str) -> list[str]:
        container, _, rest = url.removeprefix("abfs://").partition("@")
        prefix = rest.partition("/")[2]
        client = blob_service(azure_endpoint).get_container_client(container)
        return sorted(b.name[len(prefix) + 1 :] for b in client.list_blobs(name_starts_with=prefix + "/"))

    found, expected = {}, {}
    for store, names_of in (("s3", s3_names), ("azure", azure_names)):
        names = names_of(roots[store])  # as the store's own client lists them
        ids = tfrecord.read(roots[store]).read_all().column("id").to_pylist()
        found[store] = {
            # Task 0's first attempt failed and Spark ran it again.
            "task 0 retried": "0-1" in report[store]["attempts"],
            "rows reported": report[store]["rows"],
            "part files": len([n for n in names if n.startswith("part-")]),
            "other names": sorted(n for n in names if not n.startswith("part-")),
            "rows read": len(ids),
            "distinct ids": sorted(set(ids)) == list(range(ROWS)),
        }
        expected[store] = {
            "task 0 retried": True,
            "rows reported": ROWS,
            "part files": PARTITIONS,
            "other names": ["_SUCCESS"],
            "rows read": ROWS,
            "distinct ids": True,
        }
    assert found == expected, found


def _note_attempts(marks: str):
    """A mapInArrow function that notes each task attempt, ``<partition>-<attempt>``."""

    def run(batches):
        from pyspark import TaskContext

        context = TaskContext.get()
        Path(marks, f"{context.partitionId()}-{context.attemptNumber()}").touch()
        yield from batches

    return run


def main(out: Path, job: dict) -> None:
    from harness.spark import local_cluster_session
    from sparktrain import fs, tfrecord

    fs.configure(job["s3_keys"])  # the driver's keys travel to the tasks with the write
    conf = {
        "spark.task.maxFailures": "4",
        "spark.executorEnv.SPARKTRAIN_TEST_OBJECT_FAULTS": job["fault"],
    }
    for key in ("AZURE_STORAGE_USE_EMULATOR", "AZURITE_BLOB_STORAGE_URL"):
        conf[f"spark.executorEnv.{key}"] = os.environ[key]
    spark = local_cluster_session("object-commit", conf=conf)
    report = {}
    try:
        for store, root in job["roots"].items():
            marks = out / store
            marks.mkdir(parents=True)
            df = spark.range(0, ROWS, numPartitions=PARTITIONS)
            noted = df.mapInArrow(_note_attempts(str(marks)), df.schema)
            written = tfrecord.write(noted, root, engine="python")
            report[store] = {"rows": written.rows, "attempts": sorted(p.name for p in marks.iterdir())}
    finally:
        spark.stop()
    print(REPORT + json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
