"""Distilling an encoder's heads into the fast features: knowledge distillation through a transfer set.

A binary head on the fast features (:data:`.features.DEFAULT_FEATURES`, TF-IDF) learns only from its labelled works.
A head on the all-MiniLM-L6-v2 sentence embedding ranks works it never saw much better, but encoding every work of
a 4.3-million-work frame costs hours on 2 cores. Distillation keeps the fast features at scoring time and lends
them what the encoder knows:

1. The *encoder head*: a logistic regression on the encoder's embeddings (:data:`DISTILL_ENCODER`, int8 ONNX) of
   the same labelled works, with the same weights and its C chosen the same way (:func:`.heads.choose_c`).
2. The *transfer set*: the training texts and a sample of frame works (:data:`TRANSFER_WORKS` by default, the
   works whose salted SHA-256 of the id sorts first, :data:`TRANSFER_SALT`), unlabelled; each is encoded once.
3. A ridge regression (:data:`RIDGE_ALPHA`) on the fast features of the transfer set to the encoder head's
   log-odds, one per head (one multi-output fit for all heads).
4. The head's linear model becomes the mean of its label fit and the regression: log-odds
   ``(x . w_label + b_label + x . w_ridge + b_ridge) / 2``, the mean of two log-odds of the same event. It is
   still one logistic model on the fast features, so scoring and its speed do not change.

Measured in benchmarks/student_distill.py (benchmarks/RESULTS.md): on the pilot sets and on known meta-research
works outside them, the distilled heads rank at or near the level of the encoder's own heads. A distilled head is a
machine score like any other: every gate and status stays.
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .features import make_features, transform

if TYPE_CHECKING:  # the heads import scikit-learn (about 4 s); the Dagster definitions import this module
    from .heads import BinaryHead

#: The encoder whose heads are distilled (a feature backend of :mod:`.backends`, built at set-up).
DISTILL_ENCODER = "minilm-onnx"
#: The ridge regression's penalty (scikit-learn's ``alpha``) on the fast features.
RIDGE_ALPHA = 0.3
#: Frame works in the transfer set unless told otherwise (``student_heads: transfer_works``).
TRANSFER_WORKS = 20_000
#: Texts encoded at a time (a progress line may follow each chunk).
ENCODE_CHUNK = 2_000
#: Seconds between two progress lines of a :class:`Distiller`.
PROGRESS_SECONDS = 30.0
#: The salt of the transfer sample's hash (a new salt is a new sample, hence a new model version).
TRANSFER_SALT = "metacan-student-transfer-v1"


def transfer_sample_sql(n: int) -> str:
    """The DuckDB ``ORDER BY ... LIMIT`` clause of the transfer sample: the ``n`` frame works whose salted SHA-256 of
    the id sorts first (stable across runs and machines; a grown frame keeps most of its sample)."""
    return f"ORDER BY sha256('{TRANSFER_SALT}' || id) LIMIT {int(n)}"


@dataclass
class TransferSet:
    """The unlabelled texts the regressions learn from, their fast features ``X`` and encoder embeddings ``E``."""

    texts: list[str]
    X: object
    E: np.ndarray

    def without(self, texts: set[str]) -> TransferSet:
        """This set without the rows whose text is in ``texts`` (a cross-validation fold's test works)."""
        keep = [i for i, t in enumerate(self.texts) if t not in texts]
        return TransferSet([self.texts[i] for i in keep], self.X[keep], self.E[keep])


@dataclass
class Distiller:
    """Encodes texts with the encoder (each distinct text once per process) and distils heads.

    ``encoder``: a fitted feature backend with ``transform(texts) -> (n, d)``; built lazily from
    :data:`DISTILL_ENCODER` (ImportError naming ``make setup`` when its packages or artifact are missing). ``log``:
    where progress lines go while it works (None: nowhere)."""

    encoder_kind: str = DISTILL_ENCODER
    alpha: float = RIDGE_ALPHA
    encoder: object | None = None
    log: Callable[[str], None] | None = None
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _heads: int = field(default=0, repr=False)
    _said_at: float = field(default_factory=time.monotonic, repr=False)

    def _progress(self, force: bool = False) -> None:
        """A progress line through ``log`` (e.g. the asset's ``context.log.info``) at most every
        :data:`PROGRESS_SECONDS`: heads distilled and texts encoded so far."""
        now = time.monotonic()
        if self.log is not None and (force or now - self._said_at >= PROGRESS_SECONDS):
            self._said_at = now
            self.log(
                f"distillation: {self._heads} head fit(s) distilled, {len(self._cache)} texts encoded by "
                f"{self.encoder_kind} so far"
            )

    @property
    def params(self) -> dict:
        """What defines the distillation (part of a model version's content hash): the encoder's artifact key,
        the ridge penalty, the transfer sample's salt."""
        enc = self._encoder()
        return {
            "encoder": self.encoder_kind,
            "encoder_params": getattr(enc, "params", {}),
            "ridge_alpha": self.alpha,
            "transfer_salt": TRANSFER_SALT,
        }

    def _encoder(self):
        if self.encoder is None:
            self.encoder = make_features(self.encoder_kind).fit([])
        return self.encoder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 (len(texts), d)``: each text's embedding (a text met before is not encoded again)."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        for start in range(0, len(missing), ENCODE_CHUNK):
            chunk = missing[start : start + ENCODE_CHUNK]
            for t, row in zip(chunk, np.asarray(self._encoder().transform(chunk), dtype=np.float32), strict=True):
                self._cache[t] = row
            self._progress()
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        return np.vstack([self._cache[t] for t in texts])

    def transfer(self, vectorizer, texts: Sequence[str]) -> TransferSet:
        """The transfer set of the distinct ``texts`` (in first-seen order) under the fitted ``vectorizer``."""
        texts = list(dict.fromkeys(texts))
        return TransferSet(texts, transform(vectorizer, texts), self.embed(texts))

    def distil(self, jobs: Sequence[DistilJob], transfer: TransferSet) -> None:
        """Distil every trained head of ``jobs`` through ``transfer`` (one multi-output ridge fit), in place:
        :func:`distil_heads`."""
        distil_heads(jobs, transfer, self.embed, self.alpha)
        self._heads += len(jobs)
        self._progress(force=len(jobs) > 1)


@dataclass
class DistilJob:
    """One fitted binary head and the labelled works it was fitted on: their texts, labels, weights and groups."""

    head: BinaryHead
    texts: list[str]
    y: np.ndarray
    w: np.ndarray
    groups: list[str]


def encoder_head(E: np.ndarray, y: np.ndarray, w: np.ndarray, groups: Sequence[str], c_grid: Sequence[float]):
    """The encoder head: :func:`.heads.fit_logreg` on the embeddings, C by :func:`.heads.choose_c` as the fast head's
    (same labels, weights, groups and grid)."""
    from .heads import choose_c, fit_logreg

    c, _ = choose_c(E, y, w, list(groups), c_grid)
    return fit_logreg(E, y, w, C=c)


def distil_heads(
    jobs: Sequence[DistilJob], transfer: TransferSet, embed: Callable[[Sequence[str]], np.ndarray], alpha: float
) -> None:
    """For each job whose head is trained (two classes): fit its encoder head on ``embed(job.texts)``, regress the
    encoder head's log-odds over ``transfer`` on the fast features (ridge, ``alpha``; all heads in one multi-output
    fit), and replace the head's linear model by the mean of its label fit and the regression. Sets on each such head
    ``distilled_``: ``{encoder_c, transfer_works, agreement}``, ``agreement`` the Pearson correlation of the
    regression's and the encoder head's log-odds over the transfer set. A head that is not trained, or an empty
    transfer set, is left as it is."""
    from sklearn.linear_model import Ridge

    trained = [j for j in jobs if getattr(j.head, "status_", "") == "trained"]
    if not trained or not transfer.texts:
        return
    encoders_, targets = [], []
    for job in trained:
        enc = encoder_head(embed(job.texts), job.y, job.w, job.groups, job.head.c_grid)
        encoders_.append(enc)
        targets.append(enc.decision_function(transfer.E))
    T = np.column_stack(targets)
    ridge = Ridge(alpha=alpha).fit(transfer.X, T)
    coef = np.atleast_2d(ridge.coef_)
    intercept = np.atleast_1d(ridge.intercept_)
    fitted = np.asarray(transfer.X @ coef.T) + intercept
    for k, (job, enc) in enumerate(zip(trained, encoders_, strict=True)):
        label = job.head.estimator_
        blended = copy.copy(label)  # its coef_ and intercept_ are replaced, not changed in place
        blended.coef_ = ((label.coef_ + coef[k]) / 2).astype(label.coef_.dtype)
        blended.intercept_ = (label.intercept_ + intercept[k]) / 2
        job.head.estimator_ = blended
        spread = np.std(fitted[:, k]) * np.std(T[:, k])
        job.head.distilled_ = {
            "encoder_c": float(enc.C),
            "transfer_works": len(transfer.texts),
            "agreement": float(np.corrcoef(fitted[:, k], T[:, k])[0, 1]) if spread > 0 else None,
        }


def distilled_cv_hook(distiller: Distiller, texts: Sequence[str], transfer: TransferSet):
    """A ``distil(head, train, test)`` for :func:`.heads.grouped_cv_scores`: distils each fold's head from its
    training works (``texts[train]``) through ``transfer`` without the fold's test texts, so no test work enters the
    head in any way."""
    texts = list(texts)

    def hook(head: BinaryHead, y: np.ndarray, w: np.ndarray, groups: Sequence[str], train, test) -> None:
        fold = transfer.without({texts[i] for i in test})
        job = DistilJob(head, [texts[i] for i in train], y[train], w[train], [groups[i] for i in train])
        distiller.distil([job], fold)

    return hook


def transfer_digest(texts: Sequence[str]) -> str:
    """SHA-256 of the transfer set's texts in order (part of a model version's content hash)."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()
