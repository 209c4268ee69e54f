"""The driver's side of a job's callbacks (:mod:`sparktrain.cluster.callbacks`): starting
them, handing them and their environment to the trainers, and telling them of restarts and of
the job's end. Runs on the driver.

Only starting may fail the job (before any Spark job runs). Later hooks run while trainers
train or after they finished: an error there is logged, and the job goes on, so that a
tracking server that is down cannot cost a training run.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from sparktrain.cluster.callbacks import JobCallback, JobInfo

if TYPE_CHECKING:
    from types import ModuleType

    from sparktrain.cluster.driver.options import JobOptions
    from sparktrain.cluster.driver.restarts import Restart
    from sparktrain.cluster.settings import JobSettings

_log = logging.getLogger(__name__)


class JobHooks:
    """A job's started callbacks."""

    def __init__(self, callbacks: tuple[JobCallback, ...], name: str) -> None:
        self._callbacks = callbacks
        self._name = name
        self._ended = False

    @classmethod
    def start(cls, options: JobOptions, sc: Any) -> JobHooks:
        """Runs every callback's ``on_job_start``; if one raises, those already started are
        told the job ended with that error, and it propagates."""
        info = JobInfo(
            name=options.name,
            num_workers=options.num_workers,
            num_evaluators=options.num_evaluators,
            input_mode=options.input_mode,
            max_restarts=options.max_restarts,
            min_workers=options.min_workers,
            gpus_per_worker=options.gpus_per_worker,
            local=options.local,
            master=str(sc.master),
            application_id=str(sc.applicationId),
        )
        started: list[JobCallback] = []
        try:
            for callback in options.callbacks:
                started.append(callback.on_job_start(info))
        except BaseException as e:
            JobHooks(tuple(started), options.name).on_job_end(e)
            raise
        return cls(tuple(started), options.name)

    def bind(self, settings: JobSettings, cloudpickle: ModuleType) -> JobSettings:
        """``settings`` with the callbacks pickled for the trainers, and their environment under
        the job's own ``env`` (which wins)."""
        if not self._callbacks:
            return settings
        try:
            env: dict[str, str] = {}
            for callback in self._callbacks:
                env.update(callback.trainer_env())
            pickled = cloudpickle.dumps(self._callbacks)
        except BaseException as e:
            self.on_job_end(e)
            raise
        return dataclasses.replace(settings, env={**env, **settings.env}, callbacks=pickled)

    def on_restart(self, restart: Restart) -> None:
        """Tells every callback of a restart."""
        for callback in self._callbacks:
            try:
                callback.on_restart(restart)
            except Exception:
                _log.exception("a callback of %s failed on its restart; the job goes on", self._name)

    def on_job_end(self, error: BaseException | None) -> None:
        """Tells every callback, once, how the job ended."""
        if self._ended:
            return
        self._ended = True
        for callback in self._callbacks:
            try:
                callback.on_job_end(error)
            except Exception:
                _log.exception("a callback of %s failed at the job's end", self._name)
