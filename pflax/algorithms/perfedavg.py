"""Per-FedAvg (Fallah et al., 2020): MAML-style FedAvg whose model is good after one local step.

State: ``shared`` = the global (meta) model ``w``; nothing is kept per client.

One round, for the participants: each one copies ``w`` and runs ``local_epochs`` (E = 5) epochs of
meta-steps. One meta-step draws two minibatches ``D`` and ``D'`` and does

* inner (adaptation) step: ``w' = w - alpha * grad f(w; D)``;
* outer step, first-order variant (``version="fo"``, the default): ``w <- w - beta * grad f(w'; D')``;
  Hessian-free variant (``version="hf"``) with a third minibatch ``D''``:
  ``w <- w - beta * (I - alpha * Hess f(w; D'')) grad f(w'; D')``.

The server takes the sample-size weighted mean of the participants' models. Evaluation
(``evaluate(state, test, train)``): each client copies ``w``, takes **one** adaptation step
``w - alpha * grad f(w; B)`` on one random minibatch ``B`` (``batch_size`` samples) of its own training
split, and is scored on its test split; the adapted copy is thrown away (a PRNG stream of its own, so
evaluating never changes training).

Defaults and sources: ``alpha = 0.01`` (FL-bench's inner step is the common optimiser's lr, here
FedPAC's 0.01), ``beta = 0.001`` (FL-bench ``--beta 1e-3``), ``version = "fo"`` (FL-bench default),
E = 5 and batch 50 (FedPAC's common setting).

Deliberate differences from the paper/FL-bench: both steps are plain gradient steps (no momentum or
weight decay; FL-bench's inner step uses its common optimiser); ``D``, ``D'`` (and ``D''``) come from
independent shuffles of the client's data, one meta-step per minibatch slot of an epoch (FL-bench cuts
one loader into consecutive pairs, ``len // 2`` meta-steps per epoch, which is none for a client with
a single minibatch); the HF variant uses the exact Hessian-vector product (``jax.jvp`` of the
gradient) instead of FL-bench's finite difference with ``delta = 1e-3``; aggregation is
sample-size weighted (FL-bench: equal weights). A meta-step whose minibatches hold no real sample is
a no-op.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices
from ..core.train import epoch_order, gather_minibatch

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs", "meta_step", "adapt"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    alpha: float = 0.01
    beta: float = 0.001
    version: str = "fo"

    def __post_init__(self):
        super().__post_init__()
        base.require(self.alpha >= 0 and self.beta > 0,
                     f"Per-FedAvg needs alpha >= 0 and beta > 0, got {self.alpha}, {self.beta}")
        base.require(self.version in ("fo", "hf"), f"Per-FedAvg version must be 'fo' or 'hf', got {self.version!r}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    return base.init_state(key, model, sample_x, num_clients, config, lambda params: (params, {}))


def _sub(a, b, scale):
    return jax.tree.map(lambda x, y: x - scale * y, a, b)


def meta_step(w, batches, weights, model, cfg: Config):
    """One Per-FedAvg update of ``w`` from minibatches ``(D, D'[, D''])`` with 0/1 sample weights."""
    ce = base.ce_loss(model)
    grad = jax.grad(ce)
    w_adapted = _sub(w, grad(w, batches[0], weights[0]), cfg.alpha)
    g = grad(w_adapted, batches[1], weights[1])
    if cfg.version == "hf":
        hvp = jax.jvp(lambda p: grad(p, batches[2], weights[2]), (w,), (g,))[1]
        g = _sub(g, hvp, cfg.alpha)
    return _sub(w, g, cfg.beta), ce(w_adapted, batches[1], weights[1])


def _client_update(client, w, model, cfg: Config):
    num_batches = 3 if cfg.version == "hf" else 2
    keys = jax.random.split(client["key"], num_batches)
    plans = [epoch_order(k, client["mask"], cfg.local_epochs, cfg.batch_size) for k in keys]
    data = {"x": client["x"], "y": client["y"]}

    def step(w, rows):
        batches = [gather_minibatch(data, idx, ok) for idx, ok in rows]
        weights = [ok.astype(jnp.float32) for _, ok in rows]
        new_w, loss = meta_step(w, batches, weights, model, cfg)
        keep = jnp.all(jnp.stack([jnp.any(ok) for _, ok in rows]))
        return jax.tree.map(lambda a, b: jnp.where(keep, a, b), new_w, w), (loss, keep)

    w_new, (losses, active) = jax.lax.scan(step, w, [(idx, ok) for idx, ok in plans])
    mean_loss = jnp.sum(jnp.where(active, losses, 0.0)) / jnp.maximum(active.sum(), 1)
    return {"params": w_new, "n": base.num_samples(client), "loss": mean_loss}


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    out, shared = base.run_clients_and_average(
        state, base.client_inputs(state, batch), lambda c, w: _client_update(c, w, model, cfg), "params", state.shared)
    new_state, metrics = base.finish_round(state, batch, shared, None, {"n": out["n"], "loss": out["loss"]})
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test, batch)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = """One Per-FedAvg round: ``(state, batch[, test]) -> (state, metrics)``. With ``test`` (same
clients as ``batch``), ``metrics["accuracy"]`` is the accuracy after one adaptation step."""


def adapt(w, model, x, y, mask, key, cfg: Config):
    """One step ``w - alpha * grad f(w; B)`` on a random minibatch ``B`` of one client's data."""
    idx, ok = epoch_order(key, mask, 1, min(cfg.batch_size, mask.shape[0]))
    batch = gather_minibatch({"x": x, "y": y}, idx[0], ok[0])
    return _sub(w, jax.grad(base.ce_loss(model))(w, batch, ok[0].astype(jnp.float32)), cfg.alpha)


def _evaluate(state: State, test, train):
    if test.x.shape[0] == 0:
        raise base.DataError("test: no clients in the batch")
    model, cfg = state.model, state.config
    ft_key = jax.random.fold_in(jax.random.fold_in(state.key, base.FINETUNE_STREAM), state.round)
    per_client = {"x": train.x, "y": train.y, "mask": train.mask, "test_x": test.x, "test_y": test.y,
                  "test_mask": test.mask, "key": jax.vmap(lambda i: jax.random.fold_in(ft_key, i))(test.client_ids)}

    def one(c, w):
        adapted = adapt(w, model, c["x"], c["y"], c["mask"], c["key"], cfg)
        return base.accuracy_of(model, adapted, c, prefix="test_")

    acc = base.run_clients(state, per_client, one)
    return {"client_ids": test.client_ids, "accuracy": acc, "n": test.mask.sum(1)}


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train)``: accuracy on each client's test split of the global
model after one adaptation step (lr alpha) on a minibatch of that client's ``train`` split."""
