"""The MLflow ``pyfunc`` flavor of a sparktrain model, as :func:`sparktrain.tracking.log_model`
logs it. Runs wherever MLflow loads the model: ``mlflow.pyfunc.load_model`` on any machine, or
the Python workers of ``mlflow.pyfunc.spark_udf``.

This file travels inside the logged model (its ``code/`` folder, as ``sparktrain_pyfunc.py``),
and MLflow imports it from there: it imports nothing of sparktrain at module level, so that a
model loads where sparktrain is not installed. There it scores the model's ONNX file with
onnxruntime, keying the categorical values itself, as ``sparktrain.servable`` documents (an
integer is its own key, a string the FNV-1a 64 of its UTF-8 bytes); where sparktrain is
installed, its engine scores the export, as :func:`sparktrain.predict` does.

The model's data folder holds ``export/`` (the export: ``model.json``,
``model.safetensors``), ``model.onnx`` (its ONNX form, when it was logged with one) and
``sparktrain.json`` (what this loader needs to know).
"""

from __future__ import annotations

import json
import numbers
import os
from typing import Any

#: The name of the scores' column in ``predict``'s output, as :func:`sparktrain.predict`'s.
SCORE = "score"
#: What forces a loader: ``engine`` (sparktrain) or ``onnx`` (onnxruntime); unset, the engine
#: where sparktrain is installed.
ENGINE_VARIABLE = "SPARKTRAIN_PYFUNC_ENGINE"

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def _fnv1a(data: bytes) -> int:
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return h


def _signed(key: int) -> int:
    """A 64-bit key as the signed int64 with its bit pattern."""
    key &= _MASK
    return key - (1 << 64) if key >= 1 << 63 else key


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, which pandas puts for a missing number
    except (TypeError, ValueError):
        # pandas.NA (a nullable Int64's missing value), whose comparisons are NA themselves.
        return type(value).__name__ == "NAType"


def _whole(value: Any, column: str) -> int:
    """A number that is an integer (1 or 1.0), as an int; ``column`` names it otherwise."""
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(
            f"categorical column {column!r} holds {value!r}: its values must be integers, strings or bytes"
        )
    return int(value)


def _key(value: Any, column: str) -> int:
    """A categorical value's key: the integer (by its bit pattern), or FNV-1a 64 of the bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return _signed(_fnv1a(bytes(value)))
    if isinstance(value, str):
        return _signed(_fnv1a(value.encode("utf-8")))
    return _signed(_whole(value, column))


def _as_frame(model_input: Any) -> Any:
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        return model_input
    if hasattr(model_input, "to_pandas"):  # a pyarrow Table or RecordBatch
        return model_input.to_pandas()
    return pd.DataFrame(model_input)


def _integral_ids(frame: Any, columns: list[str]) -> Any:
    """``frame`` with each categorical column of numbers as nullable integers, which the engine
    takes: a float64 one (pandas' form of integers with a missing one) and one of objects (the
    ints and ``pandas.NA`` that MLflow's check passes on for a column of any type)."""
    import pandas as pd

    changed = {}
    for name in columns:
        if name not in frame.columns:
            continue
        column = frame[name]
        if pd.api.types.is_float_dtype(column.dtype):
            fractional = column[column.notna() & (column % 1 != 0)]
            if len(fractional):
                _whole(float(fractional.iloc[0]), name)
            changed[name] = column.astype("Int64")
        elif column.dtype == object:
            values = column.tolist()
            present = [v for v in values if not _missing(v)]
            if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in present):
                changed[name] = pd.array([None if _missing(v) else _whole(v, name) for v in values], "Int64")
    return frame.assign(**changed) if changed else frame


class _Engine:
    """Scores with sparktrain's engine, as ``sparktrain.predict`` does."""

    def __init__(self, export_dir: str) -> None:
        from sparktrain._native import ExportedModel

        self._model = ExportedModel(export_dir)
        self._keys = list(self._model.features.key_columns)

    def scores(self, frame: Any) -> list[Any]:
        import pyarrow as pa

        frame = _integral_ids(frame, self._keys)
        batch = pa.RecordBatch.from_pandas(frame, preserve_index=False)
        values = self._model.predict(batch).to_numpy(zero_copy_only=False)
        if self._model.loss == "softmax_cross_entropy":
            rows = batch.num_rows
            return [list(row) for row in values.reshape(rows, len(values) // rows if rows else 0)]
        return list(values)


class _Onnx:
    """Scores the ONNX file with onnxruntime, building its inputs here."""

    def __init__(self, path: str) -> None:
        import onnxruntime

        self._session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        meta = self._session.get_modelmeta().custom_metadata_map
        self._spec = json.loads(meta["sparktrain.features"])
        self._keys = json.loads(meta.get("sparktrain.key_columns", "[]"))
        self._bags = json.loads(meta.get("sparktrain.bag_columns", "[]"))
        self._softmax = meta.get("sparktrain.loss") == "softmax_cross_entropy"
        self._inputs = {i.name for i in self._session.get_inputs()}

    def scores(self, frame: Any) -> list[Any]:
        import numpy as np

        rows = len(frame)
        feeds: dict[str, Any] = {}
        if "dense" in self._inputs:
            columns = [frame[name].astype("float32").fillna(0.0).to_numpy() for name in self._spec["dense"]]
            feeds["dense"] = np.stack(columns, axis=1).astype(np.float32).reshape(rows, len(columns))
        if "keys" in self._inputs:
            keys = np.zeros((rows, len(self._keys)), np.int64)
            missing = np.zeros((rows, len(self._keys)), np.bool_)
            for j, name in enumerate(self._keys):
                for r, value in enumerate(frame[name].tolist()):
                    if _missing(value):
                        missing[r, j] = True
                    else:
                        keys[r, j] = _key(value, name)
            feeds["keys"], feeds["missing"] = keys, missing
        for j, name in enumerate(self._bags):
            lists = [
                [] if _missing_list(v) else [x for x in v if not _missing(x)] for v in frame[name].tolist()
            ]
            width = max([len(v) for v in lists] + [1])
            keys = np.zeros((rows, width), np.int64)
            present = np.zeros((rows, width), np.bool_)
            for r, values in enumerate(lists):
                for i, value in enumerate(values):
                    keys[r, i], present[r, i] = _key(value, name), True
            if f"bag_keys_{j}" in self._inputs:
                feeds[f"bag_keys_{j}"], feeds[f"bag_present_{j}"] = keys, present
        (scores,) = self._session.run(["scores"], feeds)
        if self._softmax:
            return [list(row) for row in scores]
        return list(scores.reshape(rows))


def _missing_list(value: Any) -> bool:
    if value is None:
        return True
    return isinstance(value, float) and value != value


class SparktrainModel:
    """A logged sparktrain model, as ``mlflow.pyfunc.load_model`` gives it: ``predict`` takes
    a pandas DataFrame (the features by name; other columns are ignored) and returns one with
    a ``score`` column: the probability of 1 for a binary model, a list of class probabilities
    for a softmax one, the output of a regression model."""

    def __init__(self, data_path: str) -> None:
        with open(os.path.join(data_path, "sparktrain.json")) as f:
            self.meta = json.load(f)
        onnx_path = os.path.join(data_path, "model.onnx")
        choice = os.environ.get(ENGINE_VARIABLE, "").strip().lower()
        if choice not in ("", "onnx", "engine"):
            raise ValueError(
                f"{ENGINE_VARIABLE}={os.environ[ENGINE_VARIABLE]!r}: use onnx or engine, or leave it unset"
            )
        scorer: _Engine | _Onnx
        if choice == "onnx":
            scorer = _Onnx(onnx_path)
        elif choice == "engine":
            scorer = _Engine(os.path.join(data_path, "export"))
        else:
            try:
                scorer = _Engine(os.path.join(data_path, "export"))
            except ImportError:
                if not os.path.exists(onnx_path):
                    raise ImportError(
                        "this sparktrain model was logged without its ONNX form: scoring it needs "
                        "sparktrain installed"
                    ) from None
                scorer = _Onnx(onnx_path)
        self.engine = "onnx" if isinstance(scorer, _Onnx) else "engine"
        self._scorer = scorer

    def get_raw_model(self) -> SparktrainModel:
        """This model, for ``PyFuncModel.get_raw_model()`` (``engine`` says which scores it)."""
        return self

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> Any:
        """The scores of ``model_input``'s rows, as a DataFrame with a ``score`` column."""
        import pandas as pd

        frame = _as_frame(model_input)
        return pd.DataFrame({SCORE: self._scorer.scores(frame)}, index=frame.index)


def _load_pyfunc(data_path: str) -> SparktrainModel:
    """MLflow's entry point for a ``loader_module`` flavor."""
    return SparktrainModel(data_path)
