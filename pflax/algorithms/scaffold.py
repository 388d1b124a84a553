"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich and Suresh, "SCAFFOLD: Stochastic Controlled
Averaging for Federated Learning", ICML 2020), Algorithm 1 with option II control variates. No official
code was released; FL-bench's port (https://github.com/KarhouTam/FL-bench) sets the defaults.

State: ``server = {"params": w, "c": c}`` (the global model and the server control variate) and
``clients`` = every client's control variate ``c_i``, all controls starting at zero. One round, for
the participants: each one starts from ``w^t`` and runs ``local_epochs`` (E) epochs of minibatch SGD
with the corrected gradient

    w <- w - lr * (grad f_i(w) - c_i + c),

implemented as the loss ``CE(w) + <w, c - c_i>`` (the correction is a constant, so it is exactly the
gradient above). With ``K_i`` its number of local steps, it then sets

    c_i+ = c_i - c + (w^t - w_i) / (K_i * lr)

and the server updates ``w <- w + global_lr * mean_i (w_i - w^t)`` and
``c <- c + (|S| / N) * mean_i (c_i+ - c_i)``.

Deliberate choices: ``global_lr = 1`` (FL-bench's default; FedPAC, Xu et al., ICLR 2023, compares with
SCAFFOLD in Appendix C.4, Table 4, without stating it). Both means are the paper's *unweighted* means
over the participants that have data (the round's ``weights``: a client with no data takes no step,
``K_i = 0``, keeps its ``c_i`` and is left out; ``|S|`` counts participants with data).
``K_i = E * ceil(n_i / batch_size)``, the number of minibatches with data. The local optimiser is
FedPAC's common PyTorch SGD (momentum 0.5, wd 5e-4; Appendix B.3) applied to the corrected gradient;
option II's ``(w^t - w_i) / (K lr)`` is the mean corrected gradient for plain SGD only. With momentum
``mu`` a constant gradient moves the model by ``lr * K_mu`` per round, with

    K_mu = (K - mu * (1 - mu^K) / (1 - mu)) / (1 - mu)        (K_mu = K at mu = 0),

about ``2K`` at FedPAC's ``mu = 0.5``, so ``c_i+`` comes out about twice the mean gradient. Then the
correction ``c - c_i`` overshoots and undershoots in alternate rounds: with full participation and slowly
changing gradients, ``c_i - c`` follows ``e <- 2 delta - e`` about its right value ``delta``
(``tests/test_baselines.py`` shows the swing). ``momentum_corrected_controls = True`` divides by
``K_mu * lr`` instead; the default keeps the paper's ``K * lr``. Evaluation: the global model on each
client's test split.

>>> import jax, pflax
>>> train, _ = pflax.data.toy_federation()
>>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), train.x[0], 2, Config(local_epochs=1))
>>> sorted(state.server)
['c', 'params']
>>> state, metrics = round(state, train)
>>> int(state.round)
1
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..core import federated
from ..core.federated import State, sample_clients
from . import base
from .common import init_on_execution_devices

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs",
           "momentum_step_sum", "pieces_for"]


@dataclasses.dataclass(frozen=True)
class Config(base.SGDConfig):
    """SCAFFOLD's setting on top of the common SGD setting.

    Attributes:
      global_lr: the server's step on the mean model update (FL-bench's default 1), > 0.
      momentum_corrected_controls: divide option II's model change by the steps' summed size under
        momentum, ``K_mu * lr``, instead of ``K * lr`` (see the module docstring); False, the paper's
        formula, by default. Identical at ``momentum = 0``.

    ``lr`` must be positive: the control variates divide by it.

    >>> Config().global_lr
    1.0
    >>> Config(lr=0.0)
    Traceback (most recent call last):
    ...
    ValueError: SCAFFOLD needs lr > 0 (the control variates divide by it)
    """

    global_lr: float = 1.0
    momentum_corrected_controls: bool = False

    def __post_init__(self):
        super().__post_init__()
        base.require(self.global_lr > 0, f"SCAFFOLD global_lr must be > 0, got {self.global_lr}")
        base.require(self.lr > 0, "SCAFFOLD needs lr > 0 (the control variates divide by it)")


def _zeros(tree):
    return jax.tree.map(jnp.zeros_like, tree)


@init_on_execution_devices
def init(key, model, sample_x, num_clients: int, config: Config = Config()) -> State:
    """A round-0 state (:meth:`State.from_model`).

    Args:
      key: PRNG key; ``w`` is drawn from ``split(key, 3)[0]``, so it equals FedAvg's initial model.
      model: a split model; sample_x: inputs whose ``sample_x[:1]`` fixes the shapes.
      num_clients: ``N`` control variates to allocate; config: :class:`Config`.

    Returns:
      ``State`` with ``server = {"params": w, "c": 0}`` and ``clients`` = every client's control variate
      ``c_i = 0`` (a tree shaped like ``w``).

    >>> import jax, jax.numpy as jnp, pflax
    >>> state = init(jax.random.PRNGKey(0), pflax.models.mlp(10, hidden=(8,)), jnp.ones((1, 8, 8, 1)), 4)
    >>> c_i = state.clients["head"]["TorchDense_0"]["bias"]
    >>> c_i.shape, float(abs(c_i).sum())
    ((4, 10), 0.0)
    """
    return State.from_model(key, model, sample_x, num_clients, config,
                            lambda w: ({"params": w, "c": _zeros(w)}, _zeros(w)))


def momentum_step_sum(k, momentum: float):
    """How far ``k`` steps of PyTorch's momentum SGD (buffer starting at zero) move a model along a
    constant gradient, in units of one plain step: ``sum_j (1 - mu^j) / (1 - mu)`` for ``j = 1..k``.

    Args:
      k: the number of steps (an integer array or int).
      momentum: ``mu`` in [0, 1).

    Returns:
      a float array; ``k`` itself at ``mu = 0``.

    >>> float(momentum_step_sum(3, 0.5))  # 1 + 1.5 + 1.75
    4.25
    >>> float(momentum_step_sum(60, 0.0))
    60.0
    """
    k = jnp.asarray(k, jnp.float32)
    if momentum == 0.0:
        return k
    return (k - momentum * (1.0 - momentum ** k) / (1.0 - momentum)) / (1.0 - momentum)


def _local_update(server, participant: dict, model, cfg: Config) -> dict:
    w0, c, c_i = server["params"], server["c"], participant["client"]
    ce = base.ce_loss(model)
    correction = jax.tree.map(lambda a, b: a - b, c, c_i)

    def loss(p, batch, w):
        drift = sum(jnp.vdot(x, d) for x, d in zip(jax.tree.leaves(p), jax.tree.leaves(correction)))
        return ce(p, batch, w) + drift

    w_i, loss_value = base.train(w0, loss, participant, cfg)
    k = base.local_steps(participant["mask"], cfg)
    steps = momentum_step_sum(k, cfg.momentum) if cfg.momentum_corrected_controls else k
    scale = jnp.where(k > 0, 1.0 / (jnp.maximum(steps, 1) * cfg.lr), 0.0)
    # A client with no step keeps its control variate (c_i+ = c_i).
    c_new = jax.tree.map(lambda ci, cc, a, b: jnp.where(k > 0, ci - cc + (a - b) * scale, ci), c_i, c, w0, w_i)
    return {
        "mean": {"w": jax.tree.map(lambda a, b: a - b, w_i, w0), "c": jax.tree.map(lambda a, b: a - b, c_new, c_i)},
        "client": c_new,
        "n": base.num_samples(participant),
        "loss": loss_value,
    }


def _server_update(state: State, batch, uploads: dict, reduced: dict):
    cfg = state.config
    no_update = {"w": _zeros(state.server["params"]), "c": _zeros(state.server["c"])}
    mean = federated.mean_or(reduced, no_update)
    share = base.has_data(batch).sum() / state.num_clients
    server = {
        "params": jax.tree.map(lambda w, d: w + cfg.global_lr * d, state.server["params"], mean["w"]),
        "c": jax.tree.map(lambda c, d: c + share * d, state.server["c"], mean["c"]),
    }
    return server, None, {"n": uploads["n"], "loss": uploads["loss"]}


def pieces_for(model, cfg: Config) -> federated.RoundPieces:
    """SCAFFOLD's round: the server's ``{params, c}`` to everyone, corrected local SGD, and the
    unweighted means of the model and control updates over the participants with data.

    Args:
      model: the split model; cfg: :class:`Config` (``lr`` enters the control variates).

    Returns:
      :class:`pflax.core.federated.RoundPieces` whose ``weights`` are 1 for a participant with data, else 0.

    >>> import types, jax.numpy as jnp, pflax
    >>> pieces = pieces_for(pflax.models.mlp(10, hidden=(8,)), Config())
    >>> pieces.weights(None, types.SimpleNamespace(mask=jnp.array([[True, True], [False, False]]))).tolist()
    [1.0, 0.0]
    """
    return federated.RoundPieces(
        broadcast=federated.no_broadcast,
        local_update=lambda server, participant: _local_update(server, participant, model, cfg),
        server_update=_server_update,
        weights=lambda state, batch: base.has_data(batch),
    )


ALGORITHM = federated.build(
    "scaffold", Config, init, pieces_for,
    lambda c, server, model, cfg: base.accuracy_of(model, server["params"], c),
    "SCAFFOLD: FedAvg with control variates correcting client drift", base.check_inputs)
round, evaluate, check_inputs = ALGORITHM.round, ALGORITHM.evaluate, ALGORITHM.check_inputs  # noqa: A001
