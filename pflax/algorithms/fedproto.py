"""FedProto (Tan et al., "FedProto: Federated Prototype Learning across Heterogeneous Clients", AAAI
2022; official code: https://github.com/yuetan031/fedproto): clients share class prototypes, never
model parameters.

State: ``server`` = the global prototypes ``{"protos": [K, d], "valid": [K]}`` (one per class, valid
once some participant has held the class); ``clients`` = every client's whole model (body + head).

One round, for the participants (the paper's Algorithm 1): each one

1. trains its own model for ``local_epochs`` (E = 5) epochs (fresh SGD, FedPAC's common setting) on
   ``CE + lam * MSE(f(x), C_y)``, where ``f`` is the body's feature, ``C_y`` the global prototype of
   the sample's label and the MSE the mean over the minibatch's real samples *and* the feature
   dimensions (PyTorch ``MSELoss``); samples whose class has no valid global prototype contribute 0
   to the MSE (their target is the feature itself, as in the official code), so round 0 is plain CE;
2. computes its prototypes with the trained body: the masked class means of ``f(x)`` over its
   training split (``pflax.core.stats.class_sums`` / ``class_means``), and uploads them with the
   class counts ``n_{i,y}``.

The server sets ``C_y = sum_i n_{i,y} c_{i,y} / sum_i n_{i,y}`` over the participants holding class
``y``; a class no participant holds keeps its previous prototype (and validity)
(``pflax.core.aggregate.aggregate_centroids``). Evaluation: each client's own model on its own test
split.

Defaults and sources: ``lam = 1`` (the official code's ``ld`` default); local training in FedPAC's
common setting. Deliberate differences from the paper/official code: the global prototype is
count-weighted (the official ``proto_aggregation`` takes the unweighted mean over clients holding the
class); prototypes are computed once after training with the trained body (the official code averages
the features seen during all local epochs' minibatches, i.e. with a moving model); evaluation uses the
model's head (the official code also reports nearest-prototype accuracy). All clients start from one
shared initialisation.

>>> import jax, pflax
>>> train, test = pflax.data.toy_federation()
>>> state = pflax.fedproto.init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2,
...                             pflax.fedproto.Config(local_epochs=1))
>>> state, metrics = pflax.fedproto.round(state, train, test)
>>> state.server["protos"].shape, int(state.server["valid"].sum()), metrics["accuracy"].shape
((10, 8), 10, (2,))
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import base
from .common import init_on_execution_devices
from ..core import aggregate, federated, stats
from ..core.federated import State, sample_clients
from ..core.losses import cross_entropy, masked_mean, squared_error_per_sample
from ..core.train import batched_apply

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "prototypes", "proto_loss"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """FedProto's prototype-regulariser weight on top of the common SGD setting.

    Attributes:
      lam: the weight of ``MSE(f(x), C_y)`` in the local loss (the official code's ``ld``), >= 0.
      prototypes: the regulariser's targets ``C_y``: ``"global"`` (FedProto, FedPAC's FedProto-G: the
        server's count-weighted prototypes) or ``"local"`` (FedPAC's FedProto-L, Appendix C.5: each
        client's own prototypes from the end of its previous round, with no communication at all).

    >>> Config().lam, Config(lam=0.1).lam, Config(prototypes="local").prototypes
    (1.0, 0.1, 'local')
    """

    lam: float = 1.0
    prototypes: str = "global"

    def __post_init__(self):
        super().__post_init__()
        base.require(self.lam >= 0, f"FedProto lam must be >= 0, got {self.lam}")
        base.require(self.prototypes in ("global", "local"),
                     f"FedProto prototypes must be 'global' or 'local', got {self.prototypes!r}")


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 FedProto state.

    Args:
      key: PRNG key; the model comes from the first of ``split(key, 3)``, as for every algorithm.
      model: a split model (``body`` and ``head``; ``model.feature_dim`` is the prototype size).
      sample_x: one client's inputs (only the shape of ``sample_x[:1]`` is used).
      num_clients: ``N``.
      config: :class:`Config`.

    Returns:
      ``State`` with ``server`` = no valid prototype yet (``{"protos": zeros [K, d], "valid": False
      [K]}``) and ``clients`` = every client's copy of one initial model.

    >>> import jax, jax.numpy as jnp, pflax
    >>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), jnp.zeros((1, 8, 8, 1)), 3)
    >>> state.server["protos"].shape, bool(state.server["valid"].any())
    ((10, 8), False)
    """
    params = model.init(jax.random.split(key, 3)[0], sample_x[:1])
    protos = {"protos": jnp.zeros((model.num_classes, model.feature_dim), jnp.float32),
              "valid": jnp.zeros((model.num_classes,), bool)}
    return State.create(key, protos, params, num_clients, model, config)


def prototypes(model, body, x, y, mask):
    """One client's prototypes: the masked class means of the body's features.

    Args:
      model: the split model; body: its body's parameters; x, y, mask: the client's (padded) data.

    Returns:
      ``(means [K, d], counts [K])``; a class the client lacks has count 0 (and a zero mean).

    >>> import jax, jax.numpy as jnp, pflax
    >>> model = pflax.models.mlp(3, hidden=(2,)); w = model.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
    >>> y, mask = jnp.array([0, 0, 2]), jnp.array([True, True, False])  # class 2 only on padding
    >>> means, counts = prototypes(model, w["body"], jnp.ones((3, 4)), y, mask)
    >>> means.shape, counts.tolist()
    ((3, 2), [2.0, 0.0, 0.0])
    """
    features = batched_apply(lambda xb: model.features(body, xb), x)
    sums = stats.class_sums(features, y, mask, model.num_classes)
    means, _ = stats.class_means(sums)
    return means, sums.counts


def proto_loss(model, global_protos, lam: float):
    """FedProto's local loss ``CE + lam * MSE(f(x), C_y)``, in ``base.train``'s loss signature.

    Args:
      model: the split model; global_protos: ``{"protos": [K, d], "valid": [K]}``; lam: the weight.

    Returns:
      ``loss(params, batch, w)``; samples of classes without a valid prototype add nothing to the MSE.

    An all-zero model (features 0, CE ``log 3``) against prototypes of ones: without a valid prototype
    (round 0) the loss is the plain CE, with them it adds ``lam * MSE = 1``.

    >>> import jax, jax.numpy as jnp, pflax
    >>> model, x = pflax.models.mlp(3, hidden=(2,)), jnp.ones((2, 4))
    >>> w = jax.tree.map(jnp.zeros_like, model.init(jax.random.PRNGKey(0), x[:1]))
    >>> batch = {"x": x, "y": jnp.array([0, 2])}
    >>> for valid in (False, True):
    ...     loss = jax.jit(proto_loss(model, {"protos": jnp.ones((3, 2)), "valid": jnp.full(3, valid)}, lam=1.0))
    ...     print(f"{float(loss(w, batch, jnp.ones(2))):.3f}")
    1.099
    2.099
    """
    protos, valid = global_protos["protos"], global_protos["valid"]

    def loss(params, batch, w):
        z = model.features(params["body"], batch["x"])
        ce = masked_mean(cross_entropy(model.logits_from_features(params["head"], z), batch["y"]), w)
        target = jnp.where(valid[batch["y"]][:, None], protos[batch["y"]], jax.lax.stop_gradient(z))
        return ce + lam * masked_mean(squared_error_per_sample(z, target), w)

    return loss


def _local_update(global_protos, participant, model, cfg: Config) -> dict:
    params, loss = base.train(participant["client"], proto_loss(model, global_protos, cfg.lam), participant, cfg)
    means, counts = prototypes(model, params["body"], participant["x"], participant["y"], participant["mask"])
    return {"client": params, "protos": means, "counts": counts, "n": base.num_samples(participant), "loss": loss}


def _own_prototypes_update(after_round_zero, participant, model, cfg: Config) -> dict:
    # FedProto-L. A client's prototypes at the end of its previous round are its trained body's class
    # means, and its model stays as it is until it trains again, so they are recomputed here instead of
    # being stored. Round 0 has none, as FedProto-G's round 0 has no global prototype.
    x, y, mask = participant["x"], participant["y"], participant["mask"]
    means, counts = prototypes(model, participant["client"]["body"], x, y, mask)
    own = {"protos": means, "valid": (counts > 0) & after_round_zero}
    params, loss = base.train(participant["client"], proto_loss(model, own, cfg.lam), participant, cfg)
    return {"client": params, "n": base.num_samples(participant), "loss": loss}


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    protos, valid = aggregate.aggregate_centroids(uploads["protos"], uploads["counts"], state.server["protos"],
                                                  state.server["valid"])
    return {"protos": protos, "valid": valid}, None, {"n": uploads["n"], "loss": uploads["loss"]}


def _keep_server(state: State, batch, uploads: dict, reduced: dict):
    return state.server, None, {"n": uploads["n"], "loss": uploads["loss"]}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """FedProto's round: the global prototypes to everyone, local training, count-weighted prototypes.

    Args:
      model: the split model (its body's features span the prototypes); cfg: :class:`Config` (``lam``).

    Returns:
      :class:`pflax.core.federated.RoundPieces`; every participant receives the server's prototypes
      (``no_broadcast``: the whole ``server``). With ``prototypes="local"`` (FedProto-L) the server
      sends only whether round 0 is over, receives no prototypes and keeps its state.

    >>> import pflax
    >>> pieces_for(pflax.models.mlp(10, hidden=(8,)), Config()).broadcast is federated.no_broadcast
    True
    """
    if cfg.prototypes == "local":
        return federated.RoundPieces(
            broadcast=lambda state, ids: (state.round > 0, ()),
            local_update=lambda after_round_zero, participant: _own_prototypes_update(after_round_zero, participant,
                                                                                      model, cfg),
            server_update=_keep_server,
        )
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda protos, participant: _local_update(protos, participant, model, cfg),
        server_update=_server_update,
    )


ALGORITHM = federated.build(
    "fedproto", Config, init, pieces_for,
    lambda c, server, model, cfg: base.accuracy_of(model, c["client"], c),
    "FedProto: clients share class prototypes, never model parameters", base.check_inputs)
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
