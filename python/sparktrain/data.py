"""Training data where it lives, for any framework: TFRecord or Parquet files on any storage URL
(``hdfs://``, ``s3://``, ``gs://``, ``abfs://``, local), read by sparktrain's native client (no
JVM, no libhdfs, no ``tensorflow-io``) as Arrow batches, NumPy dicts, PyTorch tensors or a
``tf.data.Dataset``.

.. code-block:: python

    from sparktrain.data import Dataset

    data = Dataset("hdfs://nn:8020/data/train", batch_size=512, shuffle_buffer=65536)
    for batch in data.numpy(epoch=0): ...                          # {"label": array, ...}
    loader = torch.utils.data.DataLoader(data.torch(), batch_size=None, num_workers=2)
    model.fit(data.tf(), epochs=3)                                 # Keras

**Sharding.** By default (``shard="auto"``) a reader takes its share by the process's rank in
a distributed job: the ``RANK`` and ``WORLD_SIZE`` that sparktrain's launcher (and
``torchrun``) set, so each trainer of ``Cluster.run`` reads a different part. Inside PyTorch's
``DataLoader`` workers the share is split again by worker. A share is whole files when there
are at least as many files as readers (file ``i`` to reader ``i mod n``), else every reader
reads every file and keeps every n-th row. ``shard=(index, count)`` names the share, ``None``
reads everything. ``dynamic=True`` takes files one at a time from the driver's work queue
instead (``Cluster.run(..., work=path)``), so fast trainers read more; it needs the trainer's
context and runs in the trainer's own process.

**Order.** Files come in a new order every epoch and rows are shuffled in windows of
``shuffle_buffer`` rows, both drawn from ``seed``, the epoch and the share, so a rerun reads the
same batches. ``shuffle_buffer=0`` keeps the files' order.

**Partition columns.** Files in ``col=value/`` folders (``tfrecord.write(...,
partition_by=...)``, Spark's ``partitionBy``) get the folders' values as columns after the
records' own, typed as Spark infers them (int, long, double, date, else string; a given
``schema`` may name their types), as ``read_dataframe`` reads them.

**Types.** Numbers come as 1-D arrays (missing values as 0), strings and bytes as lists; a list
column (``ids: list<int64>``) is ragged: ``(values, offsets)`` in NumPy and PyTorch (what
``torch.nn.EmbeddingBag`` takes), a ``tf.RaggedTensor`` in ``tf.data``.

**Cores.** ``threads=n`` decodes TFRecords on ``n`` cores (a trainer that has them to spare);
the rows and their order do not change.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from sparktrain import _checks, _native, fs
from sparktrain import _partitions as partitioning
from sparktrain.errors import InvalidArgumentError, PathNotFoundError, SchemaError

#: Rows each file read hands over before they are regrouped into batches.
_READ_BATCH = 8192
#: Seconds a trainer waits for the driver's work queue to answer.
_QUEUE_TIMEOUT = 300.0


class Dataset:
    """A TFRecord or Parquet dataset (a folder, file or glob) read in batches of
    ``batch_size`` rows (see the module notes for sharding, order and types)."""

    def __init__(
        self,
        path: str,
        *,
        batch_size: int = 1024,
        schema: pa.Schema | None = None,
        columns: Sequence[str] | None = None,
        shuffle_buffer: int = 0,
        seed: int = 0,
        shard: str | tuple[int, int] | None = "auto",
        dynamic: bool = False,
        drop_remainder: bool = False,
        compression: str | None = None,
        record_type: str = "Example",
        threads: int = 1,
        ctx: Any = None,
    ) -> None:
        self.path = _checks.text("path", path)
        self.batch_size = _checks.integer("batch_size", batch_size, minimum=1)
        self.shuffle_buffer = _checks.integer("shuffle_buffer", shuffle_buffer, minimum=0)
        self.seed = _checks.integer("seed", seed, minimum=0)
        self.drop_remainder = bool(drop_remainder)
        self.compression = compression
        self.record_type = record_type
        self.threads = _checks.integer("threads", threads, minimum=1)
        self.dynamic = bool(dynamic)
        self.ctx = ctx
        if self.dynamic and ctx is None:
            raise InvalidArgumentError(
                "dynamic=True takes files from the driver's work queue: pass ctx=<the trainer's ctx> "
                "(and Cluster.run(..., work=path))"
            )
        self._shard = _shard_of(shard)
        files = fs.expand_inputs(self.path)
        if not files:
            raise PathNotFoundError(f"no input files under {self.path}", path=self.path)
        self.files = [f.path for f in files]
        self.parquet = all(f.endswith(".parquet") for f in self.files)
        if not self.parquet and any(f.endswith(".parquet") for f in self.files):
            raise InvalidArgumentError(f"path {self.path!r}: mixes Parquet and TFRecord files")
        base = partitioning.dataset_root(self.path)
        relative = [f[len(base) + 1 :] if f.startswith(base + "/") else "" for f in self.files]
        found, values = partitioning.discover(relative)
        #: Each file's ``col=value/`` folder values, by URL.
        self._partition_values = dict(zip(self.files, values, strict=True))
        full = schema if schema is not None else self._infer_schema()
        # The folders' columns come last, as Spark reads them; a given schema may type them.
        by_folder = [full.field(f.name) if f.name in full.names else f for f in found]
        full = pa.schema([f for f in full if f.name not in found.names] + by_folder)
        if columns is not None:
            missing = [c for c in columns if c not in full.names]
            if missing:
                raise InvalidArgumentError(f"columns {missing}: not in the data ({', '.join(full.names)})")
            full = pa.schema([full.field(c) for c in columns])
        self.schema: pa.Schema = full
        #: The columns the files themselves hold, read from each one.
        self._record_schema = pa.schema([f for f in full if f.name not in found.names])

    # --- Arrow ------------------------------------------------------------------------------

    def batches(self, epoch: int = 0, worker: tuple[int, int] = (0, 1)) -> Iterator[pa.RecordBatch]:
        """One pass over this reader's share as Arrow record batches of ``batch_size`` rows
        (the last one shorter unless ``drop_remainder``). ``worker`` splits the share again
        (``(id, count)`` of PyTorch's DataLoader workers)."""
        index, count = self._share(worker)
        rng = random.Random(hash((self.seed, epoch, index, count)))
        rows = self._rows(epoch, index, count, rng)
        if self.shuffle_buffer > 1:
            rows = _shuffled(rows, self.shuffle_buffer, rng)
        yield from _rebatched(rows, self.batch_size, self.drop_remainder)

    def _share(self, worker: tuple[int, int]) -> tuple[int, int]:
        # Worker w of rank r takes every (count*workers)-th file from r + w*count, so the
        # rank's files are the same ones whatever number of DataLoader workers splits them.
        index, count = self._shard if self._shard is not None else (0, 1)
        worker_id, workers = worker
        return index + worker_id * count, count * workers

    def _rows(self, epoch: int, index: int, count: int, rng: random.Random) -> Iterator[pa.RecordBatch]:
        if self.dynamic:
            yield from self._queued(epoch)
            return
        files = list(self.files)
        if self.shuffle_buffer > 1:
            random.Random(hash((self.seed, epoch))).shuffle(files)  # one order for every reader
        if len(files) >= count:
            for url in files[index::count]:
                yield from self._read(url)
            return
        seen = 0  # fewer files than readers: every reader keeps every count-th row
        for url in files:
            for batch in self._read(url):
                first = (index - seen) % count
                keep = list(range(first, batch.num_rows, count))
                seen += batch.num_rows
                if keep:
                    yield batch.take(pa.array(keep, pa.int64()))

    def _queued(self, epoch: int) -> Iterator[pa.RecordBatch]:
        client = self.ctx.control_client()
        while (url := client.next_work(self.ctx.rank, epoch, _QUEUE_TIMEOUT)) is not None:
            yield from self._read(url)

    def _read(self, url: str) -> Iterator[pa.RecordBatch]:
        batches = self._read_records(url)
        if len(self._record_schema) == len(self.schema):
            yield from batches
            return
        folder = self._partition_values.get(url, {})
        for batch in batches:
            columns = [
                batch.column(field.name)
                if field.name in self._record_schema.names
                else partitioning.constant_column(folder.get(field.name), field.type, batch.num_rows)
                for field in self.schema
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _read_records(self, url: str) -> Iterator[pa.RecordBatch]:
        if self.parquet:
            yield from _parquet_batches(url, self._record_schema)
            return
        reader = _native.ExampleReader(
            url,
            schema=self._record_schema,
            batch_size=_READ_BATCH,
            compression=self.compression,
            record_type=self.record_type,
            threads=self.threads,
        )
        while (batch := reader.next_batch()) is not None:
            yield batch

    def _infer_schema(self) -> pa.Schema:
        if self.parquet:
            import pyarrow.parquet as pq

            return pq.read_schema(_parquet_source(self.files[0]))
        return _native.infer_example_schema(self.path, self.compression, record_type=self.record_type)

    # --- NumPy, PyTorch, TensorFlow ---------------------------------------------------------

    def numpy(self, epoch: int = 0, worker: tuple[int, int] = (0, 1)) -> Iterator[dict[str, Any]]:
        """:meth:`batches` as dicts of NumPy arrays (see the module notes for the types)."""
        for batch in self.batches(epoch, worker):
            yield {name: _numpy_column(batch.column(name)) for name in batch.schema.names}

    def torch(self) -> Any:
        """A ``torch.utils.data.IterableDataset`` of batches as dicts of tensors, split across
        the ``DataLoader``'s workers; use it with ``DataLoader(dataset, batch_size=None)`` and
        call its ``set_epoch(n)`` before each epoch, as with a ``DistributedSampler``."""
        return _torch_dataset(self)

    def tf(self, epoch: int | None = None) -> Any:
        """A ``tf.data.Dataset`` of batches as dicts of tensors (list columns as
        ``tf.RaggedTensor``). Each iteration (each Keras epoch) is a new epoch of the reader,
        unless ``epoch`` fixes one."""
        import tensorflow as tf

        signature = {f.name: _tf_spec(tf, f.type) for f in self.schema}
        epochs = iter(range(1 << 62)) if epoch is None else None

        def generate() -> Iterator[dict[str, Any]]:
            current = epoch if epoch is not None else next(epochs)  # type: ignore[arg-type]
            for batch in self.batches(current):
                yield {name: _tf_value(tf, batch.column(name)) for name in batch.schema.names}

        return tf.data.Dataset.from_generator(generate, output_signature=signature)


def _shard_of(shard: object) -> tuple[int, int] | None:
    """``(index, count)`` of this reader; ``auto`` reads ``RANK`` and ``WORLD_SIZE``."""
    if shard is None:
        return None
    if shard == "auto":
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if rank is None or world is None:
            return None
        return int(rank), int(world)
    if not isinstance(shard, tuple) or len(shard) != 2 or not all(isinstance(v, int) for v in shard):
        raise _checks.refuse("shard", shard, "'auto', None or (index, count)")
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise _checks.refuse("shard", shard, "needs 0 <= index < count")
    return index, count


def _shuffled(batches: Iterator[pa.RecordBatch], window: int, rng: random.Random) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` in a random order within windows of ``window`` rows (a read
    batch may hold several windows)."""
    for rows in _rebatched(batches, window, drop_remainder=False):
        order = list(range(rows.num_rows))
        rng.shuffle(order)
        yield rows.take(pa.array(order, pa.int64()))


def _rebatched(
    batches: Iterator[pa.RecordBatch], size: int, drop_remainder: bool
) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` in batches of exactly ``size`` rows (the last one shorter, or
    left out with ``drop_remainder``)."""
    pending: list[pa.RecordBatch] = []
    have = 0
    for batch in batches:
        offset = 0
        while offset < batch.num_rows:
            take = min(size - have, batch.num_rows - offset)
            pending.append(batch.slice(offset, take))
            have += take
            offset += take
            if have == size:
                yield _concat(pending)
                pending, have = [], 0
    if have and not drop_remainder:
        yield _concat(pending)


def _concat(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(parts) == 1:
        return parts[0]
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]


def _parquet_source(url: str) -> Any:
    """A local path as is; a remote file read whole through sparktrain's client (Parquet needs
    random access to its footer)."""
    local = _native_local_path(url)
    return local if local is not None else pa.BufferReader(fs.read_bytes(url))


def _native_local_path(url: str) -> str | None:
    if url.startswith("file://"):
        return url[len("file://") :]
    return url if "://" not in url else None


def _parquet_batches(url: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of a Parquet file as ``schema`` says (a given schema's types, not the file's)."""
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(_parquet_source(url)).iter_batches(
        batch_size=_READ_BATCH, columns=schema.names
    ):
        if batch.schema.equals(schema):
            yield batch
            continue
        columns = []
        for field in schema:
            column = batch.column(field.name)
            try:
                columns.append(column.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(
                    f"{url}: column {field.name!r} of type {column.type} cannot be read as {field.type}: {e}",
                    column=field.name,
                    path=url,
                ) from e
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def _numpy_column(column: pa.Array) -> Any:
    """A column as NumPy: numbers as one array (nulls as 0), lists as ``(values, offsets)``,
    strings and bytes as a list."""
    import numpy as np

    kind = column.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        column = column.fill_null(pa.scalar([], kind)) if column.null_count else column
        offsets = np.asarray(column.offsets, dtype=np.int64)
        values = _numpy_column(column.flatten())
        return values, offsets - offsets[0]
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        if column.null_count:
            column = column.fill_null(pa.scalar(0, kind) if not pa.types.is_boolean(kind) else False)
        return column.to_numpy(zero_copy_only=False)
    return column.to_pylist()


def _torch_dataset(data: Dataset) -> Any:
    """``data`` as a PyTorch ``IterableDataset`` (defined here: PyTorch is imported only when
    it is asked for)."""
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    def tensor(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(tensor(v) for v in value)
        if isinstance(value, list):
            return value
        # Arrays over Arrow's memory are read-only, and a tensor over them could be written in
        # place: such a batch gets a copy of its own (a memcpy, small beside decoding).
        return torch.from_numpy(value if value.flags.writeable else value.copy())

    class SparktrainDataset(IterableDataset):  # type: ignore[misc]
        """Batches of a sparktrain :class:`Dataset` as dicts of tensors."""

        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = get_worker_info()
            worker = (0, 1) if info is None else (info.id, info.num_workers)
            if data.dynamic and worker[1] > 1:
                raise InvalidArgumentError(
                    "dynamic=True reads the driver's work queue from the trainer's own process: "
                    "use DataLoader(num_workers=0)"
                )
            for batch in data.numpy(self.epoch, worker):
                yield {name: tensor(value) for name, value in batch.items()}

    return SparktrainDataset()


def _tf_spec(tf: Any, kind: pa.DataType) -> Any:
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return tf.RaggedTensorSpec(shape=(None, None), dtype=_tf_dtype(tf, kind.value_type), ragged_rank=1)
    return tf.TensorSpec(shape=(None,), dtype=_tf_dtype(tf, kind))


def _tf_dtype(tf: Any, kind: pa.DataType) -> Any:
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind):
        return tf.string
    if pa.types.is_boolean(kind):
        return tf.bool
    return tf.as_dtype(kind.to_pandas_dtype())


def _tf_value(tf: Any, column: pa.Array) -> Any:
    value = _numpy_column(column)
    if isinstance(value, tuple):
        values, offsets = value
        if isinstance(values, list):
            values = tf.constant(values, tf.string)
        return tf.RaggedTensor.from_row_splits(values, offsets)
    if isinstance(value, list):
        return tf.constant([v if v is not None else b"" for v in value], tf.string)
    return value


__all__ = ["Dataset"]
