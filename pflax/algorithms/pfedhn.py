"""pFedHN (Shamsian et al., 2021): a server hypernetwork generates every client's model.

State: ``shared = {"hypernetwork": psi, "opt_state": ...}``, the hypernetwork ``psi`` (an MLP ``h_psi``
from a client embedding to the whole target model flattened with ``jax.flatten_util.ravel_pytree``:
``Linear(embed_dim, hidden) -> ReLU -> [Linear(hidden, hidden) -> ReLU] * (hidden_layers - 1) ->
Linear(hidden, P)``) and the server optimiser's state for it; ``local = {"embed": [embed_dim],
"opt_state": ...}``, each client's embedding (learned by the server) and the optimiser state for it.

One round, for the participants ``i``:

1. the server generates ``theta_i = h_psi(e_i)`` and sends it;
2. the client trains ``theta_i`` for ``inner_steps`` (default 50) SGD steps, each on a fresh random
   minibatch of ``batch_size`` of its training samples (fresh optimiser, FedPAC's common setting:
   lr 0.01, momentum 0.5, wd 5e-4), and returns ``dtheta_i = theta_i - theta~_i``;
3. the server applies the chain rule with ``jax.vjp``: ``grad_psi = sum_i J_psi(e_i)^T dtheta_i`` and
   ``grad_{e_i} = J_{e_i}^T dtheta_i`` (each client's pullback is taken as it finishes and its ``psi``
   term added to a running sum, so no generated model or delta is ever stacked), and feeds them to
   the official server optimiser, PyTorch SGD with ``server_lr``, momentum ``server_momentum`` = 0.9
   and coupled weight decay ``server_weight_decay`` = 1e-3 (official ``pFedHN`` trainer); with both 0
   the step is plain ``psi <- psi - server_lr * grad_psi``, ``e_i <- e_i - server_lr * grad_{e_i}``.

Evaluation: each client's generated model ``h_psi(e_i)`` (no local training) on its own test split.

Defaults and sources: ``server_lr = lr = 0.01`` (FedPAC, spec D: both tuned to 0.01);
``embed_dim = 16``, ``hidden = 100`` (the official hidden width; the official embedding size is
``1 + N / 4``), ``hidden_layers = 2``, ``inner_steps = 50`` (official). The hypernetwork's last layer
has ``hidden * P`` weights, so it is meant for the small models (the MLP, the FedPAC CNN with ~80k
parameters gives ~8M); layers use PyTorch's default uniform init, embeddings ``N(0, 1)`` (PyTorch
``nn.Embedding``).

Deliberate differences from the official code: all participants of a round train from the same
``psi`` and their gradients are summed into one server step (the official code takes one server step
per sampled client, sequentially; the sum is that many steps taken at one point, with one momentum
update per round); the official gradient-norm clip at 50 is not applied (it clips one client's
gradient; clipping the sum would be a different rule, and clipping each client's would need a copy of
``psi``'s gradient per client); an embedding's weight decay and momentum act only in rounds where its
client participates (officially the whole embedding table decays every step); ``local_epochs`` is
unused (the client takes ``inner_steps`` steps); the client optimiser is FedPAC's common SGD
(official: lr 5e-3, momentum 0.9, wd 5e-5). A participant without data returns ``dtheta = 0`` and
changes nothing.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from . import base
from .base import State, check_inputs, sample_clients
from .common import init_on_execution_devices
from ..core.optim import pytorch_sgd
from ..core import rng
from ..core.execution import map_reduce_clients
from ..core.train import sgd_steps

__all__ = ["Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "generate_flat", "server_optimizer", "unraveler"]

HYPERNET_STREAM = 0x4E7


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    server_lr: float = 0.01
    server_momentum: float = 0.9
    server_weight_decay: float = 1e-3
    embed_dim: int = 16
    hidden: int = 100
    hidden_layers: int = 2
    inner_steps: int = 50

    def __post_init__(self):
        super().__post_init__()
        base.require(self.server_lr > 0, f"pFedHN server_lr must be > 0, got {self.server_lr}")
        base.require(0.0 <= self.server_momentum < 1.0, f"pFedHN server_momentum must be in [0, 1), got {self.server_momentum}")
        base.require(self.server_weight_decay >= 0, f"pFedHN server_weight_decay must be >= 0, got {self.server_weight_decay}")
        base.require(self.embed_dim >= 1 and self.hidden >= 1 and self.hidden_layers >= 1,
                     "pFedHN embed_dim, hidden and hidden_layers must be >= 1")
        base.require(self.inner_steps >= 0, f"pFedHN inner_steps must be >= 0, got {self.inner_steps}")


def _dense(key, fan_in: int, fan_out: int):
    bound = 1.0 / jnp.sqrt(fan_in)
    kw, kb = jax.random.split(key)
    return {"w": rng.uniform(kw, (fan_in, fan_out), jnp.float32, -bound, bound),
            "b": jax.random.uniform(kb, (fan_out,), jnp.float32, -bound, bound)}


def init_hypernetwork(key, cfg: Config, target_size: int):
    widths = [cfg.embed_dim] + [cfg.hidden] * cfg.hidden_layers
    keys = jax.random.split(key, len(widths))
    hidden = [_dense(k, a, b) for k, a, b in zip(keys[:-1], widths[:-1], widths[1:])]
    return {"hidden": hidden, "out": _dense(keys[-1], cfg.hidden, target_size)}


def generate_flat(psi, embed):
    """``h_psi(e)``: the flattened target-model parameters for one embedding."""
    h = embed
    for layer in psi["hidden"]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    return h @ psi["out"]["w"] + psi["out"]["b"]


def unraveler(model, sample_x):
    """The inverse of ``ravel_pytree`` for the target model's parameter tree."""
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), sample_x[:1])
    return ravel_pytree(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))[1]


def server_optimizer(cfg: Config):
    return pytorch_sgd(cfg.server_lr, cfg.server_momentum, cfg.server_weight_decay)


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    k_model = jax.random.split(key, 3)[0]
    k_hnet, k_embed = jax.random.split(jax.random.fold_in(k_model, HYPERNET_STREAM))
    size = ravel_pytree(model.init(k_model, sample_x[:1]))[0].size
    psi = init_hypernetwork(k_hnet, config, size)
    opt = server_optimizer(config)
    embeds = rng.normal(k_embed, (num_clients, config.embed_dim), jnp.float32)
    shared = {"hypernetwork": psi, "opt_state": opt.init(psi)}
    state = base.init_state(key, model, sample_x, num_clients, config, lambda params: (shared, {}))
    return state.replace(local={"embed": embeds, "opt_state": jax.vmap(opt.init)(embeds)})


def random_minibatches(key, mask, steps: int, batch_size: int):
    """``(indices, valid)`` ``[steps, B]``: an independent random minibatch of real samples per step."""
    b = min(batch_size, mask.shape[0])

    def one(k):
        order = jnp.argsort(jnp.where(mask, jax.random.uniform(k, mask.shape), 2.0))[:b]
        return order, mask[order]

    return jax.vmap(one)(jax.random.split(key, steps))


def _client_update(client, psi, model, cfg: Config, unravel):
    """Generate the client's model, run its inner steps, and pull ``dtheta`` back through the generator:
    returns ``(per-client outputs incl. J_e^T dtheta, this client's term J_psi^T dtheta of the sum)``."""
    flat, pullback = jax.vjp(generate_flat, psi, client["local"]["embed"])
    idx, valid = random_minibatches(client["key"], client["mask"], cfg.inner_steps, cfg.batch_size)
    trained, loss = sgd_steps(unravel(flat), base.ce_loss(model), {"x": client["x"], "y": client["y"]}, idx, valid,
                              cfg.optimizer())
    delta = flat - ravel_pytree(trained)[0]
    grad_psi, grad_embed = pullback(delta)
    kept = {"grad_embed": grad_embed, "n": base.num_samples(client), "loss": loss, "delta_norm": jnp.linalg.norm(delta)}
    return kept, grad_psi


def _round(state: State, batch, test=None):
    model, cfg = state.model, state.config
    opt = server_optimizer(cfg)
    unravel = unraveler(model, batch.x[0])
    psi = state.shared["hypernetwork"]
    per_client = base.client_inputs(state, batch)
    local = per_client["local"]
    # Each client generates its model and adds its J_psi^T dtheta to a running sum as it finishes, so
    # neither the generated models nor the deltas are ever stacked.
    out, grad_psi = map_reduce_clients(lambda c, p: _client_update(c, p, model, cfg, unravel), per_client, psi,
                                       cfg.execution)
    grad_embeds = out["grad_embed"]
    psi_updates, psi_opt = opt.update(grad_psi, state.shared["opt_state"], psi)
    embed_updates, embed_opt = jax.vmap(opt.update)(grad_embeds, local["opt_state"], local["embed"])
    shared = {"hypernetwork": optax.apply_updates(psi, psi_updates), "opt_state": psi_opt}
    new_local = {"embed": optax.apply_updates(local["embed"], embed_updates), "opt_state": embed_opt}
    metrics = {"n": out["n"], "loss": out["loss"], "delta_norm": out["delta_norm"]}
    new_state, metrics = base.finish_round(state, batch, shared, new_local, metrics)
    if test is not None:
        metrics["accuracy"] = _evaluate(new_state, test)["accuracy"]
    return new_state, metrics


round = jax.jit(_round)  # noqa: A001
round.__doc__ = "One pFedHN round: ``(state, batch[, test]) -> (state, metrics)``; per-client metrics."


def _evaluate(state: State, test):
    unravel = unraveler(state.model, test.x[0])
    return base.evaluate_personal(state, test, lambda c, shared: unravel(generate_flat(shared["hypernetwork"], c["local"]["embed"])))


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = "Each client's generated model h_psi(e_i) on its own test split: ``{client_ids, accuracy, n}``."
