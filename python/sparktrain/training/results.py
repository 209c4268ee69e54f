"""The values that cross between the driver and the trainers: the feature spec, evaluation
metrics and what ``fit`` did. Imported in the trainer process and on the driver.

They are plain frozen dataclasses, so they pickle from a trainer back to the driver; each has
a conversion from the engine's own class in :mod:`sparktrain._native`, which holds the
defaults and does the checking."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparktrain import _native
from sparktrain.errors import InvalidArgumentError

_NUMBERS = frozenset({"byte", "short", "integer", "long", "float", "double", "decimal", "boolean"})
_INTEGERS = frozenset({"byte", "short", "integer", "long"})
_KEYS = _INTEGERS | {"string", "varchar", "char", "binary"}
#: An export's kinds of key column (``model.json``'s ``key_kinds``), in words.
_KIND_WORDS = {"integer": "integers", "bytes": "strings or bytes"}
#: The Spark types (``DataType.typeName()``) each kind of column may have, and what to do
#: about another: a multi-hot column is an array of keys.
_SPARK_TYPES = {
    "dense": (_NUMBERS, "a dense feature", "use a numeric or boolean column (cast it to double)"),
    "label": (_NUMBERS, "the label", "use a numeric or boolean column (cast it to double)"),
    "categorical": (_KEYS, "a categorical feature", "use integers, strings or bytes"),
    "crossed": (_KEYS, "a crossed feature's column", "use integers, strings or bytes"),
    "multi_hot": (_KEYS, "a multi-hot feature", "use an array of integers, strings or bytes"),
}


@dataclass(frozen=True)
class FeatureSpec:
    """Which columns feed the model, and how.

    ``dense`` columns (any numeric type) are float values (a null counts as 0; NaN or an
    infinity is refused, naming the column, as it would make every weight NaN);
    ``categorical`` columns (integers, strings or bytes) are hashed into a number of ids each
    (``{"shop": 1000}``); ``crossed`` hashes tuples of columns together
    (``[(("shop", "city"), 10000)]``); ``multi_hot`` columns (lists of integers, strings or
    bytes, of any length) hash each value into a number of ids and pool a row's embeddings by
    ``"mean"`` (the default) or ``"sum"`` (``{"tags": 1000}``, or ``[("tags", 1000, "sum")]``);
    ``label`` is 0/1 for binary models, a class id, or any number for regression."""

    dense: tuple[str, ...] = ()
    categorical: tuple[tuple[str, int], ...] = ()
    crossed: tuple[tuple[tuple[str, ...], int], ...] = ()
    label: str = "label"
    multi_hot: tuple[tuple[str, int, str], ...] = ()

    @classmethod
    def of(cls, value: FeatureSpec | Mapping[str, Any]) -> FeatureSpec:
        """A spec from itself or a dict with the same keys; checked as the engine would.

        >>> from sparktrain.training import FeatureSpec
        >>> spec = FeatureSpec.of({"dense": ["x"], "categorical": {"shop": 1000}, "multi_hot": {"tags": 100}})
        >>> spec.categorical, spec.multi_hot
        ((('shop', 1000),), (('tags', 100, 'mean'),))
        >>> FeatureSpec.of({"dense": "x"})
        Traceback (most recent call last):
          ...
        sparktrain.errors.InvalidArgumentError: features['dense']='x': give a list of columns
        """
        if isinstance(value, FeatureSpec):
            spec = value
        else:
            unknown = set(value) - {"dense", "categorical", "crossed", "label", "multi_hot"}
            if unknown:
                raise InvalidArgumentError(f"features: unknown feature spec keys {sorted(unknown)}")
            for key in ("dense", "categorical", "crossed", "multi_hot"):
                # A bare string would be taken letter by letter.
                if isinstance(value.get(key), str):
                    raise InvalidArgumentError(f"features[{key!r}]={value[key]!r}: give a list of columns")
            categorical = value.get("categorical", ())
            pairs = categorical.items() if isinstance(categorical, Mapping) else categorical
            try:
                spec = cls(
                    dense=tuple(str(d) for d in value.get("dense", ())),
                    categorical=tuple((str(n), int(b)) for n, b in pairs),
                    crossed=tuple(
                        (tuple(str(n) for n in names), int(b)) for names, b in value.get("crossed", ())
                    ),
                    label=str(value.get("label", "label")),
                    multi_hot=_multi_hot(value.get("multi_hot", ())),
                )
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(f"features: {e}") from e
        spec.to_native()
        return spec

    def input_columns(self) -> list[tuple[str, str]]:
        """Every column the model reads to score a row, as ``(kind, name)`` pairs in the
        spec's order (a crossed column's sources each), without the label.

        >>> FeatureSpec(dense=("x",), crossed=((("shop", "city"), 100),)).input_columns()
        [('dense', 'x'), ('crossed', 'shop'), ('crossed', 'city')]
        """
        return [
            *(("dense", n) for n in self.dense),
            *(("categorical", n) for n, _ in self.categorical),
            *(("crossed", n) for names, _ in self.crossed for n in names),
            *(("multi_hot", n) for n, _, _ in self.multi_hot),
        ]

    def check_columns(self, columns: Sequence[str], what: str, label: bool = True) -> None:
        """Refuses ``what`` (a DataFrame's description) when ``columns`` lack one the model
        reads (or its label, with ``label``), naming it: on the driver, before any Spark job,
        rather than in every task or trainer once the job runs."""
        present = set(columns)
        wanted = [*self.input_columns(), *([("label", self.label)] if label else [])]
        for kind, name in wanted:
            if name not in present:
                shown = ", ".join(columns) if len(columns) <= 20 else ", ".join(columns[:20]) + ", ..."
                raise InvalidArgumentError(
                    f"{what} has no column {name!r}, which the features name as {kind} (columns: {shown})"
                )

    def check_types(
        self, schema: Any, what: str, label: bool = True, key_kinds: Mapping[str, str] | None = None
    ) -> None:
        """Refuses a column of ``schema`` (a Spark ``StructType``) whose type the engine cannot
        read for its kind of feature (a string as a dense feature, a double as a categorical
        one), naming the column: on the driver, rather than in every task once the job runs.
        The engine reads the columns as Spark hands them over in Arrow form; a column
        ``schema`` lacks is left to :meth:`check_columns`. ``key_kinds`` (an export's
        ``model.json`` has them: ``{"shop": "integer"}``) are the kinds of key column the model
        was trained on: integers and strings hash to other ids, so another kind is refused."""
        types = {f.name: f.dataType for f in schema.fields}
        wanted = [*self.input_columns(), *([("label", self.label)] if label else [])]
        for kind, name in wanted:
            if name not in types:
                continue
            data_type = types[name]
            allowed, role, hint = _SPARK_TYPES[kind]
            type_name = data_type.typeName()
            if kind == "multi_hot":
                type_name = data_type.elementType.typeName() if type_name == "array" else "not an array"
            if type_name not in allowed:
                raise InvalidArgumentError(
                    f"{what}'s column {name!r} has type {data_type.simpleString()}, which {role} "
                    f"cannot be: {hint}"
                )
            trained = (key_kinds or {}).get(name)
            if kind != "dense" and kind != "label" and trained is not None:
                given = "integer" if type_name in _INTEGERS else "bytes"
                if given != trained:
                    raise InvalidArgumentError(
                        f"{what}'s column {name!r} has type {data_type.simpleString()}, but the model "
                        f"was trained on {_KIND_WORDS[trained]} in it: they hash to other ids (5 and "
                        f"'5' differ); cast the column to what it was in training"
                    )

    def to_native(self) -> _native.FeatureSpec:
        """The engine's form (which checks buckets and names)."""
        try:
            return _native.FeatureSpec(
                dense=list(self.dense),
                categorical=list(self.categorical),
                crossed=[(list(names), buckets) for names, buckets in self.crossed],
                label=self.label,
                multi_hot=list(self.multi_hot),
            )
        except OverflowError as e:
            raise InvalidArgumentError(f"features: a bucket count does not fit 32 bits: {e}") from e

    @classmethod
    def from_native(cls, spec: _native.FeatureSpec) -> FeatureSpec:
        """The spec the engine holds (given, or inferred from the data)."""
        return cls(
            dense=tuple(spec.dense),
            categorical=tuple(spec.categorical),
            crossed=tuple((tuple(names), buckets) for names, buckets in spec.crossed),
            label=spec.label,
            multi_hot=tuple(spec.multi_hot),
        )

    def to_json(self) -> str:
        """The form stored in an export's ``model.json``."""
        return json.dumps(
            {
                "dense": list(self.dense),
                "categorical": [{"name": n, "buckets": b} for n, b in self.categorical],
                "crossed": [{"names": list(n), "buckets": b} for n, b in self.crossed],
                "multi_hot": [{"name": n, "buckets": b, "pooling": p} for n, b, p in self.multi_hot],
                "label": self.label,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> FeatureSpec:
        """The spec from :meth:`to_json`'s form."""
        d = json.loads(text)
        return cls(
            dense=tuple(d["dense"]),
            categorical=tuple((c["name"], c["buckets"]) for c in d["categorical"]),
            crossed=tuple((tuple(c["names"]), c["buckets"]) for c in d["crossed"]),
            label=d["label"],
            multi_hot=tuple(
                (m["name"], m["buckets"], m.get("pooling", "mean")) for m in d.get("multi_hot", ())
            ),
        )


def _multi_hot(value: Any) -> tuple[tuple[str, int, str], ...]:
    """The multi-hot columns as ``(name, buckets, pooling)``: from ``{name: buckets}`` (mean
    pooling), or a list of ``(name, buckets)`` or ``(name, buckets, pooling)``."""
    items = value.items() if isinstance(value, Mapping) else value
    out = []
    for item in items:
        name, buckets, *rest = item
        if len(rest) > 1:
            raise InvalidArgumentError(f"features['multi_hot']: {item!r} has more than 3 parts")
        out.append((str(name), int(buckets), str(rest[0]) if rest else "mean"))
    return tuple(out)


@dataclass(frozen=True)
class Metrics:
    """An evaluation over every trainer's share: the mean loss, the accuracy (threshold 0.5,
    or the largest logit; None for regression) and, for binary models, the AUC."""

    examples: int
    loss: float
    accuracy: float | None
    auc: float | None

    @classmethod
    def from_native(cls, m: _native.Metrics) -> Metrics:
        """The engine's metrics as a picklable value."""
        return cls(examples=m.examples, loss=m.loss, accuracy=m.accuracy, auc=m.auc)


@dataclass(frozen=True)
class FitResult:
    """What ``fit`` did. ``steps`` counts every step of the training (a resumed run counts
    the earlier ones), ``new_steps`` those of this call; ``examples_per_sec`` covers all
    trainers; ``loss`` is the mean training loss of the last progress window; ``history``
    holds the progress lines (``step``, ``epoch``, ``loss``, ``examples_per_sec``,
    ``learning_rate``, ``wall_time``) and ``evaluations`` ``(step, Metrics)`` pairs;
    ``first_step_at`` is the wall time (``time.time()``) when this call's first step ended.
    ``stopped_early`` says early stopping or ``on_eval`` ended training; ``best`` is the best
    evaluation's ``(step, value)`` of early stopping's metric, and ``best_checkpoint`` the
    folder of its checkpoint; ``restored_best`` says the model ended with that evaluation's
    weights (early stopping's ``restore_best``)."""

    steps: int
    new_steps: int
    examples: int
    seconds: float
    examples_per_sec: float
    epochs: int
    loss: float | None
    resumed_from: int | None
    history: list[dict[str, float]] = field(default_factory=list)
    evaluations: list[tuple[int, Metrics]] = field(default_factory=list)
    checkpoint: str | None = None
    first_step_at: float | None = None
    stopped_early: bool = False
    best: tuple[int, float] | None = None
    best_checkpoint: str | None = None
    restored_best: bool = False

    @classmethod
    def from_native(cls, s: _native.FitSummary, restored_best: bool = False) -> FitResult:
        """The engine's summary as a picklable value; ``restored_best`` as ``fit`` asked."""
        return cls(
            steps=s.steps,
            new_steps=s.new_steps,
            examples=s.examples,
            seconds=s.seconds,
            examples_per_sec=s.examples_per_sec,
            epochs=s.epochs,
            loss=s.loss,
            resumed_from=s.resumed_from,
            history=[log_line(line) for line in s.history],
            evaluations=[(e.step, Metrics.from_native(e.metrics)) for e in s.evaluations],
            checkpoint=s.checkpoint,
            first_step_at=s.first_step_at,
            stopped_early=s.stopped_early,
            best=s.best,
            best_checkpoint=s.best_checkpoint,
            restored_best=restored_best and s.best is not None,
        )

    @property
    def metrics(self) -> Metrics | None:
        """The evaluation of the model training ended with, if any: the best one's when the
        weights were restored to it (``restored_best``), else the last one."""
        if self.restored_best and self.best is not None:
            for step, metrics in self.evaluations:
                if step == self.best[0]:
                    return metrics
        return self.evaluations[-1][1] if self.evaluations else None


def log_line(line: _native.LogLine) -> dict[str, float]:
    """A progress line as the dict ``FitResult.history`` holds."""
    return {
        "step": line.step,
        "epoch": line.epoch,
        "loss": line.loss,
        "examples_per_sec": line.examples_per_sec,
        "learning_rate": line.learning_rate,
        "wall_time": line.wall_time,
    }
