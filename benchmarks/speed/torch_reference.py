"""PyTorch reference loops for the speed benchmarks: the official FedPAC round (spec A.2) and FedAvg.

Written to do the same work as the official PyTorch code, client after client, so that pflax's round
time can be quoted as a ratio to it. Differences from the official code, none of which changes the
amount of model compute:

* minibatches are drawn by indexing tensors with a random permutation (``DataLoader(shuffle=True)``
  without its per-sample Python collation, which would only make PyTorch slower);
* the local test-accuracy passes (``acc0``/``acc2``) are left out, as they are in the pflax rounds
  being timed (both sides then do: statistics pass, head epochs, body epochs, centroid pass);
* the classifier-combination QP is solved with scipy's SLSQP in float64 instead of cvxpy/OSQP;
* on a GPU every client's data sit on the device from the start (the official code copies each
  minibatch from host memory).

Models are the FedPAC CNNs of spec A.6 (``models/cnn.py``), NCHW, with PyTorch's default init.
``load_pflax_params`` copies a pflax ``SplitModel``'s parameters in, so the two can be checked to
compute the same function.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import minimize
from torch import nn


class FedPACCNN(nn.Module):
    """FMNIST/EMNIST CNN (``channels=(16, 32)``, 1x28x28) or CIFAR CNN (``(16, 32, 64)``, 3x32x32)."""

    def __init__(self, in_channels: int, channels: tuple[int, ...], flat: int, num_classes: int = 10):
        super().__init__()
        specs = [(5, 0), (5, 1), (3, 1)]
        convs, cin = [], in_channels
        for cout, (k, pad) in zip(channels, specs):
            convs.append(nn.Conv2d(cin, cout, k, padding=pad))
            cin = cout
        self.convs = nn.ModuleList(convs)
        self.fc1 = nn.Linear(flat, 128)
        self.fc2 = nn.Linear(128, num_classes)  # the head (classifier_weight_keys in the official code)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = F.max_pool2d(F.leaky_relu(conv(x)), 2)
        return F.leaky_relu(self.fc1(x.flatten(1)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.features(x)
        return z, self.fc2(z)

    def body_parameters(self):
        return [p for name, p in self.named_parameters() if not name.startswith("fc2.")]

    def head_parameters(self):
        return list(self.fc2.parameters())


def make_model(dataset: str, num_classes: int = 10) -> FedPACCNN:
    if dataset == "fmnist":
        return FedPACCNN(1, (16, 32), 32 * 5 * 5, num_classes)
    if dataset == "cifar":
        return FedPACCNN(3, (16, 32, 64), 64 * 3 * 3, num_classes)
    raise ValueError(f"unknown dataset {dataset!r}")


def load_pflax_params(model: FedPACCNN, params: dict) -> None:
    """Copy pflax parameters (NHWC/HWIO, dense kernels [in, out]) into the torch model (NCHW/OIHW)."""
    body, head = params["body"], params["head"]
    with torch.no_grad():
        for i, conv in enumerate(model.convs):
            p = body[f"TorchConv_{i}"]
            conv.weight.copy_(torch.from_numpy(np.asarray(p["kernel"]).transpose(3, 2, 0, 1).copy()))
            conv.bias.copy_(torch.from_numpy(np.array(p["bias"])))
        # pflax flattens (h, w, c), torch flattens (c, h, w): permute fc1's input rows accordingly.
        k = np.asarray(body["TorchDense_0"]["kernel"])  # [h*w*c, 128]
        c = model.convs[-1].out_channels
        hw = int(round((k.shape[0] // c) ** 0.5))
        k = k.reshape(hw, hw, c, -1).transpose(2, 0, 1, 3).reshape(k.shape[0], -1)
        model.fc1.weight.copy_(torch.from_numpy(k.T.copy()))
        model.fc1.bias.copy_(torch.from_numpy(np.array(body["TorchDense_0"]["bias"])))
        model.fc2.weight.copy_(torch.from_numpy(np.asarray(head["TorchDense_0"]["kernel"]).T.copy()))
        model.fc2.bias.copy_(torch.from_numpy(np.array(head["TorchDense_0"]["bias"])))


def to_torch_clients(x: np.ndarray, y: np.ndarray, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-client (NCHW images, labels) from pflax-layout arrays ``x [m, n, H, W, C]``, ``y [m, n]``.

    On a GPU the clients' data are moved there once, up front (the official code copies each
    minibatch from host memory instead, which would only make PyTorch slower).
    """
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3))).to(device)
    yt = torch.from_numpy(y.astype(np.int64)).to(device)
    return [(xt[i], yt[i]) for i in range(x.shape[0])]


@dataclasses.dataclass(frozen=True)
class Config:
    body_lr: float = 0.01
    head_lr: float = 0.1
    momentum: float = 0.5
    weight_decay: float = 5e-4
    batch_size: int = 50
    head_epochs: int = 1
    body_epochs: int = 5  # FedAvg: local epochs
    lam: float = 1.0
    classifier_collaboration: bool = True


def _minibatches(n: int, batch_size: int, gen: torch.Generator, device: torch.device):
    order = torch.randperm(n, generator=gen).to(device)  # drawn on the host, as a DataLoader's sampler does
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def _sgd_epochs(model, params, loss_fn, x, y, epochs, lr, cfg, gen) -> None:
    """``epochs`` epochs of a fresh ``torch.optim.SGD`` on ``params`` only (the rest frozen)."""
    trainable = {id(p) for p in params}
    for p in model.parameters():
        p.requires_grad_(id(p) in trainable)
    opt = torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    for _ in range(epochs):
        for idx in _minibatches(x.shape[0], cfg.batch_size, gen, x.device):
            opt.zero_grad(set_to_none=True)
            loss_fn(x[idx], y[idx]).backward()
            opt.step()
    for p in model.parameters():
        p.requires_grad_(True)


@torch.no_grad()
def _class_sums(model, x, y, num_classes, batch_size):
    feats = torch.cat([model.features(x[i : i + batch_size]) for i in range(0, x.shape[0], batch_size)])
    onehot = F.one_hot(y, num_classes).to(feats.dtype)
    return onehot.sum(0), onehot.T @ feats, onehot.T @ feats.square().sum(1)


def _means(counts, sums):
    return torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], torch.zeros_like(sums))


def local_statistics(model, x, y, num_classes, batch_size):
    """Spec A.4 with the current model: (v, H, class means, sample count)."""
    counts, sums, sq = _class_sums(model, x, y, num_classes, batch_size)
    n = counts.sum()
    prior = counts / n
    mu = _means(counts, sums)
    mean_sq = torch.where(counts > 0, sq / counts.clamp(min=1), torch.zeros_like(sq))
    v = (prior * mean_sq - prior.square() * mu.square().sum(1)).sum() / n
    return v, prior[:, None] * mu, mu, n


def fedpac_client(model, global_body, head, x, y, centroids, valid, rnd, cfg, gen) -> dict:
    """Steps 2.2-2.8 of spec A.2 for one client, with the received model (global body + own head)."""
    model.load_state_dict({**global_body, **head})
    k = model.fc2.out_features
    # 2.2/2.3: statistics (v, H) and pre-training class means with the received model
    v, h, mu, n = local_statistics(model, x, y, k, cfg.batch_size)

    # 2.4: head, body frozen, fresh SGD
    def head_loss(xb, yb):
        return F.cross_entropy(model(xb)[1], yb)

    _sgd_epochs(model, model.head_parameters(), head_loss, x, y, cfg.head_epochs, cfg.head_lr, cfg, gen)

    # 2.5: body with the alignment term, head frozen, fresh SGD
    targets = torch.where(valid[:, None], centroids, mu)

    def body_loss(xb, yb):
        z, logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        if rnd > 0:
            loss = loss + cfg.lam * F.mse_loss(z, targets[yb])
        return loss

    _sgd_epochs(model, model.body_parameters(), body_loss, x, y, cfg.body_epochs, cfg.body_lr, cfg, gen)

    # 2.6: centroids with the trained local body
    post_counts, post_sums, _ = _class_sums(model, x, y, k, cfg.batch_size)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    return {
        "body": {n_: t for n_, t in state.items() if not n_.startswith("fc2.")},
        "head": {n_: t for n_, t in state.items() if n_.startswith("fc2.")},
        "v": float(v), "h": h.cpu().numpy().astype(np.float64), "n": float(n),
        "counts": post_counts, "centroids": _means(post_counts, post_sums),
    }


def _weighted_state(states: list[dict], weights: np.ndarray) -> dict:
    w = weights / weights.sum()
    return {k: sum(float(wi) * s[k] for wi, s in zip(w, states)) for k in states[0]}


def simplex_qp(p: np.ndarray) -> np.ndarray:
    """min a^T P a on the probability simplex (SLSQP, float64), then the official 1e-3 thresholding."""
    m = p.shape[0]
    res = minimize(
        lambda a: a @ p @ a, np.full(m, 1.0 / m), jac=lambda a: 2.0 * p @ a, method="SLSQP",
        bounds=[(0.0, 1.0)] * m, constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1.0}],
        options={"ftol": 1e-12, "maxiter": 200},
    )
    a = np.where(res.x > 1e-3, res.x, 0.0)
    return a / a.sum()


def combination_weights(v: np.ndarray, h: np.ndarray) -> np.ndarray:
    flat = h.reshape(h.shape[0], -1)
    gram = flat @ flat.T
    d = np.diag(gram)
    rows = []
    for i in range(len(v)):
        p = d[i] - gram[i][None, :] - gram[i][:, None] + gram + np.diag(v)
        rows.append(simplex_qp(0.5 * (p + p.T)))
    return np.stack(rows)


class FedPACServer:
    """Persistent state of spec A.2: one global body, a head per client, global centroids."""

    def __init__(self, model: FedPACCNN, num_clients: int, cfg: Config = Config(), seed: int = 0):
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.model, self.cfg = model, cfg
        self.body = {k: v for k, v in state.items() if not k.startswith("fc2.")}
        self.heads = [{k: v for k, v in state.items() if k.startswith("fc2.")} for _ in range(num_clients)]
        k, d = model.fc2.out_features, model.fc2.in_features
        device = model.fc2.weight.device
        self.centroids = torch.zeros(k, d, device=device)
        self.valid = torch.zeros(k, dtype=torch.bool, device=device)
        self.round = 0
        self.gen = torch.Generator().manual_seed(seed)

    def round_(self, clients: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        cfg = self.cfg
        outs = [
            fedpac_client(self.model, self.body, self.heads[i], x, y, self.centroids, self.valid, self.round, cfg, self.gen)
            for i, (x, y) in enumerate(clients)
        ]
        sizes = np.array([o["n"] for o in outs])
        self.body = _weighted_state([o["body"] for o in outs], sizes)
        counts = torch.stack([o["counts"] for o in outs])
        total = counts.sum(0)
        fresh = torch.einsum("mk,mkd->kd", counts, torch.stack([o["centroids"] for o in outs]))
        fresh = fresh / total.clamp(min=1)[:, None]
        self.centroids = torch.where(total[:, None] > 0, fresh, self.centroids)
        self.valid = self.valid | (total > 0)
        if cfg.classifier_collaboration:
            weights = combination_weights(np.array([o["v"] for o in outs]), np.stack([o["h"] for o in outs]))
        else:
            weights = np.eye(len(outs))
        heads = [o["head"] for o in outs]
        for i in range(len(outs)):
            self.heads[i] = _weighted_state(heads, weights[i])
        self.round += 1


class FedAvgServer:
    """FedAvg: E local epochs of full-model SGD from the global model, sample-size weighted average."""

    def __init__(self, model: FedPACCNN, cfg: Config = Config(), seed: int = 0):
        self.model, self.cfg = model, cfg
        self.params = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.gen = torch.Generator().manual_seed(seed)

    def client(self, x, y) -> dict:
        self.model.load_state_dict(self.params)
        loss = lambda xb, yb: F.cross_entropy(self.model(xb)[1], yb)
        _sgd_epochs(self.model, list(self.model.parameters()), loss, x, y, self.cfg.body_epochs, self.cfg.body_lr,
                    self.cfg, self.gen)
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def round_(self, clients: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        states = [self.client(x, y) for x, y in clients]
        self.params = _weighted_state(states, np.array([float(x.shape[0]) for x, _ in clients]))
