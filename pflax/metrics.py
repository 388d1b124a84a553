"""Per-client evaluation and the summaries the papers report (means, fairness, IPR/RSD)."""
from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from .core.losses import correct, cross_entropy, masked_mean

Array = jax.Array


def masked_accuracy(logits: Array, labels: Array, mask: Array) -> Array:
    """Fraction correct over real samples (0 for a client with no test samples).

    Args:
      logits: ``[n, C]`` scores.
      labels: ``[n]`` integer classes.
      mask: ``[n]`` bool, the real samples.

    Returns:
      A scalar in ``[0, 1]``.

    >>> import jax.numpy as jnp
    >>> float(masked_accuracy(jnp.array([[0.0, 1.0], [1.0, 0.0]]), jnp.array([1, 1]), jnp.array([True, False])))
    1.0
    """
    return masked_mean(correct(logits, labels), mask)


def masked_loss(logits: Array, labels: Array, mask: Array) -> Array:
    """Mean softmax cross-entropy over real samples (0 for a client with no samples).

    Args:
      logits, labels, mask: as in :func:`masked_accuracy`.

    Returns:
      A scalar loss.

    >>> import jax.numpy as jnp
    >>> round(float(masked_loss(jnp.zeros((2, 2)), jnp.array([0, 1]), jnp.array([True, True]))), 3)
    0.693
    """
    return masked_mean(cross_entropy(logits, labels), mask)


def chunked_logits(apply: Callable[[Array], Array], x: Array, chunk: int = 1000) -> Array:
    """Logits over a client's padded test set in fixed-size chunks (bounded activation memory).

    Args:
      apply: ``x_chunk -> logits_chunk``, e.g. ``lambda x: model.apply(params, x)``.
      x: ``[n, ...]`` inputs.
      chunk: rows per call.

    Returns:
      ``[n, C]`` logits.

    >>> import jax.numpy as jnp
    >>> chunked_logits(lambda x: x.reshape(len(x), -1), jnp.zeros((3, 2, 2)), chunk=2).shape
    (3, 4)
    """
    from .core.train import batched_apply

    return batched_apply(apply, x, chunk)


def _accuracies(name: str, values) -> np.ndarray:
    """Per-client accuracies as a float64 vector of fractions in [0, 1], or a ValueError naming ``name``."""
    a = np.asarray(values, np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of per-client accuracies, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or Inf")
    if a.min() < 0.0 or a.max() > 1.0:
        raise ValueError(f"{name} must be fractions in [0, 1] (not %), found [{a.min()}, {a.max()}]")
    return a


def summarize(accuracy: np.ndarray, n: np.ndarray | None = None, local_only_accuracy: np.ndarray | None = None,
              *, sizes: np.ndarray | None = None) -> dict:
    """Per-client accuracy summary for a results file; every accuracy key is in %.

    ``accuracy``: per-client accuracies as fractions in [0, 1]. ``n``: per-client sample counts (test
    sizes for a test accuracy), used for the sample-weighted mean; ``sizes=`` is an older name for it.
    ``local_only_accuracy``: the same clients' accuracies under a Local-only run (same model, rounds and
    data), which adds FedCollab's IPR and RSD (eqs. (11)-(12), :func:`ipr_rsd`).

    Keys:

    * ``num_clients``;
    * ``mean``: unweighted mean over clients (the number the papers report);
    * ``std``: population standard deviation (ddof = 0) over clients;
    * ``worst`` / ``best``: the lowest / highest client;
    * ``bottom_decile``: the mean of the ``ceil(0.1 * num_clients)`` lowest clients (2 of 20, 10 of 100);
    * ``weighted_mean`` (with ``n``): ``sum(n_i acc_i) / sum(n_i)``, i.e. total correct / total samples
      (0 when every ``n_i`` is 0);
    * with ``local_only_accuracy``: ``local_only_mean``, ``mean_gain`` (mean of acc_i - local_i),
      ``ipr`` (share of clients with a strictly positive gain) and ``rsd`` (population std of the gains).

    Args:
      accuracy: ``[N]`` per-client accuracies in [0, 1].
      n: ``[N]`` per-client sample counts, or ``None``.
      local_only_accuracy: ``[N]`` Local-only accuracies of the same clients, or ``None``.
      sizes: the older name of ``n``.

    Returns:
      A dict with the keys above (floats, accuracies in %).

    >>> s = summarize(np.array([0.5, 1.0]), n=np.array([1, 3]), local_only_accuracy=np.array([0.5, 0.5]))
    >>> s["mean"], s["worst"], s["weighted_mean"], s["ipr"]
    (75.0, 50.0, 87.5, 50.0)
    """
    if n is not None and sizes is not None:
        raise TypeError("pass the sample counts once, as n (sizes= is the older name)")
    n = sizes if n is None else n
    acc = _accuracies("accuracy", accuracy)
    pct = acc * 100.0
    out = {
        "num_clients": int(acc.size),
        "mean": float(pct.mean()),
        "std": float(pct.std()),
        "worst": float(pct.min()),
        "best": float(pct.max()),
        "bottom_decile": float(np.mean(np.sort(pct)[: max(1, int(np.ceil(0.1 * pct.size)))])),
    }
    if n is not None:
        w = np.asarray(n, np.float64)
        if w.shape != acc.shape:
            raise ValueError(f"n must have one count per client, shape {acc.shape}; got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("n must hold finite, non-negative sample counts")
        out["weighted_mean"] = float((pct * w).sum() / max(w.sum(), 1.0))
    if local_only_accuracy is not None:
        local = _accuracies("local_only_accuracy", local_only_accuracy)
        if local.shape != acc.shape:
            raise ValueError(f"local_only_accuracy must have one value per client, shape {acc.shape}; "
                             f"got {local.shape}")
        out["local_only_mean"] = float(local.mean() * 100.0)
        out["mean_gain"] = float((acc - local).mean() * 100.0)
        out["ipr"], out["rsd"] = ipr_rsd(acc, local)
    return out


def ipr_rsd(acc_fl: np.ndarray, acc_local: np.ndarray) -> tuple[float, float]:
    """FedCollab eqs. (11)-(12): share of clients strictly improved over local training, and the
    population std of the per-client gains (both in %).

    Args:
      acc_fl: ``[N]`` per-client accuracies of the federated method, in [0, 1].
      acc_local: ``[N]`` the same clients' Local-only accuracies, in [0, 1].

    Returns:
      ``(ipr, rsd)`` in %.

    >>> ipr_rsd(np.array([0.5, 1.0]), np.array([0.5, 0.5]))
    (50.0, 25.0)
    """
    gain = (np.asarray(acc_fl, np.float64) - np.asarray(acc_local, np.float64)) * 100.0
    return float(np.mean(gain > 0) * 100.0), float(gain.std())


EVALUATION_STAGES = {
    "after_aggregation": "the personalised model as the server left it at the end of the round (FedPAC's acc0 "
                         "style: global body + combined head), before any further local training",
    "after_local_training": "after the client's local update of that round (FedPAC's acc2 style)",
    "after_fine_tuning": "after extra local fine-tuning on the client's training data (FedAvg-FT, FedBABU)",
    "best_over_rounds": "the best accuracy over the evaluations up to that round (FedPick's tables)",
}


def evaluated_model(model: str, round: int, stage: str = "after_aggregation", clients: str = "all",
                    split: str = "test", total_rounds: int | None = None, **extra) -> dict:
    """The "which model was evaluated, and when" fields to store next to :func:`summarize`'s numbers.

    ``model``: what parameters were evaluated, in words (e.g. ``"personalised: global body + combined
    head"``, ``"global FedAvg model"``). ``round``: completed communication rounds at evaluation (0 =
    the initial model). ``stage``: one of :data:`EVALUATION_STAGES`. ``clients``: ``"all"`` or
    ``"participants"`` (the official FedPAC printout averages participants only). ``split``: which data
    (``"test"``). ``total_rounds``: the run's length, when known. ``extra``: any further JSON-able fields
    (e.g. ``fine_tune_epochs=5``).

    Args:
      model, round, stage, clients, split, total_rounds, extra: as above.

    Returns:
      A JSON-able dict, with ``stage_meaning`` spelled out; ``ValueError`` on an invalid field.

    >>> r = evaluated_model("global FedAvg model", 100, total_rounds=200, fine_tune_epochs=5)
    >>> r["stage"], r["total_rounds"], r["fine_tune_epochs"]
    ('after_aggregation', 200, 5)
    """
    if not isinstance(model, str) or not model.strip():
        raise ValueError("model must be a non-empty description of the evaluated parameters")
    if isinstance(round, bool) or not isinstance(round, (int, np.integer)) or round < 0:
        raise ValueError(f"round must be a non-negative integer (completed rounds), got {round!r}")
    if stage not in EVALUATION_STAGES:
        raise ValueError(f"stage must be one of {sorted(EVALUATION_STAGES)}, got {stage!r}")
    if clients not in ("all", "participants"):
        raise ValueError(f"clients must be 'all' or 'participants', got {clients!r}")
    if not isinstance(split, str) or not split:
        raise ValueError("split must name the evaluated data, e.g. 'test'")
    record = {"model": model, "round": int(round), "stage": stage, "stage_meaning": EVALUATION_STAGES[stage],
              "clients": clients, "split": split}
    if total_rounds is not None:
        if isinstance(total_rounds, bool) or not isinstance(total_rounds, (int, np.integer)) or total_rounds < round:
            raise ValueError(f"total_rounds must be an integer >= round ({round}), got {total_rounds!r}")
        record["total_rounds"] = int(total_rounds)
    clash = set(extra) & set(record)
    if clash:
        raise ValueError(f"extra fields {sorted(clash)} would overwrite standard ones")
    record.update(extra)
    return record
