"""sparktrain.ml and sparktrain.embeddings on real Spark (local-cluster) and S3 (moto's server):
a Pipeline of Spark's transformers and sparktrain's Classifier is fitted, scores as
``sparktrain.predict`` does, saves and loads; trained with sharded tables, it scores by looking
up the rows it needs, to the outputs of its twin trained with whole tables; a multi-class
model saves to S3 and scores the same from there; CrossValidator picks a learning rate by two
real AUCs; a DCN Regressor in TrainValidationSplit fits a number, scores as its export does
and saves; the embedding tables read in Spark tasks equal the exported weights read with the
``safetensors`` package; bad params fail on the driver before any Spark job.
"""

from __future__ import annotations

import logging
import uuid

import numpy as np
import pandas as pd
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import (
    BinaryClassificationEvaluator,
    MulticlassClassificationEvaluator,
    RegressionEvaluator,
)
from pyspark.ml.feature import StringIndexer, VectorAssembler
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder, TrainValidationSplit
from pyspark.sql import functions as F

import sparktrain as st
from sparktrain.errors import ClusterError, InvalidArgumentError, PathExistsError, PathNotFoundError
from sparktrain.ml import Classifier, ClassifierModel, Regressor, RegressorModel

# One xdist worker runs them all, so the module's fitted models are fitted once.
pytestmark = pytest.mark.xdist_group("ml")

ROWS = 1_200
DENSE = ["x1", "x2", "x3"]
BUCKETS = 32
QUIET = {"log": False}


def rows(seed: int = 5) -> pd.DataFrame:
    """Three dense columns, two string columns with an effect per value, a yes/no outcome and
    a three-class label, all learnable."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, 3))
    shop = rng.integers(0, 12, ROWS)
    city = rng.integers(0, 6, ROWS)
    effect = np.linspace(-2.0, 2.0, 12)[shop] + np.linspace(-1.0, 1.0, 6)[city]
    logit = 2.0 * x[:, 0] - 1.5 * x[:, 1] + effect
    yes = rng.random(ROWS) < 1.0 / (1.0 + np.exp(-logit))
    return pd.DataFrame(
        {
            "row": np.arange(ROWS),
            "x1": x[:, 0],
            "x2": x[:, 1],
            "x3": x[:, 2],
            "shop": [f"shop-{s}" for s in shop],
            "city": [f"city-{c}" for c in city],
            "outcome": np.where(yes, "yes", "no"),
            "klass": np.digitize(x[:, 0] + 0.5 * x[:, 2], [-0.5, 0.5]).astype(np.int64),
        }
    )


@pytest.fixture(scope="module")
def frame(spark):
    return spark.createDataFrame(rows()).repartition(2).cache()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ml-models"))


def pipeline(**params) -> Pipeline:
    """StringIndexer (the label), VectorAssembler (the dense features) and a Classifier over
    them and two hashed string columns, with ``params`` over the shared ones."""
    shared = {
        "categoricalCols": ["shop", "city"],
        "buckets": BUCKETS,
        "hidden": [8],
        "dim": 4,
        "batchSize": 32,
        "numWorkers": 2,
        "trainOptions": QUIET,
    }
    return Pipeline(
        stages=[
            StringIndexer(inputCol="outcome", outputCol="label", stringOrderType="alphabetAsc"),
            VectorAssembler(inputCols=DENSE, outputCol="features"),
            Classifier(**{**shared, **params}),
        ]
    )


@pytest.fixture(scope="module")
def pipeline_model(frame, model_dir):
    """A Wide&Deep pipeline (:func:`pipeline`), fitted once for the module."""
    return pipeline(model="wide_deep", optimizer="adam", learningRate=0.02, epochs=3, modelDir=model_dir).fit(
        frame
    )


def scored(df) -> pd.DataFrame:
    """``df`` on the driver, by row, with its vectors as NumPy arrays."""
    table = df.select("row", "rawPrediction", "probability", "prediction").toPandas().sort_values("row")
    for column in ("rawPrediction", "probability"):
        table[column] = [v.toArray() for v in table[column]]
    return table.reset_index(drop=True)


def test_a_pipeline_scores_like_predict_and_scores_the_same_after_save_and_load(
    spark, frame, pipeline_model, tmp_path
):
    classifier = pipeline_model.stages[-1]
    assert isinstance(classifier, ClassifierModel)
    assert classifier.getNumClasses() == 2  # from StringIndexer's label attributes
    assert classifier.numFeatures == 3
    assert classifier.trainResult.fit.examples == 3 * ROWS
    out = pipeline_model.transform(frame)
    assert out.columns[-3:] == ["rawPrediction", "probability", "prediction"]
    ours = scored(out)
    probability = np.stack(ours["probability"])
    raw = np.stack(ours["rawPrediction"])
    np.testing.assert_allclose(probability.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    p = probability[:, 1]
    np.testing.assert_allclose(raw[:, 1], np.log(p / (1 - p)), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(raw[:, 0], -raw[:, 1])
    np.testing.assert_array_equal(ours["prediction"], (p > 0.5).astype(float))

    # sparktrain.predict on the same rows, the vector's values as the columns the model names.
    renamed = frame.select(
        "row", "shop", "city", *(F.col(c).alias(f"features_{i}") for i, c in enumerate(DENSE))
    )
    theirs = st.predict(spark, classifier.exportDir, renamed).toPandas().sort_values("row")
    np.testing.assert_array_equal(p, theirs["score"].to_numpy().astype(np.float64))

    auc = BinaryClassificationEvaluator().evaluate(out)
    assert 0.8 < auc <= 1.0, auc
    strict = scored(pipeline_model.copy({classifier.threshold: 0.9}).transform(frame))
    np.testing.assert_array_equal(strict["prediction"], (p > 0.9).astype(float))

    path = str(tmp_path / "pipeline")
    pipeline_model.write().save(path)
    stage = next((tmp_path / "pipeline" / "stages").glob("*Classifier*"))
    assert sorted(p.name for p in (stage / "model").iterdir()) == ["model.json", "model.safetensors"]
    loaded = PipelineModel.load(path)
    assert isinstance(loaded.stages[-1], ClassifierModel)
    assert loaded.stages[-1].exportDir.endswith("/model")
    again = scored(loaded.transform(frame))
    np.testing.assert_array_equal(np.stack(again["probability"]), probability)
    np.testing.assert_array_equal(again["prediction"], ours["prediction"])

    # A loaded model saved over the path it was loaded from keeps its files.
    alone = str(tmp_path / "classifier")
    classifier.write().save(alone)
    ClassifierModel.load(alone).write().overwrite().save(alone)
    assert sorted(p.name for p in (tmp_path / "classifier" / "model").iterdir()) == [
        "model.json",
        "model.safetensors",
    ]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("classifier")) == ["classifier"]
    resaved = scored(ClassifierModel.load(alone).transform(pipeline_model.stages[1].transform(frame)))
    np.testing.assert_array_equal(resaved["prediction"], ours["prediction"])
    # A PipelineModel's writer deletes the folder before its stages save: refused, not emptied.
    with pytest.raises(PathNotFoundError, match="save it to another path"):
        loaded.write().overwrite().save(path)


def test_a_model_with_sharded_tables_scores_by_lookup_as_its_replicated_twin_does(frame, model_dir, tmp_path):
    """Trained with its tables sharded, a Classifier scores each partition with the embedding
    rows it needs, looked up where they are stored (a cogroup in the plan, no task loading the
    tables), through a VectorAssembler's vectors, to the outputs of the same model trained
    with its tables whole on every trainer; saved and loaded, it still does."""

    def fitted(shard_tables: str) -> PipelineModel:
        return pipeline(
            model="deep_fm",
            optimizer="adagrad",
            learningRate=0.05,
            epochs=2,
            shardTables=shard_tables,
            modelDir=f"{model_dir}/tables-{shard_tables}",
            trainOptions={**QUIET, "shuffle_buffer": 0},
        ).fit(frame)

    whole, sharded = fitted("off"), fitted("on")
    assert st.fs.exists(f"{sharded.stages[-1].exportDir}/tables.json")
    expected = scored(whole.transform(frame))
    out = sharded.transform(frame)
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "CoGroup" in plan, plan
    assert "CoGroup" not in whole.transform(frame)._jdf.queryExecution().executedPlan().toString()
    for model in (sharded, _saved_and_loaded(sharded, tmp_path / "sharded")):
        ours = scored(model.transform(frame))
        np.testing.assert_array_equal(ours["row"], expected["row"])
        np.testing.assert_allclose(
            np.stack(ours["probability"]), np.stack(expected["probability"]), rtol=0, atol=1e-5
        )
        np.testing.assert_allclose(
            np.stack(ours["rawPrediction"]), np.stack(expected["rawPrediction"]), rtol=1e-4, atol=1e-4
        )
        p = np.stack(ours["probability"])[:, 1]
        np.testing.assert_array_equal(ours["prediction"], (p > 0.5).astype(float))
    auc = BinaryClassificationEvaluator().evaluate(out)
    assert 0.8 < auc <= 1.0, auc


def _saved_and_loaded(model: PipelineModel, path) -> PipelineModel:
    model.write().save(str(path))
    return PipelineModel.load(str(path))


@pytest.fixture(scope="module")
def multiclass(frame, model_dir):
    """An MLP over a list of columns with three classes, and its estimator."""
    classifier = Classifier(
        featuresCol=DENSE,  # a list of columns, as xgboost.spark's features_col takes
        labelCol="klass",
        model="mlp",
        hidden=[16],
        learningRate=0.02,
        batchSize=32,
        epochs=3,
        numWorkers=2,
        modelDir=model_dir,
        trainOptions=QUIET,
    )
    return classifier, classifier.fit(frame)


def test_a_multiclass_model_predicts_the_most_probable_of_its_classes(frame, multiclass):
    classifier, model = multiclass
    assert classifier.getFeaturesCols() == DENSE
    assert model.getNumClasses() == 3  # the largest label plus one
    ours = scored(model.transform(frame))
    probability = np.stack(ours["probability"])
    assert probability.shape == (ROWS, 3)
    np.testing.assert_allclose(probability.sum(axis=1), 1.0, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours["prediction"], probability.argmax(axis=1).astype(float))
    # Log-probabilities, a saturated one held at log(1e-12) rather than -inf.
    logits = np.log(np.clip(probability, 1e-12, None))
    np.testing.assert_allclose(np.stack(ours["rawPrediction"]), logits, rtol=1e-12)
    # The model trained on three columns reads the same values from a vector column too.
    vectors = VectorAssembler(inputCols=DENSE, outputCol="vec").transform(frame)
    from_vector = scored(model.copy().setFeaturesCol("vec").transform(vectors))
    np.testing.assert_array_equal(np.stack(from_vector["probability"]), probability)
    evaluator = MulticlassClassificationEvaluator(labelCol="klass", metricName="accuracy")
    accuracy = evaluator.evaluate(model.transform(frame))
    assert accuracy > 0.75, accuracy


# The HDFS case takes hdfs_url at run time, which the automatic marking cannot see.
@pytest.fixture(params=[pytest.param("hdfs", marks=pytest.mark.hdfs), "s3"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The root of a remote store: MiniDFS, or a bucket of the S3 server."""
    return request.getfixturevalue("hdfs_url" if request.param == "hdfs" else "s3_url")


def test_a_model_saves_to_a_remote_store_and_scores_the_same_from_there(frame, multiclass, store_url):
    classifier, model = multiclass
    url = f"{store_url}/ml/klass-{uuid.uuid4().hex[:8]}"
    model.write().save(url)
    with pytest.raises(PathExistsError):
        model.write().save(url)
    model.write().overwrite().save(url)
    assert sorted(f.path.rsplit("/", 1)[1] for f in st.fs.ls(f"{url}/model")) == [
        "model.json",
        "model.safetensors",
    ]
    loaded = ClassifierModel.load(url)
    assert loaded.exportDir == f"{url}/model"
    assert loaded.getFeaturesCols() == DENSE
    assert loaded.getNumClasses() == 3
    expected = np.stack(scored(model.transform(frame))["probability"])
    np.testing.assert_array_equal(np.stack(scored(loaded.transform(frame))["probability"]), expected)

    # The estimator saves too, params and all.
    classifier.write().save(f"{url}-estimator")
    assert Classifier.load(f"{url}-estimator").extractParamMap() == classifier.extractParamMap()


def test_cross_validator_picks_a_learning_rate_by_two_real_aucs(frame, model_dir):
    data = VectorAssembler(inputCols=DENSE, outputCol="features").transform(
        frame.withColumn("label", (F.col("outcome") == "yes").cast("double"))
    )
    classifier = Classifier(
        model="logistic_regression",
        optimizer="sgd",
        batchSize=64,
        numWorkers=2,
        modelDir=model_dir,
        trainOptions=QUIET,
    )
    rates = [0.0005, 0.5]
    grid = ParamGridBuilder().addGrid(classifier.learningRate, rates).build()
    evaluator = BinaryClassificationEvaluator()
    cv = CrossValidator(
        estimator=classifier, estimatorParamMaps=grid, evaluator=evaluator, numFolds=2, seed=3
    )
    fitted = cv.fit(data)
    assert len(fitted.avgMetrics) == 2
    assert all(0.5 < m <= 1.0 for m in fitted.avgMetrics), fitted.avgMetrics
    assert fitted.avgMetrics[0] != fitted.avgMetrics[1]
    best = fitted.bestModel
    assert isinstance(best, ClassifierModel)
    assert best.getLearningRate() == rates[int(np.argmax(fitted.avgMetrics))]
    assert evaluator.evaluate(best.transform(data)) > 0.7


def test_embeddings_are_the_exported_tables(spark, pipeline_model):
    # Imported here: the PySpark 3.5 environment collects this file without the package.
    from safetensors.numpy import load_file

    export_dir = pipeline_model.stages[-1].exportDir
    weights = load_file(export_dir.removeprefix("file://") + "/model.safetensors")
    tables = st.embeddings(spark, export_dir).toPandas()
    assert sorted(tables["table"].unique()) == ["deep/embeddings", "wide/ids"]
    for name, dim in (("deep/embeddings", 4), ("wide/ids", 1)):
        table = tables[tables["table"] == name].sort_values("id")
        assert weights[name].shape == (2 * BUCKETS, dim)
        np.testing.assert_array_equal(table["id"], np.arange(2 * BUCKETS))
        np.testing.assert_array_equal(np.stack(table["vector"]), weights[name])
        # Both columns share one id space: shop owns its first BUCKETS ids, city the next.
        assert list(table["feature"]) == ["shop"] * BUCKETS + ["city"] * BUCKETS
        np.testing.assert_array_equal(table["bucket"], np.tile(np.arange(BUCKETS), 2))
    wide = st.embeddings(spark, export_dir, "wide/ids", rows_per_batch=5)
    assert wide.count() == 2 * BUCKETS
    assert wide.rdd.getNumPartitions() == 1  # one task per weights file
    with pytest.raises(InvalidArgumentError, match=r"^table='deep'"):
        st.embeddings(spark, export_dir, "deep")


def test_a_ragged_vector_column_fails_the_fit_naming_it_without_a_restart(spark, model_dir, caplog):
    ragged = spark.createDataFrame(
        [([1.0, 2.0] if i % 3 else [1.0], i % 2) for i in range(30)], "features array<double>, label long"
    )
    expected = r"featuresCol='features': row \d+ of a batch holds \d values, where the model takes \d"
    with caplog.at_level(logging.WARNING, logger="sparktrain"), pytest.raises(ClusterError, match=expected):
        Classifier(numWorkers=2, modelDir=f"{model_dir}/ragged", trainOptions=QUIET).fit(ragged)
    # The rows are the same in every generation: no restart reads them otherwise.
    assert "restart 1 of" not in caplog.text
    assert "a restart cannot fix bad input" in caplog.text


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([0.3, 0.7], r"^labelCol='label': holds 0\.[37], not a class id .*use a Regressor"),
        ([-1.0, 1.0], r"^labelCol='label': holds -1\.0: class ids start at 0"),
    ],
)
def test_labels_that_are_not_class_ids_are_refused_when_the_classes_are_counted(spark, labels, expected):
    rows = spark.createDataFrame(
        [([float(i)], labels[i % 2]) for i in range(10)], "features array<double>, label double"
    )
    with pytest.raises(InvalidArgumentError, match=expected):
        Classifier(trainOptions=QUIET).fit(rows)


def test_more_classes_than_a_binary_model_has_are_refused_before_training(spark):
    rows = spark.createDataFrame(
        [([float(i)], f"s{i}", i % 3) for i in range(9)], "features array<double>, shop string, label long"
    )
    for params in ({}, {"numClasses": 3}):
        with pytest.raises(InvalidArgumentError, match=r"^numClasses=3: dcn is a binary model"):
            Classifier(model="dcn", categoricalCols=["shop"], trainOptions=QUIET, **params).fit(rows)


def test_bad_params_fail_on_the_driver_before_any_spark_job(spark, frame):
    with pytest.raises(InvalidArgumentError, match=r"^batchSize=0"):
        Classifier(batchSize=0)
    with pytest.raises(InvalidArgumentError, match=r"^model='svm'"):
        Classifier(model="svm")
    classifier = Classifier()
    with pytest.raises(InvalidArgumentError, match=r"^learningRate=-1\.0"):
        classifier.copy({classifier.learningRate: -1.0})
    data = VectorAssembler(inputCols=DENSE, outputCol="features").transform(frame)
    cases = {
        "categoricalCols": Classifier(model="wide_deep"),
        "featuresCol": Classifier(featuresCol="vector"),
        "labelCol": Classifier(labelCol="outcome"),
        "trainOptions": Classifier(trainOptions={"batch_size": 3}),
        "dim": Classifier(model="mlp", dim=4),
        "bogus": Classifier(trainOptions={"bogus": 1}),
    }
    spark.sparkContext.setJobGroup("sparktrain-bad-params", "fits that must not start")
    try:
        for name, estimator in cases.items():
            with pytest.raises(InvalidArgumentError, match=name):
                estimator.fit(data)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup("sparktrain-bad-params") == []


def test_a_regressor_in_train_validation_split_fits_a_number_and_saves(spark, frame, model_dir, tmp_path):
    """The target is a smooth function of the dense columns and the shop; the DCN regressor's
    prediction column is its exported model's output, and RegressionEvaluator reads it."""
    target = frame.withColumn("target", 3.0 * F.col("x1") - 2.0 * F.col("x2") + F.length("shop") / 4.0)
    assembled = VectorAssembler(inputCols=DENSE, outputCol="features").transform(target)
    regressor = Regressor(
        model="dcn",
        categoricalCols=["shop"],
        labelCol="target",
        buckets=BUCKETS,
        hidden=[16],
        dim=4,
        learningRate=0.01,
        batchSize=32,
        epochs=6,
        numWorkers=2,
        modelDir=model_dir,
        trainOptions={**QUIET, "cross_layers": 2},
    )
    evaluator = RegressionEvaluator(labelCol="target", metricName="rmse")
    grid = ParamGridBuilder().addGrid(regressor.learningRate, [0.01, 0.0001]).build()
    split = TrainValidationSplit(estimator=regressor, estimatorParamMaps=grid, evaluator=evaluator, seed=3)
    tuned = split.fit(assembled)
    best = tuned.bestModel
    assert isinstance(best, RegressorModel)
    assert best.getOrDefault(best.learningRate) == 0.01
    assert min(tuned.validationMetrics) < 0.5 * max(tuned.validationMetrics)
    out = best.transform(assembled)
    rmse = evaluator.evaluate(out)
    spread = assembled.select(F.stddev("target")).first()[0]
    assert rmse < 0.25 * spread, (rmse, spread)

    # The prediction is the exported model's output, row for row.
    renamed = assembled.select("row", "shop", *(F.col(c).alias(f"features_{i}") for i, c in enumerate(DENSE)))
    theirs = st.predict(spark, best.exportDir, renamed).toPandas().sort_values("row")
    ours = out.select("row", "prediction").toPandas().sort_values("row")
    np.testing.assert_allclose(ours["prediction"], theirs["score"].astype(np.float64), rtol=0, atol=1e-6)

    path = str(tmp_path / "regressor")
    best.write().save(path)
    again = RegressorModel.load(path).transform(assembled).select("row", "prediction").toPandas()
    np.testing.assert_array_equal(
        again.sort_values("row")["prediction"].to_numpy(), ours["prediction"].to_numpy()
    )
    with pytest.raises(InvalidArgumentError, match="'classes' is set by the Regressor"):
        Regressor(trainOptions={"classes": 3}).fit(assembled)


def test_models_saved_by_an_earlier_sparktrain_load_and_score_the_same(spark, tmp_path):
    """Spark ML persistence stores each stage's class by its module path: a PipelineModel with
    a ClassifierModel and a RegressorModel saved by sparktrain 0.1.0 before its package was
    split into layers (tests/golden/make_ml_models.py) load and score as they did then."""
    import json
    import shutil
    from pathlib import Path

    from golden.make_ml_models import frame as golden_frame

    saved = Path(__file__).parent / "golden" / "ml"
    shutil.copytree(saved, tmp_path / "ml")
    expected = json.loads((saved / "scores.json").read_text())
    df = golden_frame(spark)

    pipeline = PipelineModel.load(str(tmp_path / "ml" / "pipeline"))
    assert isinstance(pipeline.stages[-1], ClassifierModel)
    scored = pipeline.transform(df).select("row", "probability").toPandas().sort_values("row")
    probability = np.array([v.toArray()[1] for v in scored["probability"]])
    np.testing.assert_allclose(probability, expected["probability"], rtol=0, atol=1e-6)

    regressor = RegressorModel.load(str(tmp_path / "ml" / "regressor"))
    amounts = regressor.transform(df).select("row", "prediction").toPandas().sort_values("row")
    np.testing.assert_allclose(amounts["prediction"].to_numpy(), expected["prediction"], rtol=0, atol=1e-5)
