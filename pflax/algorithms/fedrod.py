"""Fed-RoD (Chen & Chao, "On Bridging Generic and Personalized Federated Learning for Image
Classification", ICLR 2022; official code: https://github.com/hongyouc/Fed-RoD): a generic model
trained for balance, plus a personal head.

Model: the shared body ``f``, the shared *generic* head ``g`` and a per-client *personal* head ``p``
(same shape as the model's head). The personal prediction is ``g(f(x)) + p(f(x))`` (the paper's
residual form of the two heads); the generic prediction is ``g(f(x))``.

State: ``server = {"body", "head"}`` (the generic model); ``clients = {"personal": [N, ...]}``, each
client's personal head.

One round, for the participants: each one runs ``local_epochs`` (E = 5) epochs of SGD (fresh
optimiser, FedPAC's common setting) on the sum of

* the **balanced softmax** loss of the generic path (Ren et al., "Balanced Meta-Softmax", NeurIPS
  2020, the paper's choice of balanced risk): CE of
  ``g(z) + gamma * log n_{i,y}``, where ``n_{i,y}`` is the client's number of training samples of
  class ``y`` (``gamma = 1``); classes the client lacks get a -1e9 offset (``log 0``), so they drop
  out of its softmax;
* plain CE of the personal path ``stop_gradient(g(z)) + p(stop_gradient(z))``.

The server takes the sample-size weighted mean of bodies and generic heads; personal heads are never
averaged. Evaluation: the personal path on each client's own test split.

Deliberate choices: the personal loss trains only the personal head (``z`` and ``g(z)`` are constants
there), so the shared body and generic head learn from the balanced objective alone, which is what
the server averages; the personal head starts at zero, so each client's personal model starts as the
generic one. One optimiser (per-leaf momentum and decay) serves all three parts.
``personal_loss_trains_body = True`` lets the personal loss reach the body too (``z`` no longer a
constant there; ``g(z)`` still is), as FL-bench trains its two heads on shared features with the two
losses added.

>>> import jax, pflax
>>> train, test = pflax.data.toy_federation()
>>> state = pflax.fedrod.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...                           pflax.fedrod.Config(local_epochs=1))
>>> sorted(state.server), sorted(state.clients)
(['body', 'head'], ['personal'])
>>> state, metrics = pflax.fedrod.round(state, train, test)
>>> metrics["accuracy"].shape
(2,)
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .common import init_on_execution_devices
from ..core import federated
from ..core.federated import State, sample_clients
from ..core.losses import cross_entropy, masked_mean
from ..core.train import batched_apply
from ..metrics import masked_accuracy

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "personal_logits", "balanced_offsets"]

ABSENT_CLASS_OFFSET = -1e9  # stands for log(0) without producing inf - inf = NaN anywhere


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """Fed-RoD's balanced-softmax exponent on top of the common SGD setting.

    Attributes:
      gamma: the exponent of ``n_{i,y}`` in the generic path's offsets ``gamma * log n_{i,y}`` (1: the
        paper's balanced softmax; 0: plain CE), >= 0.
      personal_loss_trains_body: whether the personal path's CE also trains the shared body (FL-bench's
        joint training) rather than the personal head alone (False, the default).

    >>> Config(gamma=0.0).gamma  # no offsets: plain CE on the generic path too
    0.0
    """

    gamma: float = 1.0
    personal_loss_trains_body: bool = False

    def __post_init__(self):
        super().__post_init__()
        base.require(self.gamma >= 0, f"Fed-RoD gamma must be >= 0, got {self.gamma}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 Fed-RoD state.

    Args:
      key: PRNG key; the model comes from the first of ``split(key, 3)``, as for every algorithm.
      model: a split model (``body`` and ``head``).
      sample_x: one client's inputs (only the shape of ``sample_x[:1]`` is used).
      num_clients: ``N``.
      config: :class:`Config`.

    Returns:
      ``State`` with ``server = {"body", "head"}`` (the generic model) and ``clients = {"personal":
      zero head}`` for every client.

    >>> import jax, pflax
    >>> train, _ = pflax.data.toy_federation()
    >>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 4)
    >>> head = state.clients["personal"]["TorchDense_0"]
    >>> head["kernel"].shape, float(abs(head["kernel"]).sum())
    ((4, 8, 10), 0.0)
    """
    params = model.init(jax.random.split(key, 3)[0], sample_x[:1])
    personal = {"personal": jax.tree.map(jnp.zeros_like, params["head"])}
    return State.create(key, params, personal, num_clients, model, config)


def personal_logits(model, shared, personal, x):
    """The personal path ``g(f(x)) + p(f(x))``.

    Args:
      model: the split model.
      shared: ``{"body", "head"}``, the generic model.
      personal: the personal head's parameters.
      x: inputs ``[n, ...]``.

    Returns:
      Logits ``[n, K]``.

    A zero personal head leaves the generic logits:

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,)); w = model.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
    >>> logits = personal_logits(model, w, jax.tree.map(jnp.zeros_like, w["head"]), jnp.ones((5, 4)))
    >>> logits.shape, bool((logits == model.apply(w, jnp.ones((5, 4)))).all())
    ((5, 3), True)
    """
    z = model.features(shared["body"], x)
    return model.logits_from_features(shared["head"], z) + model.logits_from_features(personal, z)


def balanced_offsets(y, mask, num_classes: int, gamma: float):
    """``gamma * log n_{i,y}`` per class from the client's training labels (absent classes: -1e9).

    Args:
      y: labels ``[n]``; mask: real samples ``[n]``; num_classes: ``K``; gamma: the exponent.

    Returns:
      ``[K]`` float32 offsets added to the generic logits.

    >>> import jax.numpy as jnp
    >>> offsets = balanced_offsets(jnp.array([0, 0, 1]), jnp.array([True, True, True]), 3, 1.0)
    >>> print(f"{float(offsets[0]):.3f}", float(offsets[1]), float(offsets[2]))  # log 2, log 1, absent
    0.693 0.0 -1000000000.0
    """
    counts = jnp.zeros((num_classes,), jnp.float32).at[y].add(mask.astype(jnp.float32))
    return jnp.where(counts > 0, gamma * jnp.log(jnp.maximum(counts, 1.0)), ABSENT_CLASS_OFFSET)


def _local_update(server, participant, model, cfg: Config) -> dict:
    offsets = balanced_offsets(participant["y"], participant["mask"], model.num_classes, cfg.gamma)

    def loss(p, batch, w):
        z = model.features(p["body"], batch["x"])
        generic = model.logits_from_features(p["head"], z)
        balanced = masked_mean(cross_entropy(generic + offsets, batch["y"]), w)
        personal_features = z if cfg.personal_loss_trains_body else jax.lax.stop_gradient(z)
        personal = jax.lax.stop_gradient(generic) + model.logits_from_features(p["personal"], personal_features)
        return balanced + masked_mean(cross_entropy(personal, batch["y"]), w)

    params, loss_value = base.train({**server, **participant["client"]}, loss, participant, cfg)
    return {"mean": {k: params[k] for k in ("body", "head")}, "client": {"personal": params["personal"]},
            "n": base.num_samples(participant), "loss": loss_value}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    return federated.mean_or(reduced, state.server), None, {"n": uploads["n"], "loss": uploads["loss"]}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """Fed-RoD's round: the generic model to everyone, the two-loss local training, the weighted mean.

    Args:
      model: the split model (the personal head has the head's shape); cfg: :class:`Config` (``gamma``).

    Returns:
      :class:`pflax.core.federated.RoundPieces` with the default sample-size weights.

    >>> from pflax.models import mlp
    >>> pieces_for(mlp(10, hidden=(8,)), Config(gamma=0.5)).weights is federated.sample_sizes
    True
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda server, participant: _local_update(server, participant, model, cfg),
        server_update=_server_update,
    )


def _score(c: dict, server, model) -> jax.Array:
    logits = batched_apply(lambda xb: personal_logits(model, server, c["client"]["personal"], xb), c["x"])
    return masked_accuracy(logits, c["y"], c["mask"])


ALGORITHM = federated.build(
    "fedrod", Config, init, pieces_for,
    lambda c, server, model, cfg: _score(c, server, model),
    "Fed-RoD: balanced-softmax generic model plus a personal head", base.check_inputs)
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
