"""TensorFlowOnSpark's example jobs, with real TensorFlow (tf-keras) on real Spark, through the
shim: each ``main_fun`` is written the way TFoS's examples are (mnist keras in
``InputMode.TENSORFLOW``, mnist keras in ``InputMode.SPARK`` through the Spark ML pipeline,
and parameter-server jobs in the place of the Estimator examples, which TensorFlow 2.16 and
later no longer have: ParameterServerStrategy with an evaluator, and a TF1 ps/worker graph;
the estimator mnist inference example's single-node TensorFlow in plain Spark tasks with
``util.single_node_env()``; the Spark Streaming example, with Keras, stopped by
``examples/utils/stop_streaming.py``, which ``tfos_examples/`` holds as a user has it) and
would run under TFoS with only its ``from tensorflowonspark import ...`` line changed.
The data are small synthetic images.

Functions that run on executors are defined inside the tests: executors cannot import this
module.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from sparktrain.tfos import TFCluster, dfutil

# TensorFlow runs in the nodes' processes, not (only) through the tf fixture.
pytestmark = pytest.mark.tensorflow

#: What the executors' trainers need to run tf-keras quietly.
TF_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture
def tf_env(spark, monkeypatch):
    """tf-keras in the nodes, as ``spark.executorEnv.TF_USE_LEGACY_KERAS=1`` would give it:
    ``sc.environment`` is what PySpark's Python workers (and so the nodes) get for the jobs
    started from now on."""
    for name, value in TF_ENV.items():
        monkeypatch.setitem(spark.sparkContext.environment, name, value)


def _images(n, seed):
    """``n`` 8x8 one-channel images, flattened, and their labels: the label is the quadrant
    that is bright."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    images = rng.uniform(0.0, 0.3, (n, 8, 8))
    for i, label in enumerate(labels):
        r, c = divmod(int(label), 2)
        images[i, r * 4 : r * 4 + 4, c * 4 : c * 4 + 4] += 0.7
    return images.reshape(n, 64).round(3), labels


def test_keras_mnist_tf_example_trains_with_multi_worker_mirrored_strategy(spark, tmp_path, tf_env):
    # TFoS's examples/mnist/keras/mnist_tf.py, on synthetic data instead of tensorflow_datasets.
    def main_fun(args, ctx):
        import json

        import numpy as np
        import tensorflow as tf

        from sparktrain.tfos import compat

        strategy = tf.distribute.MultiWorkerMirroredStrategy()

        rng = np.random.default_rng(ctx.task_index)
        labels = rng.integers(0, 4, 2048)
        images = rng.uniform(0.0, 0.3, (2048, 8, 8, 1)).astype("float32")
        for i, label in enumerate(labels):
            r, c = divmod(int(label), 2)
            images[i, r * 4 : r * 4 + 4, c * 4 : c * 4 + 4] += 0.7
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        global_batch = args.batch_size * args.cluster_size
        train = tf.data.Dataset.from_tensor_slices((images, labels)).with_options(options).repeat()
        train = train.shuffle(args.buffer_size).batch(global_batch)

        def build_and_compile_cnn_model():
            model = tf.keras.Sequential(
                [
                    tf.keras.Input(shape=(8, 8, 1), name="image"),
                    tf.keras.layers.Conv2D(8, 3, activation="relu"),
                    tf.keras.layers.MaxPooling2D(),
                    tf.keras.layers.Flatten(),
                    tf.keras.layers.Dense(16, activation="relu"),
                    tf.keras.layers.Dense(4, activation="softmax", name="prediction"),
                ]
            )
            model.compile(
                loss=tf.keras.losses.sparse_categorical_crossentropy,
                optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
                metrics=["accuracy"],
            )
            return model

        tf.io.gfile.makedirs(args.model_dir)
        callbacks = [
            tf.keras.callbacks.ModelCheckpoint(
                filepath=args.model_dir + "/weights-{epoch:04d}", save_weights_only=True
            ),
            tf.keras.callbacks.TensorBoard(log_dir=args.model_dir),
        ]
        with strategy.scope():
            multi_worker_model = build_and_compile_cnn_model()
        history = multi_worker_model.fit(
            x=train, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=0
        )
        compat.export_saved_model(multi_worker_model, args.export_dir, ctx.job_name == "chief")
        if ctx.job_name == "chief":
            with open(args.model_dir + "/history.json", "w") as f:
                json.dump(history.history, f)

    args = argparse.Namespace(
        batch_size=32,
        buffer_size=1000,
        cluster_size=2,
        epochs=4,
        steps_per_epoch=25,
        model_dir=str(tmp_path / "model"),
        export_dir=str(tmp_path / "export"),
    )
    cluster = TFCluster.run(
        spark.sparkContext,
        main_fun,
        args,
        args.cluster_size,
        num_ps=0,
        input_mode=TFCluster.InputMode.TENSORFLOW,
        master_node="chief",
        log_dir=args.model_dir,
    )
    cluster.shutdown(timeout=600)
    history = json.loads((tmp_path / "model" / "history.json").read_text())
    assert history["loss"][-1] < history["loss"][0] / 2, history
    assert history["accuracy"][-1] > 0.8, history
    assert list((tmp_path / "model").glob("weights-0004*")), "ModelCheckpoint wrote nothing"
    assert list((tmp_path / "model" / "train").glob("events.out.tfevents.*")), "no TensorBoard events"
    # The chief's export loads in a fresh process and classifies a bright quadrant.
    check = (
        "import sys, numpy as np, tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "x = np.full((1, 8, 8, 1), 0.1, dtype='float32'); x[0, 4:, 4:, 0] = 0.9\n"
        "print(int(np.argmax(m.signatures['serving_default'](image=tf.constant(x))['prediction'])))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check, args.export_dir], capture_output=True, text=True, timeout=300
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.strip().splitlines()[-1] == "3"


def test_keras_mnist_pipeline_example_fits_and_transforms_in_spark_mode(spark, tmp_path, tf_env):
    # TFoS's examples/mnist/keras/mnist_pipeline.py (the main_fun of mnist_spark.py): the data
    # come from Spark through TFNode.DataFeed, as TFRecords loaded with dfutil.
    def main_fun(args, ctx):
        import numpy as np
        import tensorflow as tf

        from sparktrain.tfos import TFNode, compat

        strategy = tf.distribute.MultiWorkerMirroredStrategy()

        def build_and_compile_cnn_model():
            model = tf.keras.Sequential(
                [
                    tf.keras.Input(shape=(8, 8, 1), name="image"),
                    tf.keras.layers.Conv2D(8, 3, activation="relu"),
                    tf.keras.layers.MaxPooling2D(),
                    tf.keras.layers.Flatten(),
                    tf.keras.layers.Dense(16, activation="relu"),
                    tf.keras.layers.Dense(4, activation="softmax", name="prediction"),
                ]
            )
            model.compile(
                loss=tf.keras.losses.sparse_categorical_crossentropy,
                optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
                metrics=["accuracy"],
            )
            return model

        tf_feed = TFNode.DataFeed(ctx.mgr, False)

        def rdd_generator():
            while not tf_feed.should_stop():
                batch = tf_feed.next_batch(1)
                if len(batch) > 0:
                    example = batch[0]
                    image = np.reshape(np.array(example[0], dtype=np.float32), (8, 8, 1))
                    label = np.reshape(np.array(example[1], dtype=np.float32), (1,))
                    yield (image, label)
                else:
                    return

        ds = tf.data.Dataset.from_generator(
            rdd_generator,
            output_signature=(tf.TensorSpec([8, 8, 1], tf.float32), tf.TensorSpec([1], tf.float32)),
        )
        options = tf.data.Options()
        compat.disable_auto_shard(options)  # each worker trains on the rows Spark fed it
        ds = ds.with_options(options).batch(args.batch_size)

        tf.io.gfile.makedirs(args.model_dir)
        filepath = args.model_dir + "/weights-{epoch:04d}"
        callbacks = [tf.keras.callbacks.ModelCheckpoint(filepath=filepath, verbose=0, save_weights_only=True)]
        with strategy.scope():
            multi_worker_model = build_and_compile_cnn_model()

        # MultiWorkerMirroredStrategy is synchronous: stop at 90% of the rows a worker gets, so
        # that no worker runs out of data before the others.
        steps_per_epoch_per_worker = args.num_rows / args.batch_size / ctx.num_workers
        max_steps_per_worker = int(steps_per_epoch_per_worker * 0.9)
        multi_worker_model.fit(
            x=ds, epochs=args.epochs, steps_per_epoch=max_steps_per_worker, callbacks=callbacks, verbose=0
        )
        compat.export_saved_model(multi_worker_model, args.export_dir, ctx.job_name == "chief")
        # terminating the feed tells Spark to skip what is left of the data
        tf_feed.terminate()

    from sparktrain.tfos.pipeline import TFEstimator, TFModel

    images, labels = _images(2000, seed=0)
    df = spark.createDataFrame(
        [(image.tolist(), int(label)) for image, label in zip(images, labels, strict=True)],
        "image array<double>, label bigint",
    ).repartition(4)
    tfr = str(tmp_path / "tfr")
    dfutil.saveAsTFRecords(df, tfr)
    df = dfutil.loadTFRecords(spark.sparkContext, tfr)
    assert dfutil.isLoadedDF(df)

    args = argparse.Namespace(
        model_dir=str(tmp_path / "model"), export_dir=str(tmp_path / "export"), num_rows=2000, cluster_size=2
    )
    estimator = (
        TFEstimator(main_fun, args)
        .setInputMapping({"image": "image", "label": "label"})
        .setModelDir(args.model_dir)
        .setExportDir(args.export_dir)
        .setClusterSize(args.cluster_size)
        .setEpochs(3)
        .setBatchSize(32)
        .setGraceSecs(60)
    )
    model = estimator.fit(df)
    assert isinstance(model, TFModel)
    assert model.getExportDir() == args.export_dir
    assert list((tmp_path / "model").glob("weights-0003*")), "ModelCheckpoint wrote nothing"

    # Inference with the exported model: a single-node TensorFlow in every Python worker.
    model = (
        TFModel(args)
        .setInputMapping({"image": "image"})
        .setOutputMapping({"prediction": "prediction"})
        .setSignatureDefKey("serving_default")
        .setExportDir(args.export_dir)
        .setBatchSize(64)
    )
    test_images, test_labels = _images(400, seed=1)
    test = spark.createDataFrame([(image.tolist(),) for image in test_images], "image array<double>")
    predictions = model.transform(test).collect()
    assert len(predictions) == 400
    assert len(predictions[0].prediction) == 4
    guessed = np.array([int(np.argmax(p.prediction)) for p in predictions])
    assert (guessed == test_labels).mean() > 0.8


def test_parameter_server_strategy_job_with_a_ps_and_an_evaluator(spark, tmp_path, tf_env):
    # A job shaped like TFoS's Estimator examples with parameter servers (and the ps/worker
    # write-ups): ParameterServerStrategy's coordinator on the chief, a worker and a parameter
    # server that only serve, and a side-car evaluator reading the chief's checkpoints.
    def main_fun(args, ctx):
        import json
        import os

        import numpy as np
        import tensorflow as tf

        from sparktrain.tfos import TFNode

        def dataset(seed):
            rng = np.random.default_rng(seed)
            x = rng.normal(size=(1024, 4)).astype("float32")
            y = x @ np.array([1.0, -2.0, 3.0, 0.5], dtype="float32")
            return tf.data.Dataset.from_tensor_slices((x, y))

        def build():
            return tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])

        if ctx.job_name in ("worker", "ps"):
            _, server = TFNode.start_cluster_server(ctx)
            server.join()
            return

        if ctx.job_name == "evaluator":
            # ParameterServerStrategy's coordinator connects to every task TF_CONFIG lists, the
            # evaluator included (TFoS lists it too): its server must answer.
            TFNode.start_cluster_server(ctx)
            model = build()
            model.compile(loss="mse")

            class Record(tf.keras.callbacks.Callback):
                def on_test_end(self, logs=None):
                    with open(os.path.join(args.out, "evaluations"), "a") as f:
                        f.write(json.dumps(logs) + "\n")

            tf.keras.utils.SidecarEvaluator(
                model,
                data=dataset(99).batch(64),
                checkpoint_dir=args.model_dir,
                steps=4,
                max_evaluations=1,
                callbacks=[Record()],
            ).start()
            return

        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        with strategy.scope():
            model = build()
            model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", steps_per_execution=5)

        def dataset_fn(input_context):
            return dataset(input_context.input_pipeline_id).shuffle(1024).repeat().batch(32)

        checkpoint = os.path.join(args.model_dir, "ckpt-{epoch}")
        history = model.fit(
            tf.keras.utils.experimental.DatasetCreator(dataset_fn),
            epochs=args.epochs,
            steps_per_epoch=20,
            callbacks=[tf.keras.callbacks.ModelCheckpoint(checkpoint, save_weights_only=True)],
            verbose=0,
        )
        with open(os.path.join(args.out, "history.json"), "w") as f:
            json.dump(history.history, f)

    args = argparse.Namespace(model_dir=str(tmp_path / "model"), out=str(tmp_path), epochs=4)
    started = time.monotonic()
    cluster = TFCluster.run(
        spark.sparkContext,
        main_fun,
        args,
        4,
        num_ps=1,
        input_mode=TFCluster.InputMode.TENSORFLOW,
        master_node="chief",
        eval_node=True,
        eval_grace_secs=120,
        max_restarts=0,
    )
    cluster.shutdown(timeout=600)
    history = json.loads((tmp_path / "history.json").read_text())
    assert len(history["loss"]) == 4
    assert history["loss"][-1] < history["loss"][0] / 4, history
    evaluations = [json.loads(line) for line in (tmp_path / "evaluations").read_text().splitlines()]
    assert evaluations
    assert evaluations[-1]["loss"] < history["loss"][0], evaluations
    # The parameter server and the worker, blocked in server.join(), were stopped with the job.
    assert time.monotonic() - started < 600


def test_tf1_ps_worker_graph_trains_on_variables_held_by_the_parameter_server(spark, tmp_path, tf_env):
    # The ps/worker pattern of TFoS's TF1 and Estimator examples (tf.estimator itself is gone
    # from TensorFlow 2.16 and later): every node starts its server with
    # ctx.start_cluster_server, the parameter server joins, the chief and the worker place
    # their variables on it with replica_device_setter and train with MonitoredTrainingSession
    # up to a shared global step.
    def map_fun(args, ctx):
        import json
        import os

        import numpy as np
        import tensorflow as tf

        v1 = tf.compat.v1
        cluster_spec, server = ctx.start_cluster_server(1)
        if ctx.job_name == "ps":
            server.join()
            return
        is_chief = ctx.job_name == "chief"
        true_w = np.array([[1.0], [-2.0], [3.0], [0.5]], dtype="float32")
        rng = np.random.default_rng(ctx.task_index + (0 if is_chief else 100))
        with tf.Graph().as_default():
            device = f"/job:{ctx.job_name}/task:{ctx.task_index}"
            with v1.device(v1.train.replica_device_setter(worker_device=device, cluster=cluster_spec)):
                x = v1.placeholder(tf.float32, [None, 4])
                y = v1.placeholder(tf.float32, [None, 1])
                w = v1.get_variable("w", [4, 1], initializer=v1.zeros_initializer())
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
                step = v1.train.get_or_create_global_step()
                train_op = v1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=step)
            losses = []
            with v1.train.MonitoredTrainingSession(
                master=server.target,
                is_chief=is_chief,
                checkpoint_dir=args.model_dir if is_chief else None,
                hooks=[v1.train.StopAtStepHook(last_step=args.steps)],
            ) as sess:
                while not sess.should_stop():
                    xs = rng.normal(size=(32, 4)).astype("float32")
                    _, value = sess.run([train_op, loss], {x: xs, y: xs @ true_w})
                    losses.append(float(value))
        if is_chief:
            with open(os.path.join(args.out, "chief.json"), "w") as f:
                json.dump({"losses": losses, "device": w.device}, f)

    args = argparse.Namespace(model_dir=str(tmp_path / "model"), out=str(tmp_path), steps=300)
    cluster = TFCluster.run(
        spark.sparkContext, map_fun, args, 3, num_ps=1, master_node="chief", max_restarts=0
    )
    cluster.shutdown(timeout=600)
    chief = json.loads((tmp_path / "chief.json").read_text())
    assert chief["device"] == "/job:ps/task:0"
    losses = chief["losses"]
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) / 10, losses
    assert list((tmp_path / "model").glob("model.ckpt-*.index")), "the chief wrote no checkpoint"


def test_tensorboard_runs_on_the_chief_while_training_runs(spark, tmp_path):
    def main_fun(args, ctx):
        import os
        import time

        if ctx.job_name == "chief":
            deadline = time.monotonic() + 180
            while not os.path.exists(args["seen"]) and time.monotonic() < deadline:
                time.sleep(0.2)

    log_dir = tmp_path / "logs"
    seen = tmp_path / "seen"
    cluster = TFCluster.run(
        spark.sparkContext,
        main_fun,
        {"seen": str(seen)},
        2,
        tensorboard=True,
        master_node="chief",
        log_dir=str(log_dir),
    )
    try:
        url = cluster.tensorboard_url()
        assert url is not None
        assert url.startswith("http://")
        environment = None
        deadline = time.monotonic() + 120
        while environment is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/data/environment", timeout=5) as response:
                    environment = json.loads(response.read())
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        assert environment is not None, f"TensorBoard did not answer at {url}"
        assert environment["data_location"] == str(log_dir)
    finally:
        seen.touch()
    cluster.shutdown(timeout=300)
    assert cluster.tensorboard_url() == url
    # TensorBoard ends with the job.
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"{url}/data/environment", timeout=5)


def test_a_tf1_session_exports_a_saved_model_with_its_signatures(tf, tmp_path):
    from sparktrain.tfos import TFNode

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 2], name="x")
        w = tf.Variable([[2.0], [3.0]], name="w")
        y = tf.identity(tf.matmul(x, w), name="y")
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            graph.finalize()  # as a MonitoredTrainingSession leaves it
            signatures = {
                "serving_default": {"inputs": {"features": x}, "outputs": {"prediction": "y:0"}},
            }
            TFNode.export_saved_model(sess, str(tmp_path / "export"), "serve", signatures)
    loaded = tf.saved_model.load(str(tmp_path / "export"), tags=["serve"])
    predict = loaded.signatures["serving_default"]
    out = predict(features=tf.constant([[1.0, 1.0], [0.0, 2.0]]))["prediction"].numpy()
    assert out.ravel().tolist() == [5.0, 6.0]
    assert y.name == "y:0"


def test_estimator_mnist_inference_example_runs_single_node_tensorflow_in_spark_tasks(
    spark, tf, tmp_path, tf_env
):
    # TFoS's examples/mnist/estimator/mnist_inference.py: no TFCluster, a plain Spark job whose
    # tasks each call util.single_node_env() and score their shard of TFRecords with a
    # SavedModel. Images are 8x8 here, and NumPy 2 has no np.int (int instead).
    images, labels = _images(120, seed=5)
    data = tmp_path / "images_labels"
    data.mkdir()
    for part in range(3):
        with tf.io.TFRecordWriter(str(data / f"part-{part:05d}")) as writer:
            for image, label in list(zip(images, labels, strict=True))[part::3]:
                pixels = (np.clip(image, 0, 1) * 255).round().astype(int).tolist()
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "image": tf.train.Feature(int64_list=tf.train.Int64List(value=pixels)),
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                        }
                    )
                )
                writer.write(example.SerializeToString())

    class Quadrants(tf.Module):
        """Scores each quadrant by its mean brightness: the bright one is the label."""

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32)])
        def serve(self, conv2d_input):
            means = [
                tf.reduce_mean(conv2d_input[:, r : r + 4, c : c + 4, 0], axis=[1, 2])
                for r in (0, 4)
                for c in (0, 4)
            ]
            return {"logits": tf.stack(means, axis=1)}

    module = Quadrants()
    export_dir = str(tmp_path / "export")
    tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})

    def inference(it, num_workers, args):
        from sparktrain.tfos import util

        # consume worker number from RDD partition iterator
        for i in it:
            worker_num = i
        print(f"worker_num: {i}")

        # setup env for single-node TF
        util.single_node_env()

        import numpy as np
        import tensorflow as tf

        # load saved_model
        saved_model = tf.saved_model.load(args.export_dir, tags="serve")
        predict = saved_model.signatures["serving_default"]

        # parse function for TFRecords
        def parse_tfr(example_proto):
            feature_def = {
                "label": tf.io.FixedLenFeature(1, tf.int64),
                "image": tf.io.FixedLenFeature(64, tf.int64),
            }
            features = tf.io.parse_single_example(serialized=example_proto, features=feature_def)
            image = tf.cast(features["image"], dtype=tf.float32) / 255.0
            image = tf.reshape(image, [8, 8, 1])
            label = tf.cast(features["label"], dtype=tf.float32)
            return (image, label)

        # define a new tf.data.Dataset (for inferencing)
        ds = tf.data.Dataset.list_files(f"{args.images_labels}/part-*", shuffle=False)
        ds = ds.shard(num_workers, worker_num)
        ds = ds.interleave(tf.data.TFRecordDataset)
        ds = ds.map(parse_tfr)
        ds = ds.batch(10)

        # create an output file per spark worker for the predictions
        tf.io.gfile.makedirs(args.output)
        output_file = tf.io.gfile.GFile(f"{args.output}/part-{worker_num:05d}", mode="w")

        for batch in ds:
            predictions = predict(conv2d_input=batch[0])
            labels = np.reshape(batch[1], -1).astype(int)
            preds = np.argmax(predictions["logits"], axis=1)
            for x in zip(labels, preds, strict=True):
                output_file.write(f"{x[0]} {x[1]}\n")

        output_file.close()

    args = argparse.Namespace(
        images_labels=str(data), export_dir=export_dir, output=str(tmp_path / "predictions")
    )
    cluster_size = 2
    node_rdd = spark.sparkContext.parallelize(list(range(cluster_size)), cluster_size)
    node_rdd.foreachPartition(lambda worker_num: inference(worker_num, cluster_size, args))
    lines = [
        line.split()
        for path in sorted((tmp_path / "predictions").glob("part-*"))
        for line in path.read_text().splitlines()
    ]
    assert sorted(p.name for p in (tmp_path / "predictions").glob("part-*")) == ["part-00000", "part-00001"]
    assert len(lines) == 120
    assert all(label == pred for label, pred in lines)
    assert sorted(int(label) for label, _ in lines) == sorted(labels.tolist())


def test_spark_streaming_example_trains_keras_on_a_dstream_until_stop_streaming(spark, tmp_path, tf_env):
    # TFoS's examples/mnist/estimator/mnist_spark_streaming.py with Keras in the place of the
    # Estimator (gone from TensorFlow 2.16+) and one training node: the rows of a
    # textFileStream reach tf.data through TFNode.DataFeed until the stream is stopped with
    # examples/utils/stop_streaming.py. The generator also counts the rows it read, for the
    # test to know when to stop.
    streaming = pytest.importorskip("pyspark.streaming")

    def main_fun(args, ctx):
        import os

        import numpy as np
        import tensorflow as tf

        from sparktrain.tfos import TFNode, compat

        tf_feed = TFNode.DataFeed(ctx.mgr)
        read = [0]

        def rdd_generator():
            while not tf_feed.should_stop():
                batch = tf_feed.next_batch(1)
                if len(batch) > 0:
                    example = batch[0]
                    image = np.array(example[0]).astype(np.float32) / 255.0
                    image = np.reshape(image, (8, 8, 1))
                    label = np.array(example[1]).astype(np.float32)
                    label = np.reshape(label, (1,))
                    read[0] += 1
                    with open(args.progress + ".tmp", "w") as f:
                        f.write(str(read[0]))
                    os.replace(args.progress + ".tmp", args.progress)
                    yield (image, label)
                else:
                    return

        ds = tf.data.Dataset.from_generator(
            rdd_generator,
            output_signature=(tf.TensorSpec([8, 8, 1], tf.float32), tf.TensorSpec([1], tf.float32)),
        )
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(8, 8, 1), name="image"),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(4, activation="softmax", name="prediction"),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(learning_rate=0.05),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
        )
        model.fit(ds.batch(args.batch_size), epochs=1, verbose=0)
        if ctx.job_name == "chief":
            print(f"Exporting saved_model to {args.export_dir}")
            compat.export_saved_model(model, args.export_dir, True)

    sc = spark.sparkContext
    folder = tmp_path / "stream"
    folder.mkdir()
    args = argparse.Namespace(
        batch_size=16,
        export_dir=str(tmp_path / "export"),
        progress=str(tmp_path / "progress"),
        model_dir=None,
    )
    ssc = streaming.StreamingContext(sc, 1)

    def parse(ln):
        vec = [int(x) for x in ln.split(",")]
        return (vec[1:], vec[0])

    stream = ssc.textFileStream(str(folder))
    images_labels = stream.map(parse)
    cluster = TFCluster.run(
        sc,
        main_fun,
        args,
        1,
        num_ps=0,
        input_mode=TFCluster.InputMode.SPARK,
        log_dir=args.model_dir,
        master_node="chief",
    )
    cluster.train(images_labels, feed_timeout=86400)
    ssc.start()
    try:
        rows = 0
        for k in range(3):
            images, labels = _images(300, seed=10 + k)
            lines = [
                ",".join(
                    str(v) for v in [int(label), *(np.clip(image, 0, 1) * 255).round().astype(int).tolist()]
                )
                for image, label in zip(images, labels, strict=True)
            ]
            (tmp_path / f".part-{k}").write_text("\n".join(lines) + "\n")
            (tmp_path / f".part-{k}").rename(folder / f"part-{k}")
            rows += len(lines)
            time.sleep(1.5)
        deadline = time.monotonic() + 300
        progress = tmp_path / "progress"
        while not (progress.exists() and int(progress.read_text() or 0) >= rows):
            assert time.monotonic() < deadline, "the node did not read the stream's rows"
            time.sleep(0.5)
        host, port = cluster.cluster_meta["server_addr"]
        stop = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).parent / "tfos_examples" / "stop_streaming.py"),
                host,
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert stop.returncode == 0, stop.stderr
        cluster.shutdown(ssc, timeout=300)
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    assert int(progress.read_text()) == rows
    check = (
        "import sys, numpy as np, tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "x = np.full((1, 8, 8, 1), 0.1, dtype='float32'); x[0, :4, 4:, 0] = 0.9\n"
        "print(int(np.argmax(m.signatures['serving_default'](image=tf.constant(x))['prediction'])))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check, args.export_dir], capture_output=True, text=True, timeout=300
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.strip().splitlines()[-1] == "1"
