"""Speculative copies of write tasks, for real: a Spark standalone cluster whose two Workers are
different hosts (127.0.0.2 and 127.0.0.3, so Spark may run a copy of a task beside its original),
with speculation on. One partition's first attempt waits until its speculative copy has started,
so both attempts of that task write at once; the output must hold every row exactly once, with
the jar's file format and with the Python writer.

The cluster needs a SparkContext of its own, which a pytest worker (holding the local-cluster
session) cannot start: the test runs this file as a script in a child process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = 4000
PARTITIONS = 4
ENGINES = ("jvm", "python")

pytestmark = pytest.mark.spark


def test_a_speculative_copy_of_a_write_task_leaves_every_row_once(tmp_path: Path) -> None:
    from harness.processes import run_in_group

    path = os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = run_in_group([sys.executable, __file__, str(tmp_path)], timeout=420, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for engine in ENGINES:
        result = report[engine]
        # Both attempts of partition 0 ran: the original and its speculative copy.
        assert {"0-0", "0-1"} <= set(result["attempts"]), result["attempts"]
        assert result["rows"] == ROWS, result
        assert result["ids"] == list(range(ROWS)), f"{engine}: rows lost or doubled"
        assert result["files"] == PARTITIONS, result
        assert not result["leftovers"], result


def _first_attempt_waits_for_its_copy(marks: str):
    """A mapInArrow function: notes each attempt, and holds partition 0's first attempt until
    its speculative copy has started (at most a minute), so both write at once."""

    def run(batches):
        from pyspark import TaskContext

        context = TaskContext.get()
        partition, attempt = context.partitionId(), context.attemptNumber()
        Path(marks, f"{partition}-{attempt}").touch()
        if partition == 0 and attempt == 0:
            deadline = time.monotonic() + 60
            while not Path(marks, "0-1").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)  # let the copy get going: the two attempts overlap
        yield from batches

    return run


def main(out: Path) -> None:
    from harness.standalone import StandaloneCluster
    from sparktrain import fs, tfrecord

    speculation = {
        "spark.speculation": "true",
        "spark.speculation.interval": "100ms",
        "spark.speculation.quantile": "0.5",
        "spark.speculation.multiplier": "1.5",
        "spark.speculation.minTaskRuntime": "200ms",
    }
    report = {}
    with StandaloneCluster(workers=2, cores_per_worker=2, separate_hosts=True) as cluster:
        spark = cluster.session("speculation", conf=speculation)
        for engine in ENGINES:
            marks = out / engine / "attempts"
            marks.mkdir(parents=True)
            data = f"file://{out}/{engine}/data"
            df = spark.range(0, ROWS, numPartitions=PARTITIONS).selectExpr("id", "cast(id as string) as s")
            slow = df.mapInArrow(_first_attempt_waits_for_its_copy(str(marks)), df.schema)
            written = tfrecord.write(slow, data, engine=engine)
            time.sleep(2.0)  # a losing attempt still running must not leave anything behind
            ids = sorted(r.id for r in tfrecord.read_dataframe(spark, data).select("id").collect())
            names = [f.path.rsplit("/", 1)[1] for f in fs.ls(data)]
            report[engine] = {
                "rows": written.rows,
                "ids": ids,
                "files": len([n for n in names if n.startswith("part-")]),
                "leftovers": [n for n in names if not n.startswith("part-") and n != "_SUCCESS"],
                "attempts": sorted(p.name for p in marks.iterdir()),
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
