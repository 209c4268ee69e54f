"""The files behind ``ctx.save_state`` / ``ctx.load_state``. Runs in the trainer process.

State outlives the job that wrote it (it is read at the next generation, or by a new job),
and the job secret changes with every job, so nothing can sign it: whoever can write the
folder decides what the trainers read. The default format therefore cannot run code when it
is read: a NumPy ``.npz`` archive, loaded with ``allow_pickle=False``, holding a NumPy array, a
JSON value, or a dict whose values are either. Any other picklable value needs ``pickle=True``
on both sides, which trusts everyone who can write the folder (see ``docs/security.md``).
"""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

from sparktrain.errors import InvalidArgumentError

#: The file suffix of each format.
SAFE_SUFFIX = ".npz"
PICKLE_SUFFIX = ".pickle"
#: The archive entry that holds what is not an array, as JSON.
_META = "__sparktrain_state__"


def encode(state: Any, use_pickle: bool) -> bytes:
    """``state`` as the bytes of its file: an ``.npz`` archive, or a pickle when
    ``use_pickle``. Refuses, naming the way out, a value the archive cannot hold."""
    if use_pickle:
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    import numpy as np

    arrays: dict[str, Any] = {}
    if isinstance(state, np.ndarray):
        meta: dict[str, Any] = {"kind": "array"}
        arrays["array"] = _plain_array("state", state)
    elif isinstance(state, dict) and any(isinstance(v, np.ndarray) for v in state.values()):
        values = {}
        for key, value in state.items():
            if not isinstance(key, str) or key == _META:
                raise _refuse(f"the key {key!r}", "keys must be strings")
            if isinstance(value, np.ndarray):
                arrays[key] = _plain_array(f"state[{key!r}]", value)
            else:
                values[key] = _json(f"state[{key!r}]", value)
        meta = {"kind": "dict", "values": values}
    else:
        meta = {"kind": "json", "value": _json("state", state)}
    arrays[_META] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def decode(data: bytes, suffix: str, where: str) -> Any:
    """The state in ``data``, read from the file ``where`` ending in ``suffix``."""
    if suffix == PICKLE_SUFFIX:
        return pickle.loads(data)
    import numpy as np

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            meta = json.loads(archive[_META].tobytes())
            if meta["kind"] == "array":
                return archive["array"]
            if meta["kind"] == "dict":
                state: dict[str, Any] = dict(meta["values"])
                state.update({k: archive[k] for k in archive.files if k != _META})
                return state
            return meta["value"]
    except (OSError, ValueError, KeyError) as e:
        raise InvalidArgumentError(f"{where} is not state that ctx.save_state wrote: {e}") from e


def _plain_array(what: str, array: Any) -> Any:
    if array.dtype.hasobject:
        raise _refuse(what, "an array of Python objects needs pickle to be stored")
    return array


def _json(what: str, value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise _refuse(what, f"{type(value).__name__} is neither a NumPy array nor a JSON value ({e})") from e
    return value


def _refuse(what: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"ctx.save_state: {what}: {why}. State is stored in a format that cannot run code when it "
        "is read: a NumPy array, a JSON value, or a dict of them. Convert it (a PyTorch "
        "state_dict: {k: v.numpy() for k, v in sd.items()}), or pass pickle=True to save_state "
        "and load_state if everyone who can write the folder is trusted"
    )
