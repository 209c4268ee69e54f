"""Deterministic, learnable synthetic tables for training tests and benchmarks.

Both tables draw their labels from a fixed "teacher" whose parameters come from a constant seed,
never from ``seed``: tables made with different seeds (a training set and an evaluation set) are
independent samples of the same problem.

``dense_table``: ``label`` (int64 0/1) and ``f00``.. (float32, standard normal). The label is
Bernoulli(sigmoid(teacher(x))), the teacher a random 39-16-1 tanh network with large weights and
biases, so that much of its signal is not linear. On the 39 default features the best possible
log-loss is about 0.29 (the rate of positives is about 50 %); a logistic regression stops at
about 0.42, and a 256-256 ReLU MLP trained with Adam on ~150k examples reaches about 0.36.

``criteo_table``: a Criteo-like table: ``label`` (int64 0/1, about 25 % positives), ``i01``..``i13``
(float32, log1p of log-normal counts, so values lie between 0 and about 10) and ``c01``..``c26``
(int64 ids below 2**31). Column ``c<k>`` has its own vocabulary (from 10 to 5,000 ids, sizes
spaced geometrically) from which ids are drawn Zipf-like, so a few ids are frequent. The
label's logit is a bias, plus a small linear function of the dense columns, plus one effect per
(column, id), plus effects of the id pairs of a few column pairs, so the ids carry most of the
signal. The teacher's own AUC is about 0.91 (log-loss 0.32); after one pass over 200k rows a
Wide&Deep model reaches about 0.84 and a dense-only MLP about 0.56.

``zipf_criteo_table``: the same columns over a large id space, as click logs have: column
``c<k>`` draws from ``ZIPF_VOCAB[k]`` distinct values (100 to 4,000,000, spaced geometrically)
with a Zipf law of exponent ``ZIPF_EXPONENT`` (1.05): in the largest column the hottest value is
in about 6 % of the rows, the ten hottest in 20 %, and most values are seen once or never. Ids
and their effects are computed from the rank by a hash rather than stored, so the id space
costs no memory; a few column pairs interact through their hottest values. Tables of any
number of hash buckets per column meet collisions in the tail, fewer as the buckets grow.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pyarrow as pa

TEACHER_SEED = 20_261_122
HIDDEN = 16
DENSE = [f"i{k:02d}" for k in range(1, 14)]
SPARSE = [f"c{k:02d}" for k in range(1, 27)]
VOCAB = np.geomspace(10, 5000, len(SPARSE)).round().astype(np.int64)
PAIRS = [(0, 1), (2, 5), (3, 8), (4, 10)]  # column pairs with an interaction effect
POSITIVE_RATE = 0.25


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@functools.cache
def _dense_teacher(features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng([TEACHER_SEED, features])
    w1 = rng.normal(0.0, 2.5 / np.sqrt(features), (features, HIDDEN))
    b1 = rng.normal(0.0, 1.5, HIDDEN)
    w2 = rng.normal(0.0, 6.0 / np.sqrt(HIDDEN), HIDDEN)
    reference = np.tanh(rng.standard_normal((20_000, features)) @ w1 + b1) @ w2
    return w1, b1, w2, float(np.median(reference))  # centred: about half the labels are 1


def dense_table(rows: int, seed: int = 0, features: int = 39) -> pa.Table:
    """``rows`` rows of ``label`` and ``features`` float32 columns ``f00``, ``f01``, ..."""
    w1, b1, w2, centre = _dense_teacher(features)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, features), dtype=np.float32)
    logit = np.tanh(x.astype(np.float64) @ w1 + b1) @ w2 - centre
    columns = {"label": (rng.random(rows) < _sigmoid(logit)).astype(np.int64)}
    columns.update({f"f{j:02d}": x[:, j] for j in range(features)})
    return pa.table(columns)


class _CriteoTeacher:
    """The fixed parameters of the Criteo-like problem (one instance, from ``TEACHER_SEED``)."""

    def __init__(self) -> None:
        rng = np.random.default_rng([TEACHER_SEED, 1])
        self.mu = rng.uniform(0.0, 3.0, len(DENSE))
        self.sigma = rng.uniform(0.8, 1.6, len(DENSE))
        self.dense_w = rng.normal(0.0, 0.15, len(DENSE))
        # Per column: the ids (random, below 2**31), the Zipf-like cumulative frequencies of
        # their ranks and their effects on the logit.
        self.ids = [rng.choice(2**31, v, replace=False).astype(np.int64) for v in VOCAB]
        self.cdf = [np.cumsum(1.0 / np.arange(1, v + 1) ** 1.1) for v in VOCAB]
        self.effect = [rng.normal(0.0, 0.45, v) for v in VOCAB]
        self.pair = [rng.normal(0.0, 0.6, (VOCAB[a], VOCAB[b])) for a, b in PAIRS]
        self.bias = 0.0
        self.bias = _calibrated_bias(self.logit(*self.sample(50_000, rng)))

    def sample(self, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Dense values (rows x 13) and id ranks (rows x 26) of ``rows`` examples."""
        counts = np.floor(rng.lognormal(self.mu, self.sigma, (rows, len(DENSE))))
        dense = np.log1p(counts).astype(np.float32)
        ranks = np.empty((rows, len(SPARSE)), np.int64)
        for c, cdf in enumerate(self.cdf):
            ranks[:, c] = np.searchsorted(cdf, rng.random(rows) * cdf[-1])
        return dense, ranks

    def logit(self, dense: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        z = (dense - self.mu) @ self.dense_w  # log1p of the counts lies near mu
        for c, effect in enumerate(self.effect):
            z += effect[ranks[:, c]]
        for (a, b), table in zip(PAIRS, self.pair, strict=True):
            z += table[ranks[:, a], ranks[:, b]]
        return z


def _calibrated_bias(logit: np.ndarray) -> float:
    """The bias that makes the mean probability of ``logit`` POSITIVE_RATE (bisection)."""
    low, high = -10.0, 10.0
    bias = 0.0
    for _ in range(50):
        bias = (low + high) / 2
        if _sigmoid(logit + bias).mean() < POSITIVE_RATE:
            low = bias
        else:
            high = bias
    return bias


@functools.cache
def _criteo_teacher() -> _CriteoTeacher:
    return _CriteoTeacher()


def criteo_table(rows: int, seed: int = 0) -> pa.Table:
    """``rows`` rows of ``label``, ``i01``..``i13`` (float32) and ``c01``..``c26`` (int64)."""
    teacher = _criteo_teacher()
    rng = np.random.default_rng(seed)
    dense, ranks = teacher.sample(rows, rng)
    probability = _sigmoid(teacher.logit(dense, ranks) + teacher.bias)
    columns = {"label": (rng.random(rows) < probability).astype(np.int64)}
    columns.update({name: dense[:, j] for j, name in enumerate(DENSE)})
    columns.update({name: teacher.ids[c][ranks[:, c]] for c, name in enumerate(SPARSE)})
    return pa.table(columns)


ZIPF_EXPONENT = 1.05
ZIPF_VOCAB = np.geomspace(100, 4_000_000, len(SPARSE)).round().astype(np.int64)
ZIPF_EFFECT = 0.45  # the spread of one value's effect on the logit
ZIPF_PAIR_RANKS = 100  # column pairs interact through their hottest values only
_MASK64 = np.uint64(2**64 - 1)


def _mix(x: np.ndarray, salt: int) -> np.ndarray:
    """SplitMix64's finaliser of ``x`` (uint64) and ``salt``: a fixed pseudo-random hash."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + np.uint64(salt) * np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _signed_unit(h: np.ndarray) -> np.ndarray:
    """Hashes as floats uniform in [-sqrt(3), sqrt(3)): mean 0, variance 1."""
    return ((h >> np.uint64(11)).astype(np.float64) / 2.0**53 * 2.0 - 1.0) * np.sqrt(3.0)


def zipf_ranks(
    rows: int, vocab: int, rng: np.random.Generator, exponent: float = ZIPF_EXPONENT
) -> np.ndarray:
    """``rows`` ranks below ``vocab``, rank ``k`` drawn about ∝ ``(k + 1) ** -exponent``: the
    inverse of the continuous power law's CDF on ``[1, vocab + 1)``, floored (exact enough
    for a benchmark, and it needs no table of ``vocab`` entries)."""
    a = 1.0 - exponent
    top = (vocab + 1.0) ** a - 1.0
    x = (1.0 + rng.random(rows) * top) ** (1.0 / a)
    return np.minimum(np.floor(x).astype(np.int64) - 1, vocab - 1)


class _ZipfTeacher:
    """The fixed parameters of the Zipf Criteo-like problem (one instance)."""

    def __init__(self) -> None:
        rng = np.random.default_rng([TEACHER_SEED, 2])
        self.dense = _criteo_teacher()  # the dense columns' law, shared with criteo_table
        self.bias = 0.0
        self.bias = _calibrated_bias(self.logit(*self.sample(50_000, rng)))

    def sample(self, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Dense values (rows x 13) and id ranks (rows x 26) of ``rows`` examples."""
        counts = np.floor(rng.lognormal(self.dense.mu, self.dense.sigma, (rows, len(DENSE))))
        ranks = np.stack([zipf_ranks(rows, int(v), rng) for v in ZIPF_VOCAB], axis=1)
        return np.log1p(counts).astype(np.float32), ranks

    def logit(self, dense: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        z = (dense - self.dense.mu) @ self.dense.dense_w
        for c in range(len(SPARSE)):
            z += ZIPF_EFFECT * _signed_unit(_mix(ranks[:, c], 1 + c))
        for a, b in PAIRS:
            hot = (ranks[:, a] < ZIPF_PAIR_RANKS) & (ranks[:, b] < ZIPF_PAIR_RANKS)
            pair = ranks[:, a] * ZIPF_PAIR_RANKS + ranks[:, b]
            z += np.where(hot, 0.6 * _signed_unit(_mix(pair, 100 + a * 32 + b)), 0.0)
        return z


@functools.cache
def _zipf_teacher() -> _ZipfTeacher:
    return _ZipfTeacher()


def zipf_criteo_table(rows: int, seed: int = 0) -> pa.Table:
    """``rows`` rows of ``label``, ``i01``..``i13`` (float32) and ``c01``..``c26`` (int64 ids
    below 2**31) whose ids follow a Zipf law over ``ZIPF_VOCAB`` values per column."""
    teacher = _zipf_teacher()
    rng = np.random.default_rng(seed)
    dense, ranks = teacher.sample(rows, rng)
    probability = _sigmoid(teacher.logit(dense, ranks) + teacher.bias)
    columns = {"label": (rng.random(rows) < probability).astype(np.int64)}
    columns.update({name: dense[:, j] for j, name in enumerate(DENSE)})
    # A value is a fixed hash of (column, rank), below 2**31 as criteo_table's ids are.
    ids = {
        name: (_mix(ranks[:, c], 1000 + c) >> np.uint64(33)).astype(np.int64) for c, name in enumerate(SPARSE)
    }
    columns.update(ids)
    return pa.table(columns)


def write_tfrecords(folder: str, table: pa.Table, files: int) -> str:
    """Writes ``table`` into ``folder`` as ``files`` TFRecord files of about equal size
    (``part-00000.tfrecord``...); returns the folder."""
    import sparktrain as st

    os.makedirs(folder, exist_ok=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        st.tfrecord.write_batches(f"{folder}/part-{i:05d}.tfrecord", table.slice(i * step, step))
    return folder
