"""pFedHN (Shamsian et al., "Personalized Federated Learning using Hypernetworks", ICML 2021; official
code: https://github.com/AvivSham/pFedHN): a server hypernetwork generates every client's model.

State: ``server = {"hypernetwork": psi, "opt_state": ...}``, the hypernetwork ``psi`` (an MLP ``h_psi``
from a client embedding to the whole target model flattened with ``jax.flatten_util.ravel_pytree``:
``Linear(embed_dim, hidden) -> ReLU -> [Linear(hidden, hidden) -> ReLU] * (hidden_layers - 1) ->
Linear(hidden, P)``) and the server optimiser's state for it; ``clients = {"embed": [N, embed_dim],
"opt_state": ...}``, each client's embedding (learned by the server) and the optimiser state for it.

One round, for the participants ``i`` (the paper's Algorithm 1):

1. the server generates ``theta_i = h_psi(e_i)`` and sends it;
2. the client trains ``theta_i`` for ``inner_steps`` (default 50) SGD steps, each on a fresh random
   minibatch of ``batch_size`` of its training samples (fresh optimiser, FedPAC's common setting:
   lr 0.01, momentum 0.5, wd 5e-4), and returns ``dtheta_i = theta_i - theta~_i``;
3. the server applies the chain rule with ``jax.vjp``: ``grad_psi = sum_i J_psi(e_i)^T dtheta_i`` and
   ``grad_{e_i} = J_{e_i}^T dtheta_i``, and feeds them to the official server optimiser, PyTorch SGD
   with ``server_lr``, momentum ``server_momentum`` = 0.9 and coupled weight decay
   ``server_weight_decay`` = 1e-3 (official ``pFedHN`` trainer); with both 0 the step is plain
   ``psi <- psi - server_lr * grad_psi``, ``e_i <- e_i - server_lr * grad_{e_i}``.

As round pieces: ``broadcast`` sends ``psi``; ``local_update`` runs steps 1-3 for one participant, the
server's generation and pullback in the participant's own slot of the client map, and uploads its
``J_psi^T dtheta_i`` as a ``"sum"`` (added to a running sum as each participant finishes) and its
``J_e^T dtheta_i``; ``server_update`` takes the optimiser step on ``psi`` and the participants'
embeddings. Generating in ``broadcast`` (a stacked ``[m, P]`` of generated models, then a stacked
``[m, P]`` of deltas) gives the same bits but holds two models per participant: measured under
``map`` with ``mlp(10, hidden=(256, 256))``, a round's working memory grew by ~1.9 models per
participant from 64 to 256 participants, against none here.

Evaluation: each client's generated model ``h_psi(e_i)`` (no local training) on its own test split.

Defaults and sources: ``server_lr = lr = 0.01`` (FedPAC's baseline setting, Xu et al., ICLR 2023: both
tuned to 0.01); ``embed_dim = 16``, ``hidden = 100`` (the official hidden width; the official
embedding size is ``1 + N / 4``), ``hidden_layers = 2``, ``inner_steps = 50`` (official). The
hypernetwork's last layer has ``hidden * P`` weights, so it is meant for the small models (the MLP,
the FedPAC CNN with ~80k parameters gives ~8M); layers use PyTorch's default uniform init, embeddings
``N(0, 1)`` (PyTorch ``nn.Embedding``).

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

>>> import jax, pflax
>>> train, test = pflax.data.toy_federation()
>>> cfg = pflax.pfedhn.Config(inner_steps=2, embed_dim=4, hidden=8)
>>> state = pflax.pfedhn.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2, cfg)
>>> state.clients["embed"].shape
(2, 4)
>>> state, metrics = pflax.pfedhn.round(state, train, test)
>>> metrics["delta_norm"].shape, metrics["accuracy"].shape
((2,), (2,))
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from . import base
from .common import init_on_execution_devices
from ..core import federated, rng
from ..core.federated import State, sample_clients
from ..core.optim import pytorch_sgd
from ..core.train import sgd_steps

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "generate_flat", "random_minibatches", "server_optimizer", "unraveler"]

HYPERNET_STREAM = 0x4E7


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """pFedHN's server optimiser, its hypernetwork and the client's ``inner_steps``, on top of the common
    SGD setting (the client's optimiser; ``local_epochs`` is unused).

    Attributes:
      server_lr, server_momentum, server_weight_decay: the server's PyTorch SGD on ``psi`` and the
        embeddings (official trainer: momentum 0.9, weight decay 1e-3).
      embed_dim: the client embedding's size.
      hidden, hidden_layers: the hypernetwork's hidden width and number of hidden layers.
      inner_steps: the client's SGD steps per round (official: 50).

    >>> Config().hidden, Config().inner_steps, Config(embed_dim=4).embed_dim
    (100, 50, 4)
    """

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
    """A fresh hypernetwork ``psi`` (PyTorch's default uniform ``Linear`` init).

    Args:
      key: PRNG key; cfg: :class:`Config` (``embed_dim``, ``hidden``, ``hidden_layers``);
      target_size: ``P``, the target model's number of parameters.

    Returns:
      ``{"hidden": [{"w", "b"}, ...], "out": {"w": [hidden, P], "b": [P]}}``.

    >>> import jax
    >>> psi = init_hypernetwork(jax.random.PRNGKey(0), Config(embed_dim=3, hidden=4), 7)
    >>> [layer["w"].shape for layer in psi["hidden"]], psi["out"]["w"].shape
    ([(3, 4), (4, 4)], (4, 7))
    """
    widths = [cfg.embed_dim] + [cfg.hidden] * cfg.hidden_layers
    keys = jax.random.split(key, len(widths))
    hidden = [_dense(k, a, b) for k, a, b in zip(keys[:-1], widths[:-1], widths[1:])]
    return {"hidden": hidden, "out": _dense(keys[-1], cfg.hidden, target_size)}


def generate_flat(psi, embed):
    """``h_psi(e)``: the flattened target-model parameters for one embedding.

    Args:
      psi: the hypernetwork (:func:`init_hypernetwork`); embed: one client's embedding ``[embed_dim]``.

    Returns:
      ``[P]``, in ``ravel_pytree`` order of the target model (:func:`unraveler` turns it into its tree).

    >>> import jax
    >>> psi = init_hypernetwork(jax.random.PRNGKey(0), Config(embed_dim=3, hidden=4), 7)
    >>> generate_flat(psi, jax.numpy.ones(3)).shape
    (7,)
    """
    h = embed
    for layer in psi["hidden"]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    return h @ psi["out"]["w"] + psi["out"]["b"]


def unraveler(model, sample_x):
    """The inverse of ``ravel_pytree`` for ``model``'s parameter tree.

    Args:
      model: the target split model; sample_x: inputs whose ``sample_x[:1]`` gives the shapes (traced
        only, nothing is initialised).

    Returns:
      ``unravel(flat [P]) -> params``.

    >>> import jax, jax.numpy as jnp
    >>> from pflax.models import mlp
    >>> params = unraveler(mlp(10, hidden=(8,)), jnp.zeros((1, 8, 8, 1)))(jnp.zeros(8 * 8 * 8 + 8 + 8 * 10 + 10))
    >>> sorted(params)
    ['body', 'head']
    """
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), sample_x[:1])
    return ravel_pytree(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))[1]


def server_optimizer(cfg: Config):
    """The server's optimiser of ``psi`` and the embeddings: PyTorch SGD with ``server_lr``,
    ``server_momentum`` and coupled ``server_weight_decay`` (official pFedHN trainer).

    Args:
      cfg: :class:`Config`.

    Returns:
      An optax ``GradientTransformation`` (:func:`pflax.core.optim.pytorch_sgd`).

    >>> import jax.numpy as jnp
    >>> opt, g = server_optimizer(Config(server_lr=1.0, server_weight_decay=0.0)), jnp.array([10.0])
    >>> first, opt_state = opt.update(g, opt.init(g), g)
    >>> first.tolist(), opt.update(g, opt_state, g)[0].tolist()  # momentum 0.9: -g, then -(g + 0.9 g)
    ([-10.0], [-19.0])
    """
    return pytorch_sgd(cfg.server_lr, cfg.server_momentum, cfg.server_weight_decay)


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 pFedHN state.

    Args:
      key: PRNG key; ``psi`` and the embeddings come from ``fold_in(split(key, 3)[0], 0x4E7)``.
      model: the target (split) model the hypernetwork generates.
      sample_x: one client's inputs (only the shape of ``sample_x[:1]`` is used).
      num_clients: ``N``.
      config: :class:`Config`.

    Returns:
      ``State`` with ``server = {"hypernetwork": psi, "opt_state"}`` and ``clients = {"embed": [N,
      embed_dim] ~ N(0, 1), "opt_state"}``.

    >>> import jax, pflax
    >>> train, _ = pflax.data.toy_federation()
    >>> cfg = Config(embed_dim=4, hidden=8)
    >>> state = init(jax.random.PRNGKey(1), pflax.models.mlp(10, hidden=(8,)), train.x[1], 2, cfg)
    >>> state.server["hypernetwork"]["out"]["w"].shape  # the target mlp has P = 610 parameters
    (8, 610)
    """
    k_model = jax.random.split(key, 3)[0]
    k_hnet, k_embed = jax.random.split(jax.random.fold_in(k_model, HYPERNET_STREAM))
    size = ravel_pytree(model.init(k_model, sample_x[:1]))[0].size
    psi = init_hypernetwork(k_hnet, config, size)
    opt = server_optimizer(config)
    embeds = rng.normal(k_embed, (num_clients, config.embed_dim), jnp.float32)
    state = State.create(key, {"hypernetwork": psi, "opt_state": opt.init(psi)}, {}, num_clients, model, config)
    return state.replace(clients={"embed": embeds, "opt_state": jax.vmap(opt.init)(embeds)})


def random_minibatches(key, mask, steps: int, batch_size: int):
    """An independent random minibatch of real samples for every inner step.

    Args:
      key: PRNG key; mask: the client's real samples ``[n]``; steps: ``inner_steps``; batch_size: ``B``.

    Returns:
      ``(indices, valid)``, both ``[steps, min(B, n)]``.

    >>> import jax, jax.numpy as jnp
    >>> idx, ok = random_minibatches(jax.random.PRNGKey(0), jnp.arange(6) < 4, 3, 2)
    >>> idx.shape, bool(ok.all())
    ((3, 2), True)
    """
    b = min(batch_size, mask.shape[0])

    def one(k):
        order = jnp.argsort(jnp.where(mask, jax.random.uniform(k, mask.shape), 2.0))[:b]
        return order, mask[order]

    return jax.vmap(one)(jax.random.split(key, steps))


def _inner_steps(theta, participant, model, cfg: Config):
    """The client's ``inner_steps`` SGD steps on random minibatches: ``(trained, loss)``."""
    idx, valid = random_minibatches(participant["key"], participant["mask"], cfg.inner_steps, cfg.batch_size)
    return sgd_steps(theta, base.ce_loss(model), {"x": participant["x"], "y": participant["y"]}, idx, valid,
                     cfg.optimizer())


def _server_step(state: State, batch, grad_psi, grad_embeds):
    """The server optimiser's step on ``psi`` and on the participants' embeddings."""
    opt = server_optimizer(state.config)
    psi = state.server["hypernetwork"]
    rows = federated.take(state.clients, batch.client_ids)
    psi_updates, psi_opt = opt.update(grad_psi, state.server["opt_state"], psi)
    embed_updates, embed_opt = jax.vmap(opt.update)(grad_embeds, rows["opt_state"], rows["embed"])
    server = {"hypernetwork": optax.apply_updates(psi, psi_updates), "opt_state": psi_opt}
    return server, {"embed": optax.apply_updates(rows["embed"], embed_updates), "opt_state": embed_opt}


def _broadcast(state: State, ids):
    """The hypernetwork ``psi``; each participant's model is generated in its own slot of the map
    (``_local_update``), so the generated models are never stacked."""
    return state.server["hypernetwork"], ()


def _local_update(psi, participant, model, cfg: Config) -> dict:
    """Server: ``theta_i = h_psi(e_i)``; client: the inner steps and ``dtheta_i``; server: the pullback
    ``J^T dtheta_i``, whose ``psi`` part is summed over the participants as each one finishes."""
    unravel = unraveler(model, participant["x"])  # shapes only, at trace time
    flat, pullback = jax.vjp(generate_flat, psi, participant["client"]["embed"])
    trained, loss = _inner_steps(unravel(flat), participant, model, cfg)
    delta = flat - ravel_pytree(trained)[0]
    grad_psi, grad_embed = pullback(delta)
    return {"sum": grad_psi, "grad_embed": grad_embed, "n": base.num_samples(participant), "loss": loss,
            "delta_norm": jnp.linalg.norm(delta)}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    server, rows = _server_step(state, batch, reduced["sum"], uploads["grad_embed"])
    return server, rows, {"n": uploads["n"], "loss": uploads["loss"], "delta_norm": uploads["delta_norm"]}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """pFedHN's round: ``psi`` out, per participant generation + inner steps + pullback (the ``psi``
    gradients summed on the fly), the server optimiser's step on ``psi`` and the embeddings.

    Args:
      model: the target split model the hypernetwork generates; cfg: :class:`Config`.

    Returns:
      :class:`pflax.core.federated.RoundPieces` whose ``broadcast`` sends ``psi``.

    >>> import pflax
    >>> pieces_for(pflax.models.mlp(10, hidden=(8,)), Config(inner_steps=2)).broadcast.__name__
    '_broadcast'
    """
    return federated.RoundPieces(
        broadcast=_broadcast,
        local_update=lambda psi, participant: _local_update(psi, participant, model, cfg),
        server_update=_server_update,
    )


def _evaluate(state: State, test, train=None) -> dict:
    model, unravel = state.model, unraveler(state.model, test.x[0])

    def score(c, server):
        return base.accuracy_of(model, unravel(generate_flat(server["hypernetwork"], c["client"]["embed"])), c)

    return federated.evaluate_clients(state, test, train, score)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train=None) -> {"client_ids", "accuracy", "n"}``: each client's
generated model ``h_psi(e_i)`` (no local training) on its own test split. Jit-compiled.

Args:
  state: a pFedHN ``State``; test: the clients' test :class:`pflax.data.ClientData`; train: not used.

Returns:
  ``{"client_ids", "accuracy", "n"}``, one entry per row of ``test``. (Example: the module docstring.)"""


def _round(state: State, batch, test=None):
    return federated.run_round(pieces_for(state.model, state.config), state, batch, test, evaluate=_evaluate)


round = jax.jit(_round)  # noqa: A001 - the library's verb is `round`
round.__doc__ = """``round(state, batch, test=None) -> (state, metrics)``: one pFedHN round for the participants in
``batch``. Jit-compiled.

Args:
  state: a pFedHN ``State``; batch: the participants' training :class:`pflax.data.ClientData`;
  test: optionally their test data (same clients).

Returns:
  ``(new state, metrics)``: per-client ``n``, ``loss`` and ``delta_norm`` (``||dtheta_i||``), and with
  ``test`` the ``accuracy`` of the new state. (Example: the module docstring.)"""

check_inputs = base.check_inputs

ALGORITHM = federated.Algorithm(
    name="pfedhn", Config=Config, init=init, round=round, evaluate=evaluate, pieces=pieces_for,
    check_inputs=check_inputs, summary="pFedHN: a server hypernetwork generates every client's model",
)
