"""The exported model as ONNX, for serving outside sparktrain (onnxruntime, Triton, any ONNX
runtime), and the inputs it takes. Runs on the driver (or any process that exports).

:func:`export_onnx` writes the ONNX model of an export folder (what :func:`sparktrain.train`
returns as ``export_dir``): the weights and the feature hashing and crossing, in standard
operators of opset 18. The graph takes, each shaped ``[batch, width]``:

- ``dense`` (float32): the spec's dense features in its order, a missing value as 0 (only when
  the spec has dense features);
- ``keys`` (int64) and ``missing`` (bool): one column per key column (the categorical columns,
  then the other columns that crosses read, each once; ``FeatureSpec.key_columns`` and the
  model's ``sparktrain.key_columns`` metadata list them): the value's 64-bit key and whether it
  is null (only for Wide&Deep, DeepFM and DCN, the models with embeddings);
- ``bag_keys_<j>`` (int64) and ``bag_present_<j>`` (bool), for the spec's multi-hot column
  ``j`` (in its order; the ``sparktrain.bag_columns`` metadata lists them), shaped
  ``[batch, values]`` with ``values`` the batch's longest list: each row's values' keys from
  the left, then padding, and which slots hold a value (for the models with embeddings).

and gives ``scores`` (float32): ``[batch, 1]`` probabilities of a binary model, ``[batch,
classes]`` of a softmax one, ``[batch, 1]`` outputs of a regression model. A value's key is
the integer itself (an unsigned 64-bit value by its bit pattern), or FNV-1a 64 of a string's
UTF-8 bytes (or of a binary value), as a signed int64; the key of a missing value is ignored.
The graph hashes keys into ids exactly as the engine does; keying strings is the one step
outside it, since no standard operator reads a string's bytes. :func:`onnx_inputs` builds every
input from Arrow data, by the engine's own code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparktrain import _checks, _native, exported, fs, storage_options
from sparktrain.errors import InvalidArgumentError, PathNotFoundError, SparktrainError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from sparktrain.training import FeatureSpec

#: The names of the ONNX model's inputs and output.
DENSE, KEYS, MISSING, SCORES = "dense", "keys", "missing", "scores"
#: The prefixes of each multi-hot column's inputs (``bag_keys_0``, ``bag_present_0``...).
BAG_KEYS, BAG_PRESENT = "bag_keys_", "bag_present_"


def export_onnx(export_dir: str, out_path: str) -> str:
    """Writes the ONNX model of the export folder ``export_dir`` to the file ``out_path`` and
    returns ``out_path``. Both may be any storage URL sparktrain reads and writes (local paths,
    ``file://``, ``hdfs://``, ``viewfs://``, ``s3://``, ``gs://``, ``abfs://``); the file appears
    whole or not at all, replacing an older one. Raises
    :class:`~sparktrain.errors.PathNotFoundError` for a missing export folder."""
    export_dir = _checks.text("export_dir", export_dir)
    out_path = _checks.text("out_path", out_path)
    try:
        _native.export_onnx(export_dir, out_path)
    except PathNotFoundError as e:
        raise exported.not_an_export(export_dir, e) from e
    return out_path


def onnx_inputs(
    model: str | FeatureSpec | _native.FeatureSpec, data: pa.RecordBatch | pa.Table
) -> dict[str, np.ndarray]:
    """The inputs of the ONNX model for ``data``, by name, ready for
    ``onnxruntime.InferenceSession.run(None, inputs)``. ``model`` is the ONNX file (any storage
    URL: its metadata holds the feature spec, and only the inputs its graph takes are given)
    or the feature spec itself (the engine's too, as ``ExportedModel.features`` gives it), which
    gives every input the spec implies: logistic regression and the MLP take ``dense`` alone. The columns are
    found by name; the label and other columns are not read."""
    import numpy as np
    import pyarrow as pa

    from sparktrain.training import FeatureSpec

    taken: list[str] | None = None
    if isinstance(model, _native.FeatureSpec):
        spec = model
    elif isinstance(model, FeatureSpec):
        spec = model.to_native()
    else:
        spec, taken = _native.onnx_signature(_checks.text("model", model))
    if isinstance(data, pa.Table):
        data = _one_batch(data)
    _checks.instance("data", data, pa.RecordBatch, "a pyarrow RecordBatch or Table")
    rows, dense, keys, missing, bags = spec.serving_inputs(data)
    out: dict[str, np.ndarray] = {}
    if spec.dense:
        out[DENSE] = dense.to_numpy().reshape(rows, len(spec.dense))
    width = len(spec.key_columns)
    if width:
        out[KEYS] = keys.to_numpy().reshape(rows, width)
        out[MISSING] = np.asarray(missing.to_numpy(zero_copy_only=False), dtype=np.bool_).reshape(rows, width)
    for j, (values, bag_keys, present) in enumerate(bags):
        out[f"{BAG_KEYS}{j}"] = bag_keys.to_numpy().reshape(rows, values)
        flags = np.asarray(present.to_numpy(zero_copy_only=False), dtype=np.bool_)
        out[f"{BAG_PRESENT}{j}"] = flags.reshape(rows, values)
    return out if taken is None else {name: value for name, value in out.items() if name in taken}


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as one record batch (its columns' chunks joined)."""
    batches = table.combine_chunks().to_batches()
    if not batches:
        import pyarrow as pa

        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return batches[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``sparktrain export-onnx EXPORT_DIR OUT``: writes the ONNX model of an export folder."""
    parser = argparse.ArgumentParser(
        prog="sparktrain export-onnx",
        description="Write the ONNX model (weights and feature hashing) of a sparktrain export folder.",
    )
    parser.add_argument("export_dir", help="the export folder (any storage URL)")
    parser.add_argument("out", help="the .onnx file to write (any storage URL)")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an object-store setting (fs.s3a.*, fs.gs.*, fs.azure.*); repeatable",
    )
    args = parser.parse_args(argv)
    try:
        options = dict(_pair(item) for item in args.conf)
    except SparktrainError as e:
        # A refused option exits 2, as argparse's own refusals and the other commands' do.
        parser.print_usage(sys.stderr)
        print(f"sparktrain export-onnx: {e}", file=sys.stderr)
        return 2
    try:
        fs.configure(options)
        export_onnx(args.export_dir, args.out)
    except SparktrainError as e:
        print(f"sparktrain export-onnx: {e}", file=sys.stderr)
        return 1
    print(args.out)
    return 0


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise InvalidArgumentError(f"--conf {item!r}: write KEY=VALUE")
    if not storage_options.is_object_store_key(key):
        prefixes = ", ".join(storage_options.KEY_PREFIXES)
        raise InvalidArgumentError(f"--conf {key}: not an object-store key (keys start with {prefixes})")
    return key, value


__all__ = [
    "BAG_KEYS",
    "BAG_PRESENT",
    "DENSE",
    "KEYS",
    "MISSING",
    "SCORES",
    "export_onnx",
    "main",
    "onnx_inputs",
]
