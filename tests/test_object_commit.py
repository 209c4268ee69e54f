"""Write tasks whose commit fails half-way on object stores, for real: Spark's local-cluster
writes with ``tfrecord.write`` to moto's S3 server and to Azurite, with the executors' stores
made to fail a request of task 0's first attempt in its commit (the storage layer's fault hook,
``SPARKTRAIN_TEST_OBJECT_FAULTS``, set for the executors alone, so the driver's job commit goes
through). Spark runs a failed task again; the output must hold every row exactly once, with
``_SUCCESS`` and nothing left under ``_temporary``.

The faults must reach the executors' environment, which a running session's cannot take: the
test runs this file as a script, with a session of its own, in a child process, which writes
once per fault and store.
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
#: The request of task 0's first attempt that fails, by name, under the write's root; and
#: whether the attempt must then have failed, so that Spark ran the task again.
FAULTS = {
    # The second copy out of the attempt's folder fails: a commit that copies the attempt's
    # files dies with half of them copied. (A commit that does not copy never meets it.)
    "second-copy": ("copy 2 {root}/_temporary/*/_attempt_00000_0", None),
    # The task's manifest is uploaded, and the answer lost: the commit happened, the attempt
    # failed. (Counts are per process: the retry, on whichever executor, finds it uploaded.)
    "manifest-answer-lost": ("put 1 {root}/_temporary/*/task_00000.manifest landed", True),
}
STORES = ("s3", "azure")

#: What the child prints before its report.
REPORT = "OBJECT-COMMIT-REPORT "

pytestmark = pytest.mark.spark


def test_write_tasks_whose_commit_failed_half_way_leave_every_row_once(
    s3_url: str, s3_endpoint: str, azure_url: str, azure_endpoint: str, tmp_path: Path
) -> None:
    from harness.azurite import blob_service
    from harness.processes import run_in_group
    from harness.s3 import boto3_client, s3a_keys
    from sparktrain import tfrecord

    run = uuid.uuid4().hex[:8]
    bases = {"s3": s3_url, "azure": azure_url}
    roots = {f"{fault} {store}": f"{bases[store]}/{fault}-{run}" for fault in FAULTS for store in STORES}
    rules = "; ".join(rule.format(root=f"{fault}-{run}") for fault, (rule, _) in FAULTS.items())
    job = {"roots": roots, "s3_keys": s3a_keys(s3_endpoint), "faults": rules}
    path = os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("SPARKTRAIN_TEST_OBJECT_FAULTS", None)  # the executors' alone, never the driver's
    done = run_in_group([sys.executable, __file__, str(tmp_path), json.dumps(job)], timeout=540, env=env)
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

    names_of = {"s3": s3_names, "azure": azure_names}
    found, expected = {}, {}
    for fault, (_, retried) in FAULTS.items():
        for store in STORES:
            case = f"{fault} {store}"
            names = names_of[store](roots[case])  # as the store's own client lists them
            ids = tfrecord.read(roots[case]).read_all().column("id").to_pylist()
            found[case] = {
                "task 0 ran again": "0-1" in report[case]["attempts"],
                "rows reported": report[case]["rows"],
                "part files": len([n for n in names if n.startswith("part-")]),
                "other names": sorted(n for n in names if not n.startswith("part-")),
                "rows read": len(ids),
                "every id once": sorted(ids) == list(range(ROWS)),
            }
            expected[case] = {
                "task 0 ran again": found[case]["task 0 ran again"] if retried is None else retried,
                "rows reported": ROWS,
                "part files": PARTITIONS,
                "other names": ["_SUCCESS"],
                "rows read": ROWS,
                "every id once": True,
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
        "spark.executorEnv.SPARKTRAIN_TEST_OBJECT_FAULTS": job["faults"],
    }
    for key in ("AZURE_STORAGE_USE_EMULATOR", "AZURITE_BLOB_STORAGE_URL"):
        conf[f"spark.executorEnv.{key}"] = os.environ[key]
    spark = local_cluster_session("object-commit", conf=conf)
    report = {}
    try:
        for case, root in job["roots"].items():
            marks = out / case.replace(" ", "-")
            marks.mkdir(parents=True)
            df = spark.range(0, ROWS, numPartitions=PARTITIONS)
            noted = df.mapInArrow(_note_attempts(str(marks)), df.schema)
            written = tfrecord.write(noted, root, engine="python")
            report[case] = {"rows": written.rows, "attempts": sorted(p.name for p in marks.iterdir())}
    finally:
        spark.stop()
    print(REPORT + json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
