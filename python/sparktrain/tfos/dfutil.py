"""TFoS's ``dfutil``: DataFrames to and from TFRecord files of ``tf.train.Example``, on
sparktrain's own TFRecord support (:func:`sparktrain.tfrecord.write` and
:func:`~sparktrain.tfrecord.read_dataframe`): no TensorFlow, and no ``tensorflow-hadoop`` jar. Runs
on the driver.

Types follow TFoS: written, integers and booleans become ``int64_list``, floats and doubles
``float_list``, strings and binaries ``bytes_list``, arrays multi-valued features (see
:mod:`sparktrain.tfrecord._types` for the rest); read back, ``int64`` features are longs,
``float`` features doubles and ``bytes`` features strings, binary for the features named in
``binary_features``, each an array when a record holds other than one value. TFoS decides
scalar or array from the first record alone; here a sample spread over all files decides.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from sparktrain import _checks, _spark

#: The DataFrames ``loadTFRecords`` made, with the folder each was read from.
_loaded: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def saveAsTFRecords(df: Any, output_dir: str) -> None:
    """Writes the DataFrame ``df`` as TFRecord files of ``tf.train.Example`` under
    ``output_dir`` (a folder that must not exist yet, as with TFoS's Hadoop output format),
    from Spark tasks."""
    from sparktrain.errors import PathExistsError
    from sparktrain.tfrecord import write

    output_dir = _checks.text("output_dir", output_dir)
    try:
        write(df, output_dir)
    except PathExistsError as e:
        raise PathExistsError(
            f"{output_dir} already exists: remove it first, or write with "
            "sparktrain.tfrecord.write(df, path, mode='overwrite')",
            path=e.path,
        ) from None


def loadTFRecords(sc: Any, input_dir: str, binary_features: Sequence[str] = ()) -> Any:
    """Reads the TFRecord files of ``tf.train.Example`` under ``input_dir`` as a DataFrame,
    one column per feature, sorted by name. ``bytes`` features become strings except those
    named in ``binary_features``, which become binary (TensorFlow stores both alike)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from sparktrain.tfrecord import read_dataframe

    input_dir = _checks.text("input_dir", input_dir)
    if isinstance(binary_features, str) or not isinstance(binary_features, Sequence):
        raise _checks.refuse("binary_features", binary_features, "must be a list of feature names")
    binary = set(binary_features)
    session = _spark.session(sc)
    df = read_dataframe(session, input_dir)

    def tfos_type(name: str, dt: Any) -> Any:
        if isinstance(dt, T.ArrayType):
            return T.ArrayType(tfos_type(name, dt.elementType))
        if isinstance(dt, T.StringType | T.BinaryType):
            return T.BinaryType() if name in binary else T.StringType()
        if isinstance(dt, T.FloatType | T.DoubleType):
            return T.DoubleType()
        if isinstance(dt, T.IntegralType | T.BooleanType):
            return T.LongType()
        return dt

    columns = [
        F.col(f"`{f.name}`").cast(tfos_type(f.name, f.dataType)).alias(f.name)
        for f in sorted(df.schema.fields, key=lambda f: f.name)
    ]
    loaded = df.select(*columns)
    _loaded[loaded] = input_dir
    return loaded


def isLoadedDF(df: Any) -> bool:
    """True when ``df`` is a DataFrame that :func:`loadTFRecords` returned."""
    try:
        return df in _loaded
    except TypeError:  # not weakly referenceable, so never registered
        return False


__all__ = [
    "isLoadedDF",
    "loadTFRecords",
    "saveAsTFRecords",
]
