"""The Spark confs the launcher reads on the driver, and their parsing. Runs on the driver.

Every conf is read and checked before the job's slot check and its Spark stage, so a bad value
fails ``Cluster.run`` at once, naming the conf key.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import re
from dataclasses import dataclass
from typing import Any, Final

from sparktrain.errors import InvalidArgumentError

#: The Spark conf key for the rendezvous port or port range (``"0"``: any free port).
PORT_CONF: Final = "spark.sparktrain.rendezvous.port"
#: Spark conf keys of the control plane's TLS files on the driver (PEM): certificate, key, and
#: the CA that signed the certificate (the certificate itself when left out: self-signed).
TLS_CONF: Final = ("spark.sparktrain.tls.cert", "spark.sparktrain.tls.key", "spark.sparktrain.tls.ca")
#: The Spark conf key that turns off the certificate the driver makes for a job without TLS
#: files (``false``: the control plane in the clear, for debugging on a network the job trusts).
TLS_AUTO_CONF: Final = "spark.sparktrain.tls.auto"
#: Spark conf keys of the data plane's tuning: parallel rings, and bytes per pipeline chunk.
STREAMS_CONF: Final = "spark.sparktrain.collective.streams"
CHUNK_CONF: Final = "spark.sparktrain.collective.chunkBytes"
#: The Spark conf key that sends the data plane's frames in the clear (``false``) rather than
#: encrypted and authenticated (``true``, the default): only for networks the job trusts.
SEAL_CONF: Final = "spark.sparktrain.collective.seal"
#: The Spark conf key that keeps connections between trainers on one host on TCP (``false``)
#: rather than moving them to unix-domain sockets (``true``, the default).
LOCAL_CONF: Final = "spark.sparktrain.collective.local"
#: Spark's conf of the GPUs each task of the default resource profile gets.
TASK_GPU_CONF: Final = "spark.task.resource.gpu.amount"
#: The ring's limits on its tuning, as the data plane checks them (``rust/collective``):
#: parallel rings, and the chunk size, which travels in each call's header as 32 bits.
STREAMS_RANGE: Final = (1, 16)
CHUNK_RANGE: Final = (64, 2**32 - 1)
#: The namespace of sparktrain's Spark confs, and every key in it. A key there that is not one
#: of them is refused: a misspelt setting would otherwise be ignored without a word.
PREFIX: Final = "spark.sparktrain."
KNOWN_KEYS: Final = frozenset(
    {
        PORT_CONF,
        *TLS_CONF,
        TLS_AUTO_CONF,
        STREAMS_CONF,
        CHUNK_CONF,
        SEAL_CONF,
        LOCAL_CONF,
        # Read by sparktrain.tfrecord (ENGINE_CONF there), which this layer does not import.
        "spark.sparktrain.tfrecord.engine",
    }
)


@dataclass(frozen=True)
class DriverConf:
    """What the launcher takes from the Spark conf (and the files it names)."""

    #: The host the tasks reach the driver at (``spark.driver.host``).
    host: str | None
    #: The rendezvous service's ports, first and last.
    ports: tuple[int, int]
    #: The control plane's PEM certificate, key and CA from the job's files, or three Nones.
    tls: tuple[str | None, str | None, str | None]
    #: Whether a job without TLS files gets a certificate the driver makes for it.
    auto_tls: bool
    collective_streams: int
    collective_chunk_bytes: int
    #: Whether the data plane's frames are encrypted and authenticated.
    collective_sealed: bool
    #: Whether trainers on one host connect through unix-domain sockets.
    collective_local: bool


def read_conf(conf: Any, tls: tuple[str, ...] | None, gpus_per_worker: int | None = None) -> DriverConf:
    """The launcher's confs from a ``SparkConf``; ``tls`` (``Cluster.run``'s argument, its
    shape already checked) replaces the TLS confs when given. ``gpus_per_worker`` is refused
    when Spark gives each task fewer GPUs: every task would fail."""
    check_keys(conf)
    if gpus_per_worker:
        available = task_gpus(conf)
        if available < gpus_per_worker:
            raise InvalidArgumentError(
                f"gpus_per_worker={gpus_per_worker}: Spark gives each task {available} "
                f"GPU{'' if available == 1 else 's'}; set {TASK_GPU_CONF} to {gpus_per_worker}"
            )
    return DriverConf(
        host=conf.get("spark.driver.host", None),
        ports=port_range(conf.get(PORT_CONF, "0")),
        tls=tls_files(conf, tls),
        auto_tls=boolean(conf, TLS_AUTO_CONF, True),
        collective_streams=integer(conf, STREAMS_CONF, 1, STREAMS_RANGE),
        collective_chunk_bytes=integer(conf, CHUNK_CONF, 1 << 20, CHUNK_RANGE),
        collective_sealed=boolean(conf, SEAL_CONF, True),
        collective_local=boolean(conf, LOCAL_CONF, True),
    )


def task_gpus(conf: Any) -> int:
    """How many GPU addresses Spark hands each task: ``spark.task.resource.gpu.amount``, where
    a fraction (tasks sharing a GPU) still means one address, and 0 when it is not set."""
    text = conf.get(TASK_GPU_CONF, None)
    try:
        amount = float(text) if text is not None else 0.0
    except ValueError:
        return 0  # Spark itself refuses such a value when the context starts
    if amount <= 0:
        return 0
    return max(1, int(amount))


def check_keys(conf: Any) -> None:
    """Refuses a key of ``conf`` in sparktrain's namespace that is not one of its settings,
    naming the setting it most resembles."""
    if hasattr(conf, "getAll"):
        keys = [key for key, _ in conf.getAll()]
    elif hasattr(conf, "keys"):
        keys = list(conf.keys())
    else:
        return
    for key in sorted(k for k in keys if k.startswith(PREFIX) and k not in KNOWN_KEYS):
        close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InvalidArgumentError(
            f"{key} is not a sparktrain setting{hint}; they are {', '.join(sorted(KNOWN_KEYS))}"
        )


def integer(conf: Any, key: str, default: int, bounds: tuple[int, int]) -> int:
    """The conf ``key`` as an integer within ``bounds``, or ``default`` when it is not set."""
    text = conf.get(key, None)
    if text is None:
        return default
    low, high = bounds
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise InvalidArgumentError(f"{key} must be an integer from {low} to {high}, not {text!r}")
    return value


def boolean(conf: Any, key: str, default: bool) -> bool:
    """The conf ``key`` as ``true`` or ``false`` (any case), or ``default`` when it is not set."""
    text = conf.get(key, None)
    if text is None:
        return default
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"{key} must be true or false, not {text!r}")
    return value == "true"


def port_range(value: str) -> tuple[int, int]:
    """``"40000-40100"`` as ``(40000, 40100)``; a single port is a range of one, and ``"0"``
    lets the system pick."""
    try:
        low, _, high = value.partition("-")
        start, end = int(low), int(high or low)
    except ValueError:
        raise InvalidArgumentError(f"{PORT_CONF}={value!r} is not a port or range like 40000-40100") from None
    if not 0 <= start <= end <= 65535:
        raise InvalidArgumentError(f"{PORT_CONF}={value!r} is not a valid port range")
    return start, end


def tls_files(conf: Any, tls: tuple[str, ...] | None) -> tuple[str | None, str | None, str | None]:
    """The PEM certificate, key and CA of the control plane, read from the files ``tls``
    names (else the TLS confs), or three Nones. The CA defaults to the certificate."""
    paths = list(tls) if tls is not None else [conf.get(key, None) for key in TLS_CONF]
    if len(paths) not in (2, 3) or not paths[0] or not paths[1]:
        if tls is None and not any(paths):
            return None, None, None
        if tls is None:
            missing = " and ".join(key for key, path in zip(TLS_CONF[:2], paths, strict=False) if not path)
            raise InvalidArgumentError(
                f"TLS needs a certificate and a key (and optionally a CA): set {missing} too, "
                f"or none of {', '.join(TLS_CONF)}"
            )
        raise InvalidArgumentError(f"TLS needs a certificate and a key (and optionally a CA), got {paths}")
    texts: list[str | None] = []
    for path, kind in zip(paths, ("certificate", "key", "CA"), strict=False):
        if path is None:
            texts.append(None)
            continue
        try:
            with open(path) as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidArgumentError(f"cannot read the control plane's TLS file {path}: {e}") from e
        check_pem(path, kind, text)
        texts.append(text)
    cert, key = texts[0], texts[1]
    ca = texts[2] if len(texts) == 3 and texts[2] else cert
    return cert, key, ca


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def check_pem(path: str, kind: str, text: str) -> None:
    """Refuse a TLS file that holds no PEM block of its kind (a certificate, a private key), or a
    block whose body is not base64, naming the file: the TLS library would only say that its
    transport failed, once the job had started."""
    wanted = "PRIVATE KEY" if kind == "key" else "CERTIFICATE"
    labels = []
    for match in _PEM_BLOCK.finditer(text):
        label, body = match.group(1), match.group(2)
        try:
            base64.b64decode("".join(body.split()), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(
                f"the control plane's TLS {kind} {path}: its {label} block is not base64 PEM"
                + (" (an encrypted key is not supported)" if ":" in body else "")
            ) from None
        labels.append(label)
    matching = [label for label in labels if label.endswith(wanted)]
    if matching:
        if kind == "key" and matching[0] == "ENCRYPTED PRIVATE KEY":
            raise InvalidArgumentError(
                f"the control plane's TLS key {path} is encrypted; give it without a passphrase"
            )
        return
    found = f"its blocks are {', '.join(labels)}" if labels else "it has no -----BEGIN ...----- block"
    raise InvalidArgumentError(f"the control plane's TLS {kind} {path} holds no PEM {wanted} block ({found})")
