"""What runs in the Python workers for :class:`~sparktrain.tfos.pipeline.TFModel`: a
single-node TensorFlow that scores a partition with a SavedModel's signature.

A worker loads each model once and keeps it for its later partitions (PySpark reuses its
Python workers), as TFoS does.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

from sparktrain.errors import InvalidArgumentError

#: ``(export_dir, tag_set, signature key, input tensors, output tensors, batch size)``.
ModelSpec = tuple[str, "str | None", str, list[str], list[str], int]

#: The signatures this worker loaded, by ``(export_dir, tag_set, signature key)``, with the
#: model object that owns each (a signature does not keep its model alive).
_loaded: dict[tuple[str, str | None, str], tuple[Any, Any]] = {}


def _signature(export_dir: str, tag_set: str | None, key: str) -> Any:
    cached = _loaded.get((export_dir, tag_set, key))
    if cached is None:
        import tensorflow as tf

        tags = tag_set.split(",") if tag_set else None
        model = tf.saved_model.load(export_dir, tags=tags)
        cached = (model, model.signatures[key])
        _loaded[(export_dir, tag_set, key)] = cached
    return cached[1]


def _batches(rows: Iterable[Any], size: int, width: int) -> Iterator[list[list[Any]]]:
    columns: list[list[Any]] = [[] for _ in range(width)]
    for row in rows:
        for i in range(width):
            columns[i].append(row[i])
        if len(columns[0]) >= size:
            yield columns
            columns = [[] for _ in range(width)]
    if columns[0]:
        yield columns


def run_model(rows: Iterable[Any], spec: ModelSpec, tf_args: Any) -> Iterator[tuple[Any, ...]]:
    """Scores ``rows`` (tuples of the input columns) in batches; yields one tuple of output
    values (plain Python values) per row, in order."""
    import tensorflow as tf

    if isinstance(tf_args, list):
        sys.argv = list(tf_args)
    export_dir, tag_set, key, inputs, outputs, batch_size = spec
    predict = _signature(export_dir, tag_set, key)
    specs = {name: t for name, t in predict.structured_input_signature[1].items()}
    for name in inputs:
        if name not in specs:
            raise InvalidArgumentError(
                f"input_mapping: {name!r} is not an input of signature {key!r} in {export_dir}: "
                f"its inputs are {sorted(specs)}"
            )
    for columns in _batches(rows, batch_size, len(inputs)):
        feed = {}
        for name, values in zip(inputs, columns, strict=True):
            expected = specs[name]
            tensor = tf.constant(values, dtype=expected.dtype)
            shape = [len(values), *expected.shape[1:]]
            if None not in shape and tensor.shape != shape:
                tensor = tf.reshape(tensor, shape)  # Spark holds arrays flat
            feed[name] = tensor
        predictions = predict(**feed)
        missing = [name for name in outputs if name not in predictions]
        if missing:
            raise InvalidArgumentError(
                f"output_mapping: {missing} are not outputs of signature {key!r} in {export_dir}: "
                f"its outputs are {sorted(predictions)}"
            )
        values = [predictions[name].numpy().tolist() for name in outputs]
        for out in values:
            if len(out) != len(columns[0]):
                raise InvalidArgumentError(
                    f"output_mapping: signature {key!r} returned {len(out)} values for "
                    f"{len(columns[0])} input rows; map only outputs with one value per row"
                )
        yield from zip(*values, strict=True)
