"""Per-client evaluation and the summaries the papers report (means, fairness, IPR/RSD)."""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .core.losses import correct, cross_entropy, masked_mean

Array = jax.Array


def masked_accuracy(logits: Array, labels: Array, mask: Array) -> Array:
    """Fraction correct over real samples (0 for a client with no test samples)."""
    return masked_mean(correct(logits, labels), mask)


def masked_loss(logits: Array, labels: Array, mask: Array) -> Array:
    return masked_mean(cross_entropy(logits, labels), mask)


def chunked_logits(apply: Callable[[Array], Array], x: Array, chunk: int = 1000) -> Array:
    """Logits over a client's padded test set in fixed-size chunks (bounded activation memory)."""
    from .core.train import batched_apply

    return batched_apply(apply, x, chunk)


def summarize(acc: np.ndarray, sizes: np.ndarray | None = None) -> dict:
    """Unweighted mean (the papers' number), sample-weighted mean, and fairness statistics, in %."""
    acc = np.asarray(acc, np.float64) * 100.0
    out = {
        "mean": float(acc.mean()),
        "std": float(acc.std()),
        "worst": float(acc.min()),
        "bottom_decile": float(np.mean(np.sort(acc)[: max(1, int(np.ceil(0.1 * acc.size)))])),
    }
    if sizes is not None:
        sizes = np.asarray(sizes, np.float64)
        out["weighted_mean"] = float((acc * sizes).sum() / max(sizes.sum(), 1.0))
    return out


def ipr_rsd(acc_fl: np.ndarray, acc_local: np.ndarray) -> tuple[float, float]:
    """FedCollab eqs. (11)-(12): share of clients strictly improved over local training, and the
    population std of the per-client gains (both in %)."""
    gain = (np.asarray(acc_fl, np.float64) - np.asarray(acc_local, np.float64)) * 100.0
    return float(np.mean(gain > 0) * 100.0), float(gain.std())
