"""TFoS's ``compat`` helpers over TensorFlow versions. Runs in the trainer process."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any


def export_saved_model(model: Any, export_dir: str, is_chief: bool = False) -> None:
    """Saves a Keras model as a SavedModel. Under MultiWorkerMirroredStrategy every worker must
    take part in saving; only the chief's copy is kept, the others go to a temporary folder."""
    if is_chief:
        model.save(export_dir)
        return
    scratch = tempfile.mkdtemp(prefix="sparktrain-export-")
    try:
        model.save(f"{scratch}/model")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def disable_auto_shard(options: Any) -> None:
    """Turns off tf.data's auto-sharding in ``options`` (each worker reads its own data)."""
    import tensorflow as tf

    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF


def is_gpu_available() -> bool:
    """True when TensorFlow sees a GPU."""
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU")) > 0


__all__ = [
    "disable_auto_shard",
    "export_saved_model",
    "is_gpu_available",
]
