"""FedPAC: personalized FL with feature alignment and classifier collaboration (Xu, Tong, Huang,
"Personalized Federated Learning with Feature Alignment and Classifier Collaboration", ICLR 2023;
official code: https://github.com/JianXu95/FedPAC).

The state (:class:`pflax.core.federated.State`): the server holds the global body ``theta^t``, the
global class centroids ``c^t`` and their validity (``server = {"body", "centroids",
"centroid_valid"}``); every client keeps its personalized head (``clients = {"head"}``).

One round, in the official code's order (the paper's Algorithm 1), for the participants ``S_t``:

1. (``local_update``) each participant computes its statistics ``(v_i, H_i)``
   (:mod:`.statistics`) and its class means with the *received* model (global body + its head);
2. trains its head for ``head_epochs`` (lr 0.1) on frozen features, with a fresh SGD;
3. trains its body for ``body_epochs`` with a fresh SGD on ``CE + lam * MSE(f(x), c_y)`` (Sec. 3.2 and 5.1,
   feature alignment), where ``c_y`` is the previous round's global centroid, or its own pre-training
   class mean where the global one is undefined; no alignment in round 0 (``align_in_round0=False``,
   official);
4. computes its class centroids with the trained local body;
5. (``server_update``) the server averages the bodies (weights ``n_i``) into ``theta^{t+1}``, which
   every client receives, and rebuilds the global centroids from this round's participants
   (count-weighted);
6. for each participant it solves the simplex QP (Sec. 3.3 and 4.1, classifier collaboration,
   :mod:`.combination`), zeroes weights <= 1e-3, renormalises, and mixes the participants' trained
   heads; the mixed heads are the participants' new rows.

With test data (the participants' test splits, same rows as the batch), each participant also
scores its test split with the received model and with its locally trained model
(``metrics["acc_before"]``, ``metrics["acc_after"]``, as the official printout); the round runs no
other evaluation pass (``evaluate`` scores the new state).

Deliberate differences from the official code, all documented here and in the README:

* Head training uses features computed once per round (the body is frozen in that phase, so this is
  the same computation as re-running the body per minibatch; it is only valid without data
  augmentation, which the FMNIST/EMNIST pipelines do not use).
* The QP is solved exactly in float64 (KKT residual ~1e-12) instead of by OSQP (~1e-4);
  ``qp_mode="official"`` restores the float32 PSD test, eigen-flooring and fall-back.
* A class absent on every participant keeps its previous global centroid (the official code crashes).
* Clients with no training samples are never combination candidates, keep their head and have weight 0.
* A round whose update is not finite (diverged training) leaves the state unchanged and reports
  ``metrics["nonfinite"] = True``; the CLI stops with an error then.

Every client holds the same body after each round (step 5), so the state keeps one global body and
one head per client, which is equivalent to per-client bodies and N times smaller.

>>> import jax
>>> from pflax.algorithms import fedpac
>>> from pflax.data import toy_federation
>>> from pflax.models import mlp
>>> train, test = toy_federation()
>>> state = fedpac.init(jax.random.PRNGKey(0), mlp(10, hidden=(8,)), train.x[0], 2, fedpac.Config(body_epochs=1))
>>> sorted(state.server), sorted(state.clients)
(['body', 'centroid_valid', 'centroids'], ['head'])
>>> state, metrics = fedpac.round(state, train, test)
>>> metrics["combination_weights"].shape, metrics["acc_after"].shape
((2, 2), (2,))
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...core import aggregate, federated, stats
from ...core.execution import Execution, replicate
from ...core.federated import State, sample_clients
from ...core.losses import cross_entropy, masked_mean, squared_error_per_sample
from ...core.optim import pytorch_sgd
from ...core.train import batched_apply, local_train
from ...data.clients import ClientData
from ...data.sources import DataError
from ...metrics import masked_accuracy
from ...models import SplitModel
from ..common import check_batch, init_on_execution_devices
from . import combination, statistics
from .combination import combination_weights
from .statistics import FedPACStatistics, fedpac_statistics

Array = jax.Array
PyTree = Any

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "pieces_for", "combination", "statistics", "combination_weights", "fedpac_statistics", "FedPACStatistics"]


@dataclasses.dataclass(frozen=True)
class Config:
    """FedPAC hyper-parameters; defaults are the paper's FMNIST/EMNIST setting (Sec. 5 and its
    appendix: lr 0.01 for the body and 0.1 for the head, momentum 0.5, weight decay 5e-4, batch 50,
    1 head epoch and 5 body epochs, lambda = 1).

    Attributes:
      body_lr, head_lr: learning rates of the body and head phases (>= 0).
      momentum: in [0, 1). weight_decay: coupled L2 (>= 0). batch_size: >= 1.
      head_epochs, body_epochs: epochs of the two local phases (>= 0).
      lam: weight of the feature-alignment term (Sec. 3.2).
      feature_alignment, classifier_collaboration: the ablation switches "FA" and "CC".
      align_in_round0: add the alignment term in round 0 too (official: no).
      qp_mode: ``"exact"`` or ``"official"`` (:mod:`.combination`).
      weight_threshold: combination weights at or below it are dropped (official 1e-3).
      variance_floor: floor on ``v_i`` (0: official).
      execution: how clients are mapped.

    >>> Config().head_lr, Config(body_epochs=1).body_epochs
    (0.1, 1)
    >>> Config(qp_mode="osqp")
    Traceback (most recent call last):
    ValueError: qp_mode must be 'exact' or 'official', got 'osqp'
    """

    body_lr: float = 0.01
    head_lr: float = 0.1
    momentum: float = 0.5
    weight_decay: float = 5e-4
    batch_size: int = 50
    head_epochs: int = 1
    body_epochs: int = 5
    lam: float = 1.0
    feature_alignment: bool = True  # ablation switch "FA"
    classifier_collaboration: bool = True  # ablation switch "CC"
    align_in_round0: bool = False  # official: no alignment term in round 0 (FL-bench: local prototypes)
    qp_mode: str = "exact"  # "exact" (float64, exact) or "official" (float32 PSD test + eigen-flooring)
    weight_threshold: float = combination.WEIGHT_THRESHOLD
    variance_floor: float = 0.0  # optional floor on v_i (guards near-zero variances); 0 = official behaviour
    execution: Execution = Execution()

    def __post_init__(self):
        for name in ("body_lr", "head_lr", "weight_decay", "lam", "variance_floor", "weight_threshold"):
            if getattr(self, name) < 0:
                raise ValueError(f"FedPAC {name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"FedPAC momentum must be in [0, 1), got {self.momentum}")
        if self.batch_size < 1 or self.head_epochs < 0 or self.body_epochs < 0:
            raise ValueError("FedPAC batch_size must be >= 1 and epochs >= 0")
        if self.qp_mode not in ("exact", "official"):
            raise ValueError(f"qp_mode must be 'exact' or 'official', got {self.qp_mode!r}")


@init_on_execution_devices
def init(key: Array, model: SplitModel, sample_x: Array, num_clients: int, config: Config = Config()) -> State:
    """A round-0 FedPAC state.

    Args:
      key: PRNG key, split in three (model, training, sampling) as every algorithm.
      model: a :class:`pflax.models.SplitModel` (``{"body", "head"}``).
      sample_x: one client's samples (only the first is used, for shapes).
      num_clients: ``N``.
      config: :class:`Config`.

    Returns:
      The state: ``server = {"body", "centroids" [K, d] (zeros), "centroid_valid" [K] (False)}`` and
      every client's row ``{"head"}`` the same initial head (as the official deep copies).

    >>> from pflax.models import mlp
    >>> state = init(jax.random.PRNGKey(0), mlp(3, hidden=(4,)), jnp.zeros((1, 6)), 2)
    >>> state.server["centroids"].shape, bool(state.server["centroid_valid"].any())
    ((3, 4), False)
    """
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    params = model.init(jax.random.split(key, 3)[0], sample_x[:1])
    server = {
        "body": params["body"],
        "centroids": jnp.zeros((model.num_classes, model.feature_dim), jnp.float32),
        "centroid_valid": jnp.zeros((model.num_classes,), bool),
    }
    return State.create(key, server, {"head": params["head"]}, num_clients, model, config)


def _broadcast(state: State, client_ids: Array) -> tuple[dict, tuple]:
    """Every participant receives the global body, the global centroids and the round number."""
    return {**state.server, "round": state.round}, ()


def _local_update(message: dict, participant: dict, model: SplitModel, cfg: Config) -> dict:
    """Everything one participant does in a round (steps 1-4). Pure; mapped over participants."""
    x, y, mask = participant["x"], participant["y"], participant["mask"]
    body, head = message["body"], participant["client"]["head"]
    k = model.num_classes
    key_head, key_body = jax.random.split(participant["key"])

    # 1. statistics and pre-training class means with the received model
    feats = batched_apply(lambda xb: model.features(body, xb), x)
    sums = stats.class_sums(feats, y, mask, k)
    local_stats = fedpac_statistics(sums)
    pre_means, _ = stats.class_means(sums)

    # 2. head phase on frozen features (fresh optimizer)
    def head_loss(h, batch, w):
        return masked_mean(cross_entropy(model.logits_from_features(h, batch["z"]), batch["y"]), w)

    new_head, head_loss_value = local_train(
        head, head_loss, {"z": feats, "y": y}, mask, key_head,
        epochs=cfg.head_epochs, batch_size=cfg.batch_size,
        optimizer=pytorch_sgd(cfg.head_lr, cfg.momentum, cfg.weight_decay),
    )

    # 3. body phase with feature alignment (fresh optimizer)
    targets = jnp.where(message["centroid_valid"][:, None], message["centroids"], pre_means)
    align = jnp.asarray(cfg.feature_alignment) & ((message["round"] > 0) | cfg.align_in_round0)
    lam = jnp.where(align, cfg.lam, 0.0)

    def body_loss(b, batch, w):
        z = model.features(b, batch["x"])
        ce = masked_mean(cross_entropy(model.logits_from_features(new_head, z), batch["y"]), w)
        mse = masked_mean(squared_error_per_sample(z, jax.lax.stop_gradient(targets)[batch["y"]]), w)
        return ce + lam * mse

    new_body, body_loss_value = local_train(
        body, body_loss, {"x": x, "y": y}, mask, key_body,
        epochs=cfg.body_epochs, batch_size=cfg.batch_size,
        optimizer=pytorch_sgd(cfg.body_lr, cfg.momentum, cfg.weight_decay),
    )

    # 4. centroids with the trained local body
    post = stats.class_sums(batched_apply(lambda xb: model.features(new_body, xb), x), y, mask, k)
    post_means, _ = stats.class_means(post)

    upload = {
        "mean": new_body,  # averaged on the fly with the sample-size weights
        "head": new_head,
        "v": local_stats.v,
        "h": local_stats.h,
        "n": local_stats.n,
        "counts": post.counts,
        "centroids": post_means,
        "head_loss": head_loss_value,
        "body_loss": body_loss_value,
    }
    if "test_x" in participant:
        logits = lambda b, h: batched_apply(lambda xb: model.apply({"body": b, "head": h}, xb), participant["test_x"])
        upload["acc_before"] = masked_accuracy(logits(body, head), participant["test_y"], participant["test_mask"])
        upload["acc_after"] = masked_accuracy(logits(new_body, new_head), participant["test_y"], participant["test_mask"])
    return upload


def _server_update(state: State, batch: ClientData, uploads: dict, reduced: dict, cfg: Config):
    """Steps 5-6: the new body and centroids, and the participants' combined heads."""
    # 5. body (a round where nobody has data keeps the old body) and centroids
    body = federated.mean_or(reduced, state.server["body"])
    sizes = uploads["n"]
    centroids, valid = aggregate.aggregate_centroids(
        uploads["centroids"], uploads["counts"], state.server["centroids"], state.server["centroid_valid"])

    # 6. classifier collaboration over the participants
    has_data = sizes > 0
    v = jnp.maximum(uploads["v"], cfg.variance_floor)
    if cfg.classifier_collaboration:
        qp_inputs = replicate((v, uploads["h"], has_data), cfg.execution)  # solved whole on each device
        weights = combination_weights(*qp_inputs, mode=cfg.qp_mode, threshold=cfg.weight_threshold)
        weights = replicate(weights, cfg.execution)
    else:
        weights = jnp.eye(sizes.shape[0], dtype=jnp.float32)
    new_heads = aggregate.mix(uploads["head"], weights)
    # A participant with no data keeps the head it had.
    old_heads = federated.take(state.clients, batch.client_ids)["head"]
    new_heads = jax.tree.map(
        lambda new, old: jnp.where(has_data.reshape((-1,) + (1,) * (new.ndim - 1)), new, old), new_heads, old_heads
    )

    server = {"body": body, "centroids": centroids, "centroid_valid": valid}
    metrics = {
        "n": sizes,
        "v": uploads["v"],
        "v_floored": uploads["v"] < cfg.variance_floor,
        "combination_weights": weights,
        "head_loss": uploads["head_loss"],
        "body_loss": uploads["body_loss"],
    }
    for name in ("acc_before", "acc_after"):
        if name in uploads:
            metrics[name] = uploads[name]
    return server, {"head": new_heads}, metrics


def pieces_for(model: SplitModel, cfg: Config) -> federated.RoundPieces:
    """FedPAC's round as :class:`pflax.core.federated.RoundPieces`. Given test splits, the participants
    score them before and after local training inside ``local_update`` (``acc_before``, ``acc_after``:
    the official code's ``acc0``/``acc1``), and ``accuracy`` is every algorithm's metric: the new
    state's personalized models (aggregated body + combined head) on the same splits.

    Args:
      model: the split model.
      cfg: :class:`Config`.
    Returns:
      the :class:`pflax.core.federated.RoundPieces`.

    >>> pieces_for(None, Config()).test_in_client
    True
    """
    return federated.RoundPieces(
        broadcast=_broadcast,
        local_update=lambda message, participant: _local_update(message, participant, model, cfg),
        server_update=lambda state, batch, uploads, reduced: _server_update(state, batch, uploads, reduced, cfg),
        test_in_client=True,
    )


def _score(c: dict, server: dict, model: SplitModel) -> Array:
    logits = batched_apply(lambda xb: model.apply({"body": server["body"], "head": c["client"]["head"]}, xb), c["x"])
    return masked_accuracy(logits, c["y"], c["mask"])


def _evaluate(state: State, test: ClientData, train: ClientData | None = None) -> dict:
    model = state.model
    return federated.evaluate_clients(state, test, train, lambda c, server: _score(c, server, model))


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train=None) -> {"client_ids", "accuracy" [m], "n" [m]}``: the
accuracy of each client's personalized model (global body + its head) on its own test split
(``train`` is not used). Pure and jit-compiled."""


def _round(state: State, batch: ClientData, test: ClientData | None = None) -> tuple[State, dict]:
    return federated.run_round(pieces_for(state.model, state.config), state, batch, test, evaluate=_evaluate)


round = jax.jit(_round)  # noqa: A001 - the library's verb is `round`
round.__doc__ = """One FedPAC communication round: ``round(state, batch, test=None) -> (state, metrics)``.

``batch`` holds the participants' whole training sets (``ClientData`` with their ``client_ids``);
``test`` (optional, same clients) adds ``acc_before``/``acc_after`` to the metrics: the received
personalized model before local training and the locally trained model, as the official printout.
Metrics are per participant, never averaged: ``n``, ``v``, ``v_floored``, ``combination_weights``
``[m, m]``, ``head_loss``, ``body_loss``, ``client_ids``, ``nonfinite``. Pure and jit-compiled.
"""


def check_inputs(state: State, batch: ClientData, test: ClientData | None = None) -> None:
    """Eager validation with clear messages (the CLI and the examples call it once per dataset).

    Args:
      state: the FedPAC state the data is for.
      batch: the round's participants' training data.
      test: optionally the same participants' test data.

    Raises ``DataError`` for anything :func:`pflax.data.validate` rejects (shapes, dtypes, labels
    outside the model's classes, NaN/Inf, duplicate ids), for zero clients, client ids outside the
    federation, samples whose shape the model cannot take, and ``test`` rows that are not the same
    clients as ``batch`` (``round`` pairs them row by row).

    Documented behaviour for valid but degenerate inputs (no error): an empty client has weight 0
    in every aggregate, is never a combination candidate and keeps its head; a class missing on some
    clients is simply absent from their statistics; a class missing on every participant keeps its
    previous global centroid (and validity); a round whose result is not finite leaves the state
    unchanged and reports ``metrics["nonfinite"]``.

    Returns:
      None.

    >>> from pflax.data import toy_federation
    >>> from pflax.models import mlp
    >>> train, test = toy_federation()
    >>> state = init(jax.random.PRNGKey(0), mlp(10, hidden=(8,)), train.x[0], 2)
    >>> check_inputs(state, train, test.take([1, 0]))
    Traceback (most recent call last):
    pflax.data.sources.DataError: test: rows must be the same clients, in the same order, as batch's ...
    """
    check_batch(state.num_clients, state.model.num_classes, batch, "batch")
    if test is not None:
        check_batch(state.num_clients, state.model.num_classes, test, "test")
        if not np.array_equal(np.asarray(batch.client_ids), np.asarray(test.client_ids)):
            raise DataError("test: rows must be the same clients, in the same order, as batch's (round pairs them row by row)")
    _check_sample_shape(state, batch)


def _check_sample_shape(state: State, batch: ClientData) -> None:
    """Abstractly apply the model to one sample, so a wrong image size fails here, readably."""
    sample = jax.ShapeDtypeStruct((1,) + tuple(batch.x.shape[2:]), batch.x.dtype)
    try:
        jax.eval_shape(state.model.features, state.server["body"], sample)
    except Exception as err:  # flax/lax shape errors
        raise DataError(
            f"batch: samples of shape {tuple(batch.x.shape[2:])} do not fit the model {state.model.name!r} "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err


ALGORITHM = federated.Algorithm(
    name="fedpac", Config=Config, init=init, round=round, evaluate=evaluate, pieces=pieces_for,
    check_inputs=check_inputs,
    summary="FedPAC: shared body with feature alignment, personal heads combined by a per-client QP",
)
