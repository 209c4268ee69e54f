"""A real TensorFlow job under the launcher: Keras (tf-keras) with
MultiWorkerMirroredStrategy trains on two executors using the TF_CONFIG the rendezvous wrote;
the loss falls, and the model the chief saved loads in a fresh process. A worker killed
mid-training restarts the job, and Keras's BackupAndRestore resumes from the last epoch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sparktrain import Cluster

# TensorFlow runs in the trainer processes, not through the tf fixture.
pytestmark = pytest.mark.tensorflow


def test_keras_multi_worker_mirrored_strategy_trains_under_our_tf_config(spark, tmp_path):
    def main_fun(export_dir, ctx):
        import os
        import tempfile

        import numpy as np
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        assert strategy.num_replicas_in_sync == ctx.num_workers
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
        rng = np.random.default_rng(ctx.rank)
        x = rng.normal(size=(512, 4)).astype("float32")
        y = x @ np.array([1.0, -2.0, 3.0, 0.5], dtype="float32")
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat().with_options(options)
        history = model.fit(data, epochs=4, steps_per_epoch=8, verbose=0)
        # Every worker must take part in saving; only the chief's copy is kept.
        target = export_dir if ctx.is_chief else os.path.join(tempfile.mkdtemp(), "model")
        model.save(target)
        return history.history["loss"]

    export_dir = str(tmp_path / "model")
    env = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    with Cluster.run(spark, main_fun, export_dir, 2, env=env, log=False) as cluster:
        losses = cluster.wait(timeout=300)
    assert len(losses) == 4
    assert losses[-1] < losses[0] / 4, losses

    check = (
        "import sys, numpy as np, tf_keras\n"
        "model = tf_keras.models.load_model(sys.argv[1])\n"
        "print(model.predict(np.ones((1, 4), dtype='float32'), verbose=0).shape)\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check, export_dir],
        capture_output=True,
        text=True,
        timeout=300,
        env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.strip().endswith("(1, 1)")


def test_keras_resumes_with_backup_and_restore_after_a_worker_is_killed(spark, tmp_path):
    def main_fun(backup_dir, ctx):
        import os
        import signal

        import numpy as np
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
        rng = np.random.default_rng(ctx.rank)
        x = rng.normal(size=(512, 4)).astype("float32")
        y = x @ np.array([1.0, -2.0, 3.0, 0.5], dtype="float32")
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat().with_options(options)

        class DieOnce(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                if ctx.generation == 0 and ctx.rank == 1 and epoch == 1:
                    os.kill(os.getpid(), signal.SIGKILL)

        # The backup is written at the end of every epoch, before DieOnce runs.
        backup = tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir)
        history = model.fit(data, epochs=4, steps_per_epoch=8, callbacks=[backup, DieOnce()], verbose=0)
        return ctx.generation, history.history["loss"]

    env = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    with Cluster.run(spark, main_fun, str(tmp_path / "backup"), 2, env=env, log=False) as cluster:
        generation, losses = cluster.wait(timeout=600)
    assert generation == 1
    assert [r.cause for r in cluster.restarts] == ["worker:0 (task 1 on 127.0.0.1) was killed by SIGKILL"]
    # Epochs 0 and 1 were done before the restart: generation 1 trains epochs 2 and 3 only.
    assert len(losses) == 2, losses
    assert losses[-1] < 0.5, losses
