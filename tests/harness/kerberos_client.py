"""A client of a Kerberized HDFS, run as a process of its own by tests/test_kerberos.py.

sparktrain's HDFS client is per process and finds its credentials (``KRB5CCNAME``,
``KRB5_CLIENT_KTNAME``, ``HADOOP_TOKEN_FILE_LOCATION``) when it first connects, so each
credential situation gets a fresh process with its own environment. It runs the named steps
against the folder ``BASE`` and prints one JSON object with each step's result:

    python kerberos_client.py BASE STEP [STEP...]

The steps: ``credentials`` (what GSSAPI finds, as ``kinit -kt`` would with a keytab),
``doctor`` (the doctor's Kerberos finding), ``files`` (TFRecords and file-system operations),
``train`` (a short training run with checkpoints and event files, then a resumed one),
``denied`` (a write where the user may not write), ``fails`` (calls expected to fail) and
``renewed`` (a Spark job whose trainers have no credentials but the driver's delegation tokens,
running for several of the tokens' lifetimes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sparktrain import errors, fs, tfrecord


def _table(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, 2)).astype(np.float32)
    shop = rng.integers(0, 10, rows)
    label = ((x[:, 0] - 0.5 * x[:, 1] + (shop % 2)) > 0.5).astype(np.int64)
    return pa.table({"label": label, "x0": x[:, 0], "x1": x[:, 1], "shop": shop})


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def files(base: str) -> dict[str, Any]:
    table = _table(2_000)
    data = f"{base}/data"
    written = [tfrecord.write_batches(f"{data}/part-0000{k}.tfrecord.gz", table) for k in range(2)]
    fs.write_bytes(f"{data}/_SUCCESS", b"")
    back = tfrecord.read(data).read_all()
    # More than one 64 KiB packet each way on the data transfer path, where SASL wraps them.
    blob = bytes(range(256)) * 4096 * 3
    fs.mkdirs(f"{base}/a/b")
    fs.write_bytes(f"{base}/a/b/blob", blob)
    fs.rename(f"{base}/a/b/blob", f"{base}/a/blob")
    return {
        "written": written,
        "listing": [_name(i.path) for i in fs.ls(data)],
        "read_files": sorted(_name(path) for path in tfrecord.read(data).files),
        "rows": back.num_rows,
        "labels_equal": back.column("label").to_pylist() == table.column("label").to_pylist() * 2,
        "glob": [_name(i.path) for i in fs.glob(f"{data}/part-*")],
        "blob_equal": fs.read_bytes(f"{base}/a/blob") == blob,
        "blob_size": fs.size(f"{base}/a/blob"),
        "moved_away": not fs.exists(f"{base}/a/b/blob"),
        "deleted": fs.delete(f"{base}/a", recursive=True),
        "gone": not fs.exists(f"{base}/a"),
    }


def train(base: str) -> dict[str, Any]:
    from sparktrain.training import FitResult, Trainer

    data = f"{base}/train.tfrecord"
    tfrecord.write_batches(data, _table(1_000))
    model_dir, tensorboard = f"{base}/model", f"{base}/tb"
    features = {"dense": ["x0", "x1"], "categorical": {"shop": 10}}

    def trainer() -> Trainer:
        return Trainer(
            model="wide_deep",
            features=features,
            hidden=[4],
            batch_size=50,
            model_dir=model_dir,
            checkpoint_every=10,
            tensorboard_dir=tensorboard,
            log_every=5,
        )

    def run(steps: int) -> FitResult:
        t = trainer()
        result = t.fit(data, epochs=10, steps=steps)
        t.close()  # commits the event file: HDFS shows a file once it is closed
        return result

    first = run(20)
    # A new trainer on the same folder reads the latest checkpoint back from HDFS.
    second = run(30)
    events = [i.path for i in fs.glob(f"{tensorboard}/events.out.tfevents.*")]
    records = [r for path in events for r in tfrecord.RecordReader(path, "NONE")]
    return {
        "steps": [first.steps, second.steps],
        "resumed_from": second.resumed_from,
        "model_dir": sorted(_name(i.path) for i in fs.ls(model_dir)),
        "index": json.loads(fs.read_bytes(f"{model_dir}/checkpoint.json")),
        "event_files": len(events),
        # CRC-checked by the reader; each progress line writes a "loss" scalar.
        "loss_events": sum(b"loss" in r for r in records),
    }


def denied(base: str) -> dict[str, Any]:
    root = base.split("/user/", 1)[0]
    try:
        fs.write_bytes(f"{root}/not-yours", b"x")
    except errors.StorageError as e:
        return {"type": type(e).__name__, "message": str(e)}
    return {"type": None, "message": "written"}


def fails(base: str) -> dict[str, Any]:
    """Each call, timed; a call that does not fail is reported as such."""
    calls: dict[str, Callable[[], object]] = {
        "ls": lambda: fs.ls(base),
        "write_batches": lambda: tfrecord.write_batches(f"{base}/new.tfrecord", _table(10)),
    }
    out = {}
    for name, call in calls.items():
        start = time.monotonic()
        try:
            call()
            error: dict[str, Any] = {"type": None}
        except errors.SparktrainError as e:
            error = {"type": type(e).__name__, "message": str(e), "path": getattr(e, "path", None)}
        out[name] = {**error, "seconds": time.monotonic() - start}
    return out


def credentials(_: str) -> dict[str, Any]:
    from sparktrain.deploy import kerberos

    try:
        return dataclasses.asdict(kerberos.default_credentials())
    except kerberos.NoCredentials as e:
        return {"error": str(e)}


def doctor(_: str) -> dict[str, Any] | None:
    from sparktrain.deploy.doctor import kerberos_finding

    finding = kerberos_finding()
    return None if finding is None else dataclasses.asdict(finding)


#: How many files each trainer writes in ``renewed``, and the pause between two.
RENEWED_ROUNDS = 12
RENEWED_PAUSE_S = 4.0


def _write_now_and_then(args: tuple[str, int, float], ctx: Any) -> dict[str, Any]:
    """A trainer that writes a file to HDFS every ``pause`` seconds: each write after a pause
    opens a new NameNode connection (the cluster closes idle ones quickly), which presents the
    tokens the trainer's token file holds at that moment."""
    base, rounds, pause = args
    path = os.environ["HADOOP_TOKEN_FILE_LOCATION"]
    first = Path(path).read_bytes()
    seen = {hashlib.sha256(first).hexdigest()}
    start = time.monotonic()
    for i in range(rounds):
        if i:
            time.sleep(pause)
        fs.write_bytes(f"{base}/rank{ctx.rank}-{i:02d}", b"written with the driver's tokens")
        seen.add(hashlib.sha256(Path(path).read_bytes()).hexdigest())
    return {"seconds": time.monotonic() - start, "token_sets": len(seen), "first_tokens": first.hex()}


def renewed(base: str) -> dict[str, Any]:
    """Runs :func:`_write_now_and_then` on two executors whose trainers have no Kerberos
    credentials (an empty ticket cache, no keytab, no token file): all they have is what the
    driver, logged in through ``KRB5CCNAME``, hands them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import sparktrain as st
    from harness.spark import local_cluster_session

    java = f"-Djava.security.krb5.conf={os.environ['KRB5_CONFIG']}"
    conf = {
        "spark.driver.extraJavaOptions": java,
        "spark.executor.extraJavaOptions": java,
        "spark.executorEnv.KRB5CCNAME": "MEMORY:sparktrain-trainer",
    }
    session = local_cluster_session("kerberos-renewed-tokens", conf=conf)
    try:
        args = (base, RENEWED_ROUNDS, RENEWED_PAUSE_S)
        cluster = st.Cluster.run(session.sparkContext, _write_now_and_then, args, num_workers=2)
        cluster.wait(timeout=300)
        results = cluster.results()
    finally:
        session.stop()
    return {"trainers": results, "files": sorted(_name(i.path) for i in fs.ls(base))}


STEPS: dict[str, Callable[[str], Any]] = {
    "credentials": credentials,
    "doctor": doctor,
    "files": files,
    "train": train,
    "denied": denied,
    "fails": fails,
    "renewed": renewed,
}


def main(argv: list[str]) -> None:
    base, steps = argv[0], argv[1:]
    print(json.dumps({step: STEPS[step](base) for step in steps}))


if __name__ == "__main__":
    main(sys.argv[1:])
