"""FedPick (Zhu et al., "Take Your Pick: Enabling Effective Personalized Federated Learning within
Low-dimensional Feature Space", arXiv:2307.13995, 2023): personalized feature selection with a
Gumbel-sigmoid straight-through mask, on a FedBN backbone. No public implementation exists, so this
module is the reference, and every ambiguous choice is a documented :class:`Config` field.

Model, per client ``i``. The shared body (the paper's "global encoder") gives ``z^g`` (k features)
and the shared global head gives ``y^g = h^g(z^g)``. The personalized feature selection module (PFSM, local) has:

* a mask network ``z^l = phi_i(z^g)``, Linear(k -> k/2) -> ReLU -> Linear(k/2 -> k) (the paper's
  "Linear(d, d/2)" for the second layer is a typo: the mask needs k entries);
* a Gumbel-sigmoid ``m^s = sigmoid((z^l + G' - G'') / tau)`` with G', G'' i.i.d. Gumbel(0, 1) in
  training (``G' - G''`` is one Logistic(0, 1) sample; the paper's "U[0, 1]" is a typo) and no noise
  at evaluation;
* a hard mask ``m = 1[m^s >= 0.5]`` in the forward pass with the sigmoid's gradient in the backward
  pass (straight-through), so at evaluation ``m = 1[z^l >= 0]``;
* two heads with the architecture of ``h^g``: ``y^p = h^p(z^g * m)`` (selected features) and
  ``y^u = h^u(z^g * (1 - m))`` (rejected features).

Loss (eq. 15), batch means over real samples, all parameters trained jointly by one SGD:
``L = CE(y^g) + lam_lce * CE(y^p) + lam_ent * sum_c q^u_c log q^u_c + lam_dis * (KL(q^p||q^g) +
KL(q^g||q^p))`` with ``q = softmax``. The third term is the *negative* entropy (it pushes the rejected
branch toward uniform predictions); the distillation acts between ``y^p`` and ``y^g`` (Algorithm 1's
``(y^p, y^u)`` is a typo); gradients flow into both branches unless ``kl_stop_gradient``.

Server (Algorithm 1): sample-size weighted FedAvg of the body and ``h^g`` *without* their BatchNorm
layers (FedBN, :mod:`pflax.algorithms.fedbn`); BN affine parameters and running statistics, and the
whole PFSM, stay local: the leaf-level sharing rule of :mod:`pflax.algorithms.leafwise` with
FedPick's objective. Prediction: ``softmax(y^g + y^p)`` (logits summed, ``ensemble="logits"``).

Ablations (Table IV) as switches: ``use_pfsm=False`` (w/o PFSM, exactly FedBN), ``lam_lce=0`` /
``lam_ent=0`` / ``lam_dis=0`` (w/o each loss), ``mask="soft"`` (``z^p = z^g * m^s``), ``share_bn``,
``share_pfsm``, ``ensemble="none"`` (predict with ``h^g`` only).

Choices the paper leaves open, with our defaults: ``h^p``/``h^u`` copy ``h^g``'s architecture
(including its BN layers, which are local like every BN); PFSM reads the body's output (8192-dim
flattened conv features for the Digits CNN, the 4096-dim fc2 output for AlexNet); no stop-gradient
in the KL terms; the ensemble sums logits; every PFSM starts from the same random initialisation; the
mask network has no BN.

>>> from pflax.algorithms import fedpick
>>> cfg = fedpick.Config(share_bn=True)
>>> cfg.sharing.parts, cfg.sharing.bn
(('body', 'head'), True)
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ..core import federated, rng
from ..core.execution import map_clients
from ..core.federated import State, sample_clients
from ..core.losses import cross_entropy, masked_mean
from ..core.train import batched_apply
from ..data.clients import ClientData
from ..figures import save_png
from ..models import TorchDense
from ..models.bn import BNModel
from . import leafwise
from .common import init_on_execution_devices
from .leafwise import Sharing

Array = jax.Array
PyTree = Any

__all__ = ["Config", "State", "ALGORITHM", "init", "round", "evaluate", "sample_clients", "check_inputs", "pieces",
           "selection_mask", "negative_entropy", "symmetric_kl", "loss_terms", "objective", "predict",
           "mask_frequency", "mask_overlap"]

MASK_MODES = ("hard", "soft")
ENSEMBLES = ("logits", "probs", "none")


@dataclasses.dataclass(frozen=True)
class Config(leafwise.TrainingConfig):
    """FedPick's hyper-parameters. Defaults are the Digits-Five row of Table III (tau 10, lam_lce 10,
    lam_ent 0.001, lam_dis 10) with FedPick's SGD setting (lr 0.01, momentum 0.5, batch 64, 1 local
    epoch, no weight decay). :meth:`office` gives the Office-Caltech-10 / DomainNet row.

    What the server averages (:attr:`sharing`) follows from the switches ``share_bn`` and
    ``share_pfsm`` (Table IV's ablations); it is not set directly.

    Attributes:
      tau: Gumbel-sigmoid temperature (> 0).
      lam_lce, lam_ent, lam_dis: eq. (15)'s weights of the selected-branch CE, the rejected branch's
        negative entropy and the symmetric KL (>= 0).
      threshold: the hard mask's cut on ``m^s``, in (0, 1).
      mask: ``"hard"`` (straight-through) or ``"soft"``.
      ensemble: ``"logits"`` (``y^g + y^p``), ``"probs"`` or ``"none"`` (``y^g`` alone).
      kl_stop_gradient: distil each branch toward a constant copy of the other.
      use_pfsm: False is Table IV's "w/o PFSM" (exactly FedBN).
      share_bn, share_pfsm: also average the BN leaves / the PFSM.

    >>> Config().tau, Config.office().tau, Config(share_pfsm=True).sharing.parts
    (10.0, 1.0, ('body', 'head', 'pfsm'))
    >>> Config(threshold=1.0)
    Traceback (most recent call last):
    ValueError: threshold must be in (0, 1), got 1.0
    """

    tau: float = 10.0
    lam_lce: float = 10.0
    lam_ent: float = 0.001
    lam_dis: float = 10.0
    threshold: float = 0.5
    mask: str = "hard"
    ensemble: str = "logits"
    kl_stop_gradient: bool = False
    use_pfsm: bool = True
    share_bn: bool = False
    share_pfsm: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.tau <= 0:
            raise ValueError(f"tau must be positive, got {self.tau}")
        if min(self.lam_lce, self.lam_ent, self.lam_dis) < 0:
            raise ValueError("loss weights lam_lce, lam_ent, lam_dis must be >= 0")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if self.mask not in MASK_MODES:
            raise ValueError(f"mask must be one of {MASK_MODES}, got {self.mask!r}")
        if self.ensemble not in ENSEMBLES:
            raise ValueError(f"ensemble must be one of {ENSEMBLES}, got {self.ensemble!r}")
        if self.head_epochs:
            raise ValueError("FedPick trains all parameters jointly; head_epochs must be 0")

    @property
    def sharing(self) -> Sharing:
        """Body and global head averaged without BN (FedBN); with ``share_pfsm`` the PFSM too, with
        ``share_bn`` their BN leaves too."""
        return Sharing(("body", "head") + (("pfsm",) if self.share_pfsm else ()), bn=self.share_bn)

    @classmethod
    def digits(cls, **kw) -> "Config":
        """Digits-Five (Table III, the defaults): tau 10, lam_lce 10, lam_ent 0.001, lam_dis 10."""
        return cls(**{"tau": 10.0, "lam_lce": 10.0, "lam_ent": 0.001, "lam_dis": 10.0, **kw})

    @classmethod
    def office(cls, **kw) -> "Config":
        """Office-Caltech-10 and DomainNet (Table III): tau 1, lam_lce 1, lam_ent 0.001, lam_dis 1."""
        return cls(**{"tau": 1.0, "lam_lce": 1.0, "lam_ent": 0.001, "lam_dis": 1.0, **kw})


class MaskNetwork(nn.Module):
    """phi_i: Linear(k -> k/2) -> ReLU -> Linear(k/2 -> k), PyTorch-default initialisation.

    Attributes:
      features: k, the body's feature width (input and output).

    >>> params = MaskNetwork(4).init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))["params"]
    >>> jax.tree.map(jnp.shape, params)
    {'fc0': {'bias': (2,), 'kernel': (4, 2)}, 'fc1': {'bias': (4,), 'kernel': (2, 4)}}
    """

    features: int

    @nn.compact
    def __call__(self, z: Array) -> Array:
        h = jax.nn.relu(TorchDense(max(self.features // 2, 1), name="fc0")(z))
        return TorchDense(self.features, name="fc1")(h)


def selection_mask(mask_logits: Array, key: Array | None, tau: float, threshold: float = 0.5,
                   mode: str = "hard") -> Array:
    """Gumbel-sigmoid feature mask. ``key=None`` (evaluation) means no noise.

    ``hard``: exactly 0/1 in the forward pass, the sigmoid's gradient backward (straight-through,
    written ``hard + (soft - stop_gradient(soft))`` so the forward value is exactly binary).
    ``soft``: the relaxed mask ``m^s`` itself.

    Args:
      mask_logits: ``z^l``, the mask network's output.
      key: PRNG key of the Logistic noise ``G' - G''``, or None.
      tau: temperature.
      threshold: the hard mask's cut on the sigmoid.
      mode: ``"hard"`` or ``"soft"``.
    Returns:
      the mask, ``mask_logits``' shape.

    >>> selection_mask(jnp.array([-1.0, 0.0, 2.0]), None, tau=10.0).tolist()
    [0.0, 1.0, 1.0]
    >>> selection_mask(jnp.array([0.0]), None, tau=1.0, mode="soft").tolist()
    [0.5]
    """
    noise = rng.logistic(key, mask_logits.shape, mask_logits.dtype) if key is not None else 0.0
    u = (mask_logits + noise) / tau
    soft = jax.nn.sigmoid(u)
    if mode == "soft":
        return soft
    # sigmoid(u) >= t  <=>  u >= logit(t); compared in the logit domain so that at evaluation the
    # mask is exactly 1[z^l >= 0] (sigmoid rounds to 0.5 for tiny negative u in float32).
    hard = (u >= np.log(threshold / (1.0 - threshold))).astype(soft.dtype)
    return hard + (soft - jax.lax.stop_gradient(soft))


def negative_entropy(logits: Array, weights: Array) -> Array:
    """Masked batch mean of ``sum_c q_c log q_c`` with ``q = softmax(logits)``.

    Args:
      logits: ``[B, K]``.
      weights: ``[B]`` sample weights.
    Returns:
      a scalar in ``[-log K, 0]``.

    >>> print(f"{float(negative_entropy(jnp.zeros((2, 4)), jnp.ones(2))):.3f}")  # uniform: -log 4
    -1.386
    """
    logq = jax.nn.log_softmax(logits)
    return masked_mean(jnp.sum(jnp.exp(logq) * logq, axis=-1), weights)


def symmetric_kl(logits_p: Array, logits_g: Array, weights: Array, stop_gradient: bool = False) -> Array:
    """Masked batch mean of ``KL(q^p || q^g) + KL(q^g || q^p)``. With ``stop_gradient``, the first
    argument of each KL is a constant target (each branch is distilled toward the other).

    Args:
      logits_p, logits_g: ``[B, K]`` the selected and the global branch.
      weights: ``[B]`` sample weights.
      stop_gradient: see above.
    Returns:
      a scalar >= 0.

    >>> kl = symmetric_kl(jnp.log(jnp.array([[1.0, 3.0]])), jnp.zeros((1, 2)), jnp.ones(1))  # (1/4, 3/4) vs uniform
    >>> print(f"{float(kl):.3f}")
    0.275
    """
    lp, lg = jax.nn.log_softmax(logits_p), jax.nn.log_softmax(logits_g)
    sg = jax.lax.stop_gradient if stop_gradient else (lambda a: a)
    kl_pg = jnp.sum(jnp.exp(sg(lp)) * (sg(lp) - lg), axis=-1)
    kl_gp = jnp.sum(jnp.exp(sg(lg)) * (sg(lg) - lp), axis=-1)
    return masked_mean(kl_pg + kl_gp, weights)


def forward(model: BNModel, cfg: Config, params: PyTree, stats: PyTree, x: Array, train: bool,
            mask: Array | None = None, key: Array | None = None) -> tuple[dict, PyTree]:
    """All branches' logits ``{"global", "selected", "rejected", "mask"}`` and the new BN statistics.
    Noise is drawn only when ``train`` and a ``key`` is given.

    Args:
      model: a :class:`pflax.models.bn.BNModel`.
      cfg: :class:`Config` (``use_pfsm``, ``tau``, ``threshold``, ``mask``).
      params, stats: the variables' ``params`` and ``batch_stats`` (``pfsm`` included).
      x: ``[B, ...]`` inputs.
      train: training mode (batch statistics, noise).
      mask: ``[B]`` real-sample mask for BatchNorm.
      key: the noise key.
    Returns:
      ``(branches, new batch_stats)``; without the PFSM only ``{"global"}``.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> model = BNModel(Linear(4), Linear(3), num_classes=3, feature_dim=4)  # linear body (4 features), heads
    >>> v = init(jax.random.PRNGKey(0), model, jnp.zeros((1, 2)), 1).server
    >>> out, _ = forward(model, Config(), v["params"], v["batch_stats"], jnp.ones((5, 2)), train=False)
    >>> sorted(out), out["mask"].shape
    (['global', 'mask', 'rejected', 'selected'], (5, 4))
    """
    z, s_body = model.encode(params, stats, x, train, mask)
    y_g, s_head = model.classify(params["head"], stats["head"], z, train, mask)
    new_stats = {**stats, "body": s_body, "head": s_head}
    if not cfg.use_pfsm:
        return {"global": y_g}, new_stats
    pfsm, pfsm_stats = params["pfsm"], stats["pfsm"]
    z_l = MaskNetwork(model.feature_dim).apply({"params": pfsm["mask"]}, z)
    m = selection_mask(z_l, key if train else None, cfg.tau, cfg.threshold, cfg.mask)
    y_p, s_p = model.classify(pfsm["head_p"], pfsm_stats["head_p"], z * m, train, mask)
    y_u, s_u = model.classify(pfsm["head_u"], pfsm_stats["head_u"], z * (1.0 - m), train, mask)
    new_stats["pfsm"] = {**pfsm_stats, "head_p": s_p, "head_u": s_u}
    return {"global": y_g, "selected": y_p, "rejected": y_u, "mask": m}, new_stats


def loss_terms(model: BNModel, cfg: Config, params, stats, batch: dict, w: Array, key) -> tuple[dict, PyTree]:
    """The four terms of eq. (15) (unweighted) and the new BN statistics.

    Args:
      model, cfg, params, stats: as :func:`forward`.
      batch: a minibatch ``{"x", "y"}``.
      w: ``[B]`` sample weights.
      key: the noise key.
    Returns:
      ``({"gce", "lce", "ent", "dis"}, new batch_stats)``; only ``gce`` without the PFSM.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> model = BNModel(Linear(4), Linear(3), 3, 4)
    >>> state = init(jax.random.PRNGKey(0), model, jnp.zeros((1, 2)), 1)
    >>> terms, _ = loss_terms(model, Config(use_pfsm=False), state.server["params"], state.server["batch_stats"],
    ...                       {"x": jnp.ones((5, 2)), "y": jnp.zeros(5, int)}, jnp.ones(5), None)
    >>> sorted(terms)
    ['gce']
    """
    out, new_stats = forward(model, cfg, params, stats, batch["x"], True, w, key)
    terms = {"gce": masked_mean(cross_entropy(out["global"], batch["y"]), w)}
    if cfg.use_pfsm:
        terms["lce"] = masked_mean(cross_entropy(out["selected"], batch["y"]), w)
        terms["ent"] = negative_entropy(out["rejected"], w)
        terms["dis"] = symmetric_kl(out["selected"], out["global"], w, cfg.kl_stop_gradient)
    return terms, new_stats


def objective(model: BNModel, cfg: Config, params, stats, batch, w, key):
    """Eq. (15): ``gce + lam_lce * lce + lam_ent * ent + lam_dis * dis`` (``gce`` alone without the
    PFSM), and the new BN statistics; :data:`pflax.algorithms.leafwise.Objective`'s signature.

    Args:
      model, cfg, params, stats, batch, w, key: as :func:`loss_terms`.
    Returns:
      ``(loss, new batch_stats)``.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> tiny = BNModel(Linear(4), Linear(3), 3, 4)
    >>> v = init(jax.random.PRNGKey(0), tiny, jnp.zeros((1, 2)), 1).server
    >>> zero = jax.tree.map(jnp.zeros_like, v["params"])  # every branch's logits are 0
    >>> loss, _ = objective(tiny, Config(lam_lce=1.0, lam_ent=0.0), zero, v["batch_stats"],
    ...                     {"x": jnp.ones((2, 2)), "y": jnp.zeros(2, int)}, jnp.ones(2), jax.random.PRNGKey(1))
    >>> print(f"{float(loss):.3f}")  # gce + lce = 2 log 3; dis = 0
    2.197
    """
    terms, new_stats = loss_terms(model, cfg, params, stats, batch, w, key)
    total = terms["gce"]
    if cfg.use_pfsm:
        total = total + cfg.lam_lce * terms["lce"] + cfg.lam_ent * terms["ent"] + cfg.lam_dis * terms["dis"]
    return total, new_stats


def predict(model: BNModel, cfg: Config, variables: PyTree, x: Array) -> Array:
    """Evaluation-mode scores: ``y^g + y^p`` (default), the sum of probabilities, or ``y^g`` alone.

    Args:
      model: the BN model.
      cfg: :class:`Config` (``ensemble``, ``use_pfsm``).
      variables: one client's personalized ``{"params", "batch_stats"}``.
      x: ``[B, ...]`` inputs.
    Returns:
      ``[B, num_classes]`` scores.

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> state = init(jax.random.PRNGKey(0), BNModel(Linear(4), Linear(3), 3, 4), jnp.zeros((1, 2)), 1)
    >>> probs = predict(state.model, Config(ensemble="probs"), state.server, jnp.ones((5, 2)))
    >>> probs.shape, bool(jnp.allclose(probs.sum(1), 2.0))  # two softmaxes summed: rows sum to 2
    ((5, 3), True)
    """
    out, _ = forward(model, cfg, variables["params"], variables["batch_stats"], x, False)
    if not cfg.use_pfsm or cfg.ensemble == "none":
        return out["global"]
    if cfg.ensemble == "probs":
        return jax.nn.softmax(out["global"]) + jax.nn.softmax(out["selected"])
    return out["global"] + out["selected"]


@init_on_execution_devices
def init(key: Array, model: BNModel, sample_x: Array, num_clients: int, config: Config = Config()) -> State:
    """A round-0 FedPick state: every client starts from the same body, heads and PFSM (model keys
    from ``split(key, 5)[:4]``, the training and sampling streams from the fifth).

    Args:
      key: PRNG key.
      model: a :class:`pflax.models.bn.BNModel`.
      sample_x: input samples (their shape fixes the model's).
      num_clients: N.
      config: :class:`Config`.
    Returns:
      the :class:`pflax.core.federated.State` (server and clients hold full variables).

    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> state = init(jax.random.PRNGKey(0), BNModel(Linear(4), Linear(3), 3, 4), jnp.zeros((1, 2)), 2)
    >>> sorted(state.clients["params"]["pfsm"]), state.clients["params"]["pfsm"]["mask"]["fc1"]["kernel"].shape
    (['head_p', 'head_u', 'mask'], (2, 2, 4))
    """
    keys = jax.random.split(key, 5)
    variables = _initial_variables(model, keys[:4], sample_x[:1])
    return leafwise.init_from_variables(keys[4], variables, num_clients, model, config)


@functools.partial(jax.jit, static_argnums=0)
def _initial_variables(model: BNModel, keys: Array, sample_x: Array) -> PyTree:
    """Body, global head and PFSM, initialised as one compiled program. Eagerly the flax
    initialisers compile op by op: FedPick's init of the test CNN took 7.5 s in a fresh process on a
    2-core CPU, 5.9 s this way. Same values (tested)."""
    k_model, k_mask, k_p, k_u = keys
    variables = model.init_eagerly(k_model, sample_x)
    mask_params = MaskNetwork(model.feature_dim).init(k_mask, jnp.zeros((1, model.feature_dim), jnp.float32))["params"]
    (p_p, s_p), (p_u, s_u) = model.init_head(k_p), model.init_head(k_u)
    variables["params"]["pfsm"] = {"mask": mask_params, "head_p": p_p, "head_u": p_u}
    variables["batch_stats"]["pfsm"] = {"mask": {}, "head_p": s_p, "head_u": s_u}
    return variables


def pieces(model: BNModel, cfg: Config) -> federated.RoundPieces:
    """FedPick's round pieces: the leaf-level rule (:func:`pflax.algorithms.leafwise.pieces_for`)
    with eq. (15) as the local objective.

    Args:
      model: the BN model.
      cfg: :class:`Config`.
    Returns:
      the :class:`pflax.core.federated.RoundPieces`.

    >>> type(pieces(None, Config())).__name__
    'RoundPieces'
    """
    return leafwise.pieces_for(model, cfg, objective)


def _evaluate(state: State, test: ClientData, train: ClientData | None = None) -> dict:
    return leafwise.evaluate_with(state, test, train, predict)


evaluate = jax.jit(_evaluate)
evaluate.__doc__ = """``evaluate(state, test, train=None) -> {"client_ids", "accuracy", "n"}``: each client's
ensemble prediction (:func:`predict`, noise-free hard mask) on its own test split. Jit-compiled."""


def _round(state: State, batch: ClientData, test: ClientData | None = None):
    return federated.run_round(pieces(state.model, state.config), state, batch, test, evaluate=_evaluate)


round = jax.jit(_round)  # noqa: A001 - the library's verb is `round`
round.__doc__ = """``round(state, batch, test=None) -> (state, metrics)``: one FedPick round (metrics ``n``,
``loss`` per participant); with ``test`` (same clients), ``metrics["accuracy"]`` is ``evaluate`` of
the new state. Jit-compiled."""


check_inputs = leafwise.check_inputs

ALGORITHM = federated.Algorithm(
    name="fedpick", Config=Config, init=init, round=round, evaluate=evaluate, pieces=pieces,
    check_inputs=check_inputs, backbone="bn",
    summary="FedPick (BN models only): per-client feature selection (Gumbel-sigmoid mask) on a FedBN backbone")


@jax.jit
def mask_frequency(state: State, data: ClientData) -> Array:
    """``[clients, k]``: for each client of ``data``, the fraction of its real samples on which each
    feature is selected by its own evaluation-mode (noise-free, hard) mask.

    Args:
      state: a FedPick state with ``use_pfsm=True``.
      data: the clients' samples (any split).
    Returns:
      the selection frequencies, one row per client of ``data``.

    >>> from pflax.data import ClientData
    >>> from pflax.models.bn import StatelessLinearHead as Linear
    >>> state = init(jax.random.PRNGKey(0), BNModel(Linear(4), Linear(3), 3, 4), jnp.zeros((1, 2)), 3)
    >>> data = ClientData(jnp.ones((2, 5, 2)), jnp.zeros((2, 5), int), jnp.ones((2, 5), bool), jnp.array([0, 2]))
    >>> mask_frequency(state, data).shape
    (2, 4)
    """
    if not state.config.use_pfsm:
        raise ValueError("mask_frequency needs a FedPick state with use_pfsm=True")
    model, cfg = state.model, state.config
    share = cfg.sharing.mask(state.server)

    def one(c, server):
        variables = leafwise.personal(server, c["client"], share)

        def masks(xb):
            return forward(model, cfg, variables["params"], variables["batch_stats"], xb, False)[0]["mask"]

        m = batched_apply(masks, c["x"])
        w = c["mask"].astype(m.dtype)[:, None]
        return (m * w).sum(0) / jnp.maximum(w.sum(), 1.0)

    clients = {"x": data.x, "mask": data.mask, "client": federated.take(state.clients, data.client_ids)}
    return map_clients(one, clients, state.server, federated.execution_of(state))


def mask_overlap(frequency: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """Pairwise intersection-over-union of the feature sets clients select on most of their samples
    (frequency > ``threshold``). Two empty sets have overlap 1.

    Args:
      frequency: ``[clients, k]`` from :func:`mask_frequency`.
      threshold: a feature is in a client's set above this frequency.
    Returns:
      ``[clients, clients]`` IoU matrix.

    >>> mask_overlap(np.array([[0.9, 0.8, 0.1], [0.9, 0.1, 0.1]])).tolist()
    [[1.0, 0.5], [0.5, 1.0]]
    """
    sel = np.asarray(frequency) > threshold
    inter = (sel[:, None, :] & sel[None, :, :]).sum(-1)
    union = (sel[:, None, :] | sel[None, :, :]).sum(-1)
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def plot_mask_selection(frequency: np.ndarray, names: list[str], path: str, threshold: float = 0.5) -> None:
    """Two panels: per-client selection frequency of every feature (features ordered by how many
    clients select them), and the clients' pairwise mask overlap (IoU).

    Args:
      frequency: ``[clients, k]`` from :func:`mask_frequency`.
      names: the clients' labels.
      path: the image file to write.
      threshold: as :func:`mask_overlap`.
    Returns:
      None (writes ``path``).

    >>> import os, tempfile
    >>> png = os.path.join(tempfile.mkdtemp(), "masks.png")
    >>> plot_mask_selection(np.array([[0.9, 0.2], [0.6, 0.7]]), ["a", "b"], png)
    >>> os.path.exists(png)
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    freq = np.asarray(frequency)
    order = np.argsort(-(freq > threshold).sum(0), kind="stable")
    overlap = mask_overlap(freq, threshold)
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 3.8), gridspec_kw={"width_ratios": [3, 1]})
    im = a.imshow(freq[:, order], aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    a.set_yticks(range(len(names)), names)
    a.set_xlabel("feature (sorted by number of clients selecting it)")
    a.set_title("selection frequency per client")
    fig.colorbar(im, ax=a)
    im2 = b.imshow(overlap, cmap="magma", vmin=0, vmax=1)
    b.set_xticks(range(len(names)), names, rotation=45, ha="right")
    b.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            b.text(j, i, f"{overlap[i, j]:.2f}", ha="center", va="center", color="w" if overlap[i, j] < 0.6 else "k", fontsize=8)
    b.set_title("mask overlap (IoU)")
    fig.colorbar(im2, ax=b)
    fig.tight_layout()
    save_png(fig, path, dpi=120)
