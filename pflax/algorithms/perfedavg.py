"""Per-FedAvg (Fallah, Mokhtari and Ozdaglar, "Personalized Federated Learning with Theoretical
Guarantees: A Model-Agnostic Meta-Learning Approach", NeurIPS 2020): MAML-style FedAvg whose model is
good after one local step. No official code was released; FL-bench's port
(https://github.com/KarhouTam/FL-bench, ``src/client/perfedavg.py``) sets the defaults.

State: ``server`` = the global (meta) model ``w``; clients keep nothing.

One round, for the participants (the paper's Algorithm 1): each one copies ``w`` and runs
``local_epochs`` (E = 5) epochs of meta-steps. One meta-step draws two minibatches ``D`` and ``D'``
and does

* inner (adaptation) step: ``w' = w - alpha * grad f(w; D)``;
* outer step, first-order variant (``version="fo"``, the default): ``w <- w - beta * grad f(w'; D')``;
  Hessian-free variant (``version="hf"``) with a third minibatch ``D''``:
  ``w <- w - beta * (I - alpha * Hess f(w; D'')) grad f(w'; D')``.

The server takes the sample-size weighted mean of the participants' models. Evaluation
(``evaluate(state, test, train)``, ``train`` required): each client copies ``w``, takes **one**
adaptation step ``w - alpha * grad f(w; B)`` on one random minibatch ``B`` (``batch_size`` samples) of
its own training split, and is scored on its test split; the adapted copy is thrown away (a PRNG
stream of its own, so evaluating never changes training).

Defaults and sources: ``alpha = 0.01`` (FL-bench's inner step is the common optimiser's lr, here
FedPAC's 0.01: Xu et al., ICLR 2023, Appendix B.3), ``beta = 0.001`` (FL-bench ``--beta 1e-3``),
``version = "fo"`` (FL-bench default), E = 5 and batch 50 (FedPAC's common setting).

Deliberate differences from the paper/FL-bench: both steps are plain gradient steps (no momentum or
weight decay; FL-bench's inner step uses its common optimiser); ``D``, ``D'`` (and ``D''``) come from
independent shuffles of the client's data, one meta-step per minibatch slot of an epoch (FL-bench cuts
one loader into consecutive pairs, ``len // 2`` meta-steps per epoch, which is none for a client with
a single minibatch); the HF variant uses the exact Hessian-vector product (``jax.jvp`` of the
gradient) instead of FL-bench's finite difference with ``delta = 1e-3``; aggregation is
sample-size weighted (FL-bench: equal weights). A meta-step whose minibatches hold no real sample is
a no-op. FedCollab's port (its Table 1) instead halves each minibatch into ``D`` and ``D'``:
``pairing="halves"``.

>>> import jax, pflax
>>> train, test = pflax.data.toy_federation()
>>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2, Config(local_epochs=1))
>>> state, metrics = round(state, train, test)  # accuracy after one adaptation step on train
>>> evaluate(state, test, train)["accuracy"].shape
(2,)
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core import federated
from ..core.federated import State, sample_clients
from ..core.train import epoch_order, gather_minibatch, step_if
from . import base
from .common import init_on_execution_devices

Array = jax.Array

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs", "meta_step",
           "adapt", "pieces_for"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """Per-FedAvg's setting on top of the common SGD setting (only ``batch_size`` and ``local_epochs``
    of it are used).

    Attributes:
      alpha: the adaptation (inner) step size, >= 0.
      beta: the meta (outer) step size, > 0.
      version: ``"fo"`` (first order) or ``"hf"`` (Hessian-free).
      pairing: where ``D`` and ``D'`` come from: ``"independent"`` shuffles (the default), or
        ``"halves"`` of one minibatch, skipping minibatches of fewer than 4 samples (FedCollab's port,
        https://github.com/baowenxuan/FedCollab, ``src/algorithm/PerFedAvg.py``; first order only).

    >>> Config().alpha, Config().beta, Config().version, Config().pairing
    (0.01, 0.001, 'fo', 'independent')
    """

    alpha: float = 0.01
    beta: float = 0.001
    version: str = "fo"
    pairing: str = "independent"

    def __post_init__(self):
        super().__post_init__()
        base.require(self.alpha >= 0 and self.beta > 0,
                     f"Per-FedAvg needs alpha >= 0 and beta > 0, got {self.alpha}, {self.beta}")
        base.require(self.version in ("fo", "hf"), f"Per-FedAvg version must be 'fo' or 'hf', got {self.version!r}")
        base.require(self.pairing in ("independent", "halves"),
                     f"Per-FedAvg pairing must be 'independent' or 'halves', got {self.pairing!r}")
        base.require(self.pairing == "independent" or self.version == "fo",
                     "Per-FedAvg's 'halves' pairing has two halves, so it needs version 'fo'")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 state (:meth:`State.from_model`).

    Args:
      key: the run's PRNG key (the meta-model is FedAvg's initial model for the same key).
      model: the split model to meta-learn.
      sample_x: a client's inputs, read for their shape only.
      num_clients: how many clients (``N``).
      config: Per-FedAvg's :class:`Config`.

    Returns:
      ``State`` with ``server`` = the global (meta) model; clients keep nothing.

    >>> import jax, jax.numpy as jnp, pflax
    >>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), jnp.zeros((1, 8, 8, 1)), 6)
    >>> sorted(state.server), state.num_clients
    (['body', 'head'], 6)
    """
    return State.from_model(key, model, sample_x, num_clients, config)


def _sub(a, b, scale):
    return jax.tree.map(lambda x, y: x - scale * y, a, b)


def meta_step(w, batches, weights, model, cfg: Config):
    """One Per-FedAvg update of ``w`` from minibatches ``(D, D'[, D''])`` with 0/1 sample weights.

    Args:
      w: the model.
      batches: two (``"fo"``) or three (``"hf"``) minibatches ``{"x", "y"}``; weights: their 0/1 weights.
      model, cfg: the split model and the config.

    Returns:
      ``(new w, CE of the adapted model on D')``.

    From an all-zero model with ``alpha = 0`` (no adaptation) only the head's bias gets a gradient,
    ``mean(softmax - onehot) = [-1/3, 0, 1/3]`` for labels ``[0, 0, 1]``:

    >>> import jax, jax.numpy as jnp, pflax
    >>> model, x = pflax.models.mlp(3, hidden=(2,)), jnp.ones((3, 4))
    >>> zero = jax.tree.map(jnp.zeros_like, model.init(jax.random.PRNGKey(0), x[:1]))
    >>> b = {"x": x, "y": jnp.array([0, 0, 1])}
    >>> step = jax.jit(lambda w: meta_step(w, [b, b], [jnp.ones(3)] * 2, model, Config(alpha=0.0, beta=3.0)))
    >>> new, loss = step(zero)
    >>> print(f"{float(loss):.3f}", new["head"]["TorchDense_0"]["bias"].round().astype(int).tolist())
    1.099 [1, 0, -1]
    """
    ce = base.ce_loss(model)
    grad = jax.grad(ce)
    w_adapted = _sub(w, grad(w, batches[0], weights[0]), cfg.alpha)
    g = grad(w_adapted, batches[1], weights[1])
    if cfg.version == "hf":
        hvp = jax.jvp(lambda p: grad(p, batches[2], weights[2]), (w,), (g,))[1]
        g = _sub(g, hvp, cfg.alpha)
    return _sub(w, g, cfg.beta), ce(w_adapted, batches[1], weights[1])


# FedCollab's port skips a minibatch of fewer samples, so that each half holds at least two.
MIN_HALVES_BATCH = 4


def halves(valid: Array) -> tuple[Array, Array]:
    """Split one minibatch's real slots into a first and a second half (``D`` and ``D'`` of the
    ``"halves"`` pairing); a minibatch of fewer than ``MIN_HALVES_BATCH`` real samples gives two empty halves.

    Args:
      valid: ``[B]`` bool, the minibatch's real slots (real samples first, as :func:`epoch_order` lays them out).

    Returns:
      ``(first, second)``: two ``[B]`` bool masks.

    >>> first, second = halves(jnp.array([True] * 5 + [False]))
    >>> first.astype(int).tolist(), second.astype(int).tolist()  # pivot 5 // 2 = 2
    ([1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0])
    """
    count = valid.sum()
    pivot = count // 2
    position = jnp.cumsum(valid) - 1  # rank of each real slot
    enough = count >= MIN_HALVES_BATCH
    return valid & (position < pivot) & enough, valid & (position >= pivot) & enough


def _pair_plans(participant: dict, cfg: Config) -> list:
    """The meta-steps' minibatch plans ``[(indices, valid)] * (2 or 3)``, one row per meta-step."""
    if cfg.pairing == "halves":
        idx, ok = epoch_order(participant["key"], participant["mask"], cfg.local_epochs, cfg.batch_size)
        first, second = jax.vmap(halves)(ok)
        return [(idx, first), (idx, second)]
    keys = jax.random.split(participant["key"], 3 if cfg.version == "hf" else 2)
    return [epoch_order(k, participant["mask"], cfg.local_epochs, cfg.batch_size) for k in keys]


def _local_update(w, participant: dict, model, cfg: Config) -> dict:
    plans = _pair_plans(participant, cfg)
    data = {"x": participant["x"], "y": participant["y"]}

    def step(w, rows):
        def meta(w):
            batches = [gather_minibatch(data, idx, ok) for idx, ok in rows]
            weights = [ok.astype(jnp.float32) for _, ok in rows]
            return meta_step(w, batches, weights, model, cfg)

        keep = jnp.all(jnp.stack([jnp.any(ok) for _, ok in rows]))  # every minibatch of the pair is real
        w, loss = step_if(keep, meta, w)
        return w, (loss, keep)

    w_new, (losses, active) = jax.lax.scan(step, w, [(idx, ok) for idx, ok in plans])
    mean_loss = jnp.sum(jnp.where(active, losses, 0.0)) / jnp.maximum(active.sum(), 1)
    return {"mean": w_new, "n": base.num_samples(participant), "loss": mean_loss}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    return federated.mean_or(reduced, state.server), None, {"n": uploads["n"], "loss": uploads["loss"]}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """Per-FedAvg's round: the meta-model to everyone, local meta-steps, the sample-size weighted mean.

    Args:
      model: the split model; cfg: :class:`Config` (``version`` picks the outer step).

    Returns:
      :class:`pflax.core.federated.RoundPieces`.

    >>> import pflax
    >>> hf = pieces_for(pflax.models.mlp(10, hidden=(8,)), Config(version="hf"))
    >>> hf.broadcast is pflax.core.federated.no_broadcast
    True
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda w, participant: _local_update(w, participant, model, cfg),
        server_update=_server_update,
    )


def adapt(w, model, x, y, mask, key, cfg: Config):
    """One step ``w - alpha * grad f(w; B)`` on a random minibatch ``B`` of one client's data.

    Args:
      w: the global model.
      model: the split model.
      x, y, mask: one client's (padded) training split.
      key: the PRNG key that draws ``B``.
      cfg: the config (``alpha``, ``batch_size``).

    Returns:
      The adapted model.

    From an all-zero model, two real samples of class 0 (the padded one takes no part) give the head's
    bias the gradient ``[1/3 - 1, 1/3, 1/3]``:

    >>> import jax, jax.numpy as jnp, pflax
    >>> model, x = pflax.models.mlp(3, hidden=(2,)), jnp.ones((3, 4))
    >>> zero = jax.tree.map(jnp.zeros_like, model.init(jax.random.PRNGKey(0), x[:1]))
    >>> y, mask = jnp.array([0, 0, 2]), jnp.array([True, True, False])
    >>> adapted = jax.jit(lambda w: adapt(w, model, x, y, mask, jax.random.PRNGKey(1), Config(alpha=3.0)))(zero)
    >>> adapted["head"]["TorchDense_0"]["bias"].round().astype(int).tolist()
    [2, -1, -1]
    """
    idx, ok = epoch_order(key, mask, 1, min(cfg.batch_size, mask.shape[0]))
    batch = gather_minibatch({"x": x, "y": y}, idx[0], ok[0])
    return _sub(w, jax.grad(base.ce_loss(model))(w, batch, ok[0].astype(jnp.float32)), cfg.alpha)


def _score(c: dict, w, model, cfg: Config) -> jax.Array:
    adapted = adapt(w, model, c["train_x"], c["train_y"], c["train_mask"], c["key"], cfg)
    return base.accuracy_of(model, adapted, c)


ALGORITHM = federated.build(
    "perfedavg", Config, init, pieces_for,
    _score,
    "Per-FedAvg: MAML-style FedAvg, personalised by one adaptation step at evaluation", base.check_inputs,
    needs_train=True)
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
