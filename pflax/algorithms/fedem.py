"""FedEM (Marfoq et al., 2021, "Federated Multi-Task Learning under a Mixture of Distributions",
Algorithm 2; https://github.com/omarfoq/FedEM): every client's data is a mixture of M shared components.

State: ``server`` = ``M`` component models on a leading axis (default ``M = 3``); ``clients`` = every
client's mixture weights ``{"pi": [M]}``, starting uniform (``1/M``).

One round, for the participants: each one

1. **E-step** with the received components: per training sample, the responsibilities
   ``q(m | x, y) = pi_m exp(-l_m(x, y)) / sum_m' pi_m' exp(-l_m'(x, y))``, with ``l_m`` the
   cross-entropy of component ``m`` (computed as a softmax over ``log pi_m - l_m``; padded samples get
   ``q = 0``);
2. **M-step** for the mixture weights: ``pi_m = mean over real samples of q(m | x, y)``;
3. trains every component ``m`` for ``local_epochs`` (E = 5) epochs (fresh SGD, FedPAC's common
   setting, its own shuffle) on the responsibility-weighted cross-entropy
   ``sum_b q_b(m) CE_m(b) / |B|`` (the masked minibatch mean of ``q * CE``, as FedEM's code).

The server replaces component ``m`` by the weighted mean of the participants' trained copies with
weight ``sum_samples q(m | x, y) = n_i pi_im`` (a component nobody has weight on is kept); each
participant's terms of the ``M`` means are summed as the clients finish
(:mod:`pflax.algorithms.clustered`).

Prediction (evaluation): ``p(y | x) = sum_m pi_im softmax(h_m(x))_y`` with the client's own ``pi_i``.

Defaults and sources: ``M = 3`` (FedPAC, Xu et al., 2023, Table 4 reports M = 3 and 5; FL-bench
``n_learners = 3``); local training in FedPAC's common setting (E = 5 epochs, not FedEM's own local
schedule). Deliberate differences from the paper/official code: the components are ``M`` independent
random initialisations (model 0 equals FedAvg's); the server weight is the responsibility mass
``n_i pi_im`` (the paper's Alg. 2 weights clients by ``n_i`` and lets the responsibilities act inside
the local objective; this weight reduces to the paper's when a client's responsibilities are one-hot);
``log pi`` is floored at ``log(1e-30)`` so a vanished component never produces ``-inf - (-inf)``. A
participant without data keeps its ``pi`` and contributes weight 0.

``component_weights = "client_size"`` runs the paper's and the official code's server step instead:
every component is the ``n_i``-weighted mean of *all* clients' copies (``CentralizedAggregator.mix`` in
``aggregator.py``), where a client that did not train this round holds the current components. For the
participants ``S`` that is ``w_m <- w_m + s * sum_S n_i (w_im - w_m) / sum_S n_i`` with ``s = |S| / N``
(exact when the clients have equal sizes, as in FedPAC's settings; with full participation ``s = 1``).
A component a client hardly uses still gets its nearly unchanged copy at full weight, so each
component moves by its users' share of the updates rather than by their mean.

>>> import jax, pflax
>>> train, _ = pflax.data.toy_federation()
>>> state = pflax.fedem.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...                          pflax.fedem.Config(local_epochs=1))
>>> state.clients["pi"].tolist()[0]  # uniform at the start
[0.3333333432674408, 0.3333333432674408, 0.3333333432674408]
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core import aggregate, federated
from ..core.federated import State, sample_clients
from ..core.losses import cross_entropy, masked_mean
from ..core.train import batched_apply
from ..metrics import masked_accuracy
from . import base, clustered
from .common import init_on_execution_devices

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "responsibilities", "mixture_probabilities"]

LOG_FLOOR = 1e-30
COMPONENT_WEIGHTS = ("responsibility", "client_size")


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """FedEM's number of components on top of FedPAC's common SGD setting.

    Attributes:
      num_components: ``M``, the shared mixture components (default 3, FedPAC's Table 4), >= 1.
      finetune_epochs: FedEM-FT when positive: at evaluation every client first runs one local FedEM
        update of this many epochs on its training split (E-step, M-step for ``pi``, fresh SGD on every
        component with its responsibilities) and is scored with the fine-tuned mixture, which is then
        thrown away; ``evaluate`` then needs the training split. 0 (the default) is plain FedEM.
      component_weights: the server's weights of the participants' trained copies: ``"responsibility"``
        (the default), each client's responsibility mass ``n_i pi_im``; ``"client_size"``, ``n_i`` with
        the non-participants' copies (the current components) in the mean, as FedEM's paper and code.

    >>> Config().num_components, Config(finetune_epochs=5).needs_train
    (3, True)
    """

    num_components: int = 3
    finetune_epochs: int = 0
    component_weights: str = "responsibility"

    def __post_init__(self):
        super().__post_init__()
        base.require(self.component_weights in COMPONENT_WEIGHTS,
                     f"FedEM component_weights must be one of {COMPONENT_WEIGHTS}, got {self.component_weights!r}")
        base.require(self.num_components >= 1, f"FedEM num_components must be >= 1, got {self.num_components}")
        base.require(self.finetune_epochs >= 0, f"FedEM finetune_epochs must be >= 0, got {self.finetune_epochs}")

    @property
    def needs_train(self) -> bool:
        """Whether evaluation fine-tunes on the training split (FedEM-FT)."""
        return self.finetune_epochs > 0


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 FedEM state.

    Args:
      key: PRNG key; the components come from :func:`base.stacked_models` (component 0 is FedAvg's
        initial model).
      model: the split model every component instantiates.
      sample_x: inputs of one client; only the shape of ``sample_x[:1]`` matters.
      num_clients: ``N``.
      config: :class:`Config`; ``num_components`` is ``M``.

    Returns:
      ``State`` with ``server`` = ``num_components`` independently initialised models on a leading axis
      (model 0 is FedAvg's initial model) and ``clients`` = uniform mixture weights ``{"pi": 1/M}``.

    >>> import jax, pflax
    >>> train, _ = pflax.data.toy_federation(num_clients=3)
    >>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[2], 3,
    ...              Config(num_components=2))
    >>> state.server["head"]["TorchDense_0"]["bias"].shape, state.clients["pi"].tolist()
    ((2, 10), [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    """
    m = config.num_components
    components = base.stacked_models(key, model, sample_x, m)
    return State.create(key, components, {"pi": jnp.full((m,), 1.0 / m, jnp.float32)}, num_clients, model, config)


def component_logits(model, components, x):
    """Every component's logits.

    Args:
      model: the split model; components: a stack of ``M`` parameter trees; x: samples ``[n, ...]``.

    Returns:
      ``[M, n, K]`` logits.

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,)); w = model.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
    >>> component_logits(model, jax.tree.map(lambda a: jnp.stack([a, -a]), w), jnp.ones((3, 4))).shape
    (2, 3, 3)
    """
    return jax.lax.map(lambda params: batched_apply(lambda xb: model.apply(params, xb), x), components)


def responsibilities(model, components, pi, x, y, mask):
    """E-step on one client's data.

    Args:
      model: the :class:`pflax.models.SplitModel`.
      components: the stack of ``M`` component models.
      pi: ``[M]`` the client's mixture weights.
      x, y, mask: the client's (padded) samples.
    Returns:
      ``q [M, n]``, the posterior of each component per sample (columns sum to 1 on real samples, 0 on
      padding).

    Two identical components: the data cannot tell them apart, so ``q`` is the prior ``pi``.

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,)); twice = jax.tree.map(lambda a: jnp.stack([a, a]),
    ...     model.init(jax.random.PRNGKey(0), jnp.ones((1, 4))))
    >>> q = responsibilities(model, twice, jnp.array([0.75, 0.25]), jnp.ones((3, 4)), jnp.array([0, 1, 2]),
    ...                      jnp.array([True, True, False]))
    >>> (4 * q).round().astype(int).tolist()  # q = pi = [3/4, 1/4] on the two real samples
    [[3, 3, 0], [1, 1, 0]]
    """
    losses = jax.vmap(lambda logits: cross_entropy(logits, y))(component_logits(model, components, x))  # [M, n]
    log_prior = jnp.log(jnp.maximum(pi, LOG_FLOOR))[:, None]
    q = jax.nn.softmax(log_prior - losses, axis=0)
    return jnp.where(mask[None, :], q, 0.0)


def mixture_probabilities(model, components, pi, x):
    """FedEM's prediction ``sum_m pi_m softmax(h_m(x))``.

    Args:
      model: the split model; components: the stack of ``M`` components; pi: ``[M]`` mixture weights;
      x: samples ``[n, ...]``.

    Returns:
      ``[n, K]`` class probabilities (rows sum to 1).

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,)); w = model.init(jax.random.PRNGKey(1), jnp.ones((1, 4)))
    >>> probs = mixture_probabilities(model, jax.tree.map(lambda a: jnp.stack([a, 2 * a]), w), jnp.array([0.5, 0.5]),
    ...                               jnp.ones((3, 4)))
    >>> probs.shape, probs.sum(-1).round(3).tolist()
    ((3, 3), [1.0, 1.0, 1.0])
    """
    probs = jax.nn.softmax(component_logits(model, components, x), axis=-1)
    return jnp.einsum("m,mnk->nk", pi, probs, precision=aggregate.EXACT)


def _em_update(components, pi, client: dict, model, cfg: Config, epochs: int | None = None):
    """One client's E-step, M-step for ``pi`` and responsibility-weighted training of every component
    (``epochs`` epochs, default ``cfg.local_epochs``) on ``client``'s ``x``, ``y``, ``mask`` with its
    ``key``. Returns ``(trained components, q [M, n], new pi, the M training losses)``."""
    x, y, mask = client["x"], client["y"], client["mask"]
    q = responsibilities(model, components, pi, x, y, mask)
    n = base.num_samples(client)
    new_pi = jnp.where(n > 0, q.sum(1) / jnp.maximum(n, 1.0), pi)

    def weighted_ce(params, batch, w):
        return masked_mean(batch["q"] * cross_entropy(model.apply(params, batch["x"]), batch["y"]), w)

    def train_component(args):
        params, q_m, key = args
        return base.train(params, weighted_ce, client, cfg, key=key, epochs=epochs, data={"x": x, "y": y, "q": q_m})

    keys = jax.random.split(client["key"], cfg.num_components)
    trained, losses = jax.lax.map(train_component, (components, q, keys))
    return trained, q, new_pi, losses


def _local_update(components, participant: dict, model, cfg: Config) -> dict:
    trained, q, new_pi, losses = _em_update(components, participant["client"]["pi"], participant, model, cfg)
    # Component m is averaged over clients with weights mass_m = sum of the client's q[m] (or n_i for every
    # m); this client's terms of the M means are summed as the clients finish.
    n = base.num_samples(participant)
    mass = q.sum(1) if cfg.component_weights == "responsibility" else jnp.broadcast_to(n, q.shape[:1])
    return {"sum": aggregate.grouped_term(trained, mass), "client": {"pi": new_pi},
            "n": n, "loss": losses.sum(), "pi": new_pi}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """FedEM's round: broadcast the ``M`` components; E-step, M-step for ``pi`` and responsibility-
    weighted training of every component; responsibility-mass weighted means.

    Args:
      model: the architecture of every component; cfg: :class:`Config` (``num_components``).

    Returns:
      :class:`pflax.core.federated.RoundPieces` whose server step is
      :func:`pflax.algorithms.clustered.average_groups`.

    >>> from pflax.models import mlp
    >>> pieces_for(mlp(10, hidden=(8,)), Config()).server_update is clustered.average_groups
    True
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda components, participant: _local_update(components, participant, model, cfg),
        server_update=clustered.average_groups if cfg.component_weights == "responsibility" else _all_clients_mean,
    )


def _all_clients_mean(state: State, batch, uploads: dict, reduced: dict):
    """The server step of ``component_weights = "client_size"``: the participants' ``n_i``-weighted mean,
    moved toward by their share ``|S| / N`` of the clients, the others' copies being the current components."""
    means, _, metrics = clustered.average_groups(state, batch, uploads, reduced)
    share = base.has_data(batch).sum() / state.num_clients
    return jax.tree.map(lambda old, new: old + share * (new - old), state.server, means), None, metrics


def _score(c: dict, components, model, cfg: Config):
    pi = c["client"]["pi"]
    if cfg.finetune_epochs > 0:  # FedEM-FT: a throw-away local update of the whole mixture first
        train = {"x": c["train_x"], "y": c["train_y"], "mask": c["train_mask"], "key": c["key"]}
        components, _, pi, _ = _em_update(components, pi, train, model, cfg, epochs=cfg.finetune_epochs)
    probs = mixture_probabilities(model, components, pi, c["x"])
    return masked_accuracy(probs, c["y"], c["mask"])


ALGORITHM = clustered.algorithm("fedem", Config, init, pieces_for, _score,
                                "FedEM: M shared components, per-client mixture weights learnt by EM",
                                needs_train=lambda cfg: cfg.finetune_epochs > 0)
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
