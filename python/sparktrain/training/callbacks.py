"""Callbacks of the engine's training: what an integration (an experiment tracker such as
:class:`sparktrain.tracking.MLflowCallback`) sees of ``fit`` and ``export``. Imported in the
trainer process and on the driver.

A :class:`Callback` is also a :class:`~sparktrain.cluster.callbacks.JobCallback`: given to
:func:`sparktrain.train` or ``Cluster.run(..., callbacks=...)``, its job hooks run on the
driver, and it travels to every trainer, where ``ctx.trainer(...)`` hands it to the
:class:`~sparktrain.training.Trainer`. Its training hooks run on the chief alone, the trainer
that writes checkpoints, event files and the export and whose progress is the job's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sparktrain.cluster.callbacks import JobCallback

if TYPE_CHECKING:
    from sparktrain.training.results import FitResult, Metrics
    from sparktrain.training.trainer import Trainer

_log = logging.getLogger(__name__)


class Callback(JobCallback):
    """Training hooks, each a no-op here: subclass and override what you need. They run on the
    chief, in the order below; an exception in one is logged and training goes on."""

    def on_fit_start(self, trainer: Trainer, arguments: dict[str, Any]) -> None:
        """``fit`` is about to train: ``trainer.config`` holds every resolved setting,
        ``trainer.features`` the feature spec, and ``arguments`` ``fit``'s own (``data``,
        ``epochs``, ``steps``, ``eval_data``, ``eval_every``, ``sharding``,
        ``early_stopping``)."""

    def on_log(self, trainer: Trainer, line: dict[str, float]) -> None:
        """A progress line (every ``log_every`` steps): ``step``, ``epoch``, ``loss``,
        ``examples_per_sec`` (all trainers together), ``learning_rate``, ``wall_time``."""

    def on_evaluation(self, trainer: Trainer, step: int, metrics: Metrics) -> None:
        """An evaluation over every trainer's share of ``eval_data``, at ``step``."""

    def on_fit_end(self, trainer: Trainer, result: FitResult) -> None:
        """``fit`` returned ``result`` (its last checkpoint is ``result.checkpoint``)."""

    def on_export(self, trainer: Trainer, export_dir: str) -> None:
        """The chief wrote the exported model into ``export_dir``."""


def training_callbacks(callbacks: object) -> tuple[Callback, ...]:
    """The training callbacks among ``callbacks`` (a job's may hold job callbacks alone)."""
    if callbacks is None:
        return ()
    if isinstance(callbacks, JobCallback):
        callbacks = (callbacks,)
    if isinstance(callbacks, str) or not isinstance(callbacks, Sequence):
        from sparktrain import _checks

        raise _checks.refuse("callbacks", callbacks, "must be a list of sparktrain.training.Callback")
    if not all(isinstance(c, JobCallback) for c in callbacks):
        from sparktrain import _checks

        raise _checks.refuse("callbacks", callbacks, "must be a list of sparktrain.training.Callback")
    return tuple(c for c in callbacks if isinstance(c, Callback))


def call(callbacks: Sequence[Callback], hook: str, *args: Any) -> None:
    """Runs ``hook`` of every callback; one that raises is logged, and the next one runs."""
    for callback in callbacks:
        try:
            getattr(callback, hook)(*args)
        except Exception:
            _log.warning("%s.%s failed; training goes on", type(callback).__name__, hook, exc_info=True)


__all__ = ["Callback"]
