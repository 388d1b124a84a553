"""The official FedPAC round as its published code runs it, host-side work included, for the speed benchmark.

``torch_reference.py`` is a *tuned* PyTorch loop: the official model compute with the Python overhead taken
out. This module is the other comparator the speed issue asks for, a faithful port of the official per-client
loop (JianXu95/FedPAC: ``running.py::train_round_fedpac``, ``methods/fedpac.py::LocalUpdate_FedPAC``,
``tools.py``, ``data_loader.py``). It keeps every piece of work that code does per round:

* **Data:** each client reads its samples through ``DataLoader(batch_size=50, shuffle=True)`` (no workers)
  over an index subset of a dataset whose ``__getitem__`` makes a PIL image from the uint8 array, then applies
  ``ToTensor`` and ``Normalize((0.1307,), (0.3081,))``, then the loader collates. This is torchvision's
  FashionMNIST path. torchvision itself is not used (its wheel on this machine's index does not load with the
  CPU build of torch), so the two transforms are written out here with the same tensor operations.
* **Statistics** (``statistics_extraction``): a no-grad pass over the training loader, each sample's label read
  with ``.item()`` and its feature appended to a per-class list; then per class a stack, a mean and
  ``trace(FᵀF / n)``, each read back with ``.item()``.
* **Local centroids** (``get_local_protos``), before and after training: a pass over the training loader
  *with* autograd recording, as the official code has no ``no_grad`` there; per-sample appends; class means
  summed in a Python loop (``tools.get_protos``).
* **Training:** a ``deepcopy`` of the model, the unused all-parameter SGD the official code builds first, one
  head epoch at lr 0.1, then five body epochs. From round 1 on, each body step fills the alignment targets
  sample by sample (``labels[i].item()``, a dict lookup, a row assignment). ``loss.item()`` is read every step.
* **Server:** ``deepcopy`` of every uploaded state dict; the weighted state average and the class-size-weighted
  centroid average, both as Python loops over clients; every client's body and global centroids overwritten.
  The head weights: for each participant, the pairwise loop of ``tools.get_head_agg_weight``, which takes
  K outer products of size d×d per pair and their trace. Then the eigen-decomposition and ``eigvals`` checks
  of its stability path, and a cvxpy QP (``quad_form``, default solver). The 1e-3 threshold is applied, and
  the new head is combined by ``agg_classifier_weighted_p``.

Left out, all in PyTorch's favour:

* the three local test passes (``acc0``, ``acc1``, ``acc2``), because the pflax round being timed evaluates
  nothing;
* the prints;
* the stacked copy of the global centroids that ``update_global_protos`` builds and training never reads.

Replaced because it no longer exists:

* ``torch.eig`` (removed from PyTorch) becomes ``torch.linalg.eig``, keeping the real parts as ``torch.eig``'s
  first column did. P is symmetric, so its eigenvalues are real.

The model is the same ``nn.Module`` as the tuned loop's (spec A.6). Every client owns a model, as the official
clients do.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

import torch_reference as tr

FMNIST_MEAN, FMNIST_STD = (0.1307,), (0.3081,)  # the official loader normalises FMNIST with MNIST's statistics


def to_tensor(pic: Image.Image) -> torch.Tensor:
    """PIL 'L' image -> float32 [1, H, W] in [0, 1], the operations of torchvision's ``ToTensor``."""
    arr = torch.from_numpy(np.array(pic, np.uint8, copy=True))
    arr = arr.view(pic.size[1], pic.size[0], 1).permute(2, 0, 1).contiguous()
    return arr.to(torch.float32).div(255)


def normalize(t: torch.Tensor, mean, std) -> torch.Tensor:
    """torchvision's ``Normalize`` on a [C, H, W] tensor (the statistics become tensors on every call)."""
    mean = torch.as_tensor(mean, dtype=t.dtype, device=t.device).view(-1, 1, 1)
    std = torch.as_tensor(std, dtype=t.dtype, device=t.device).view(-1, 1, 1)
    return t.sub(mean).div(std)


class GrayImages(Dataset):
    """uint8 images [N, H, W] and integer labels, read one sample at a time as torchvision's MNIST classes do."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.data = torch.from_numpy(np.ascontiguousarray(images, dtype=np.uint8))
        self.targets = torch.from_numpy(labels.astype(np.int64))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        img, target = self.data[index], int(self.targets[index])
        img = Image.fromarray(img.numpy(), mode="L")
        return normalize(to_tensor(img), FMNIST_MEAN, FMNIST_STD), target


class ClientSubset(Dataset):
    """The official ``DatasetSplit``: a client's index list into the shared dataset."""

    def __init__(self, dataset: Dataset, indices):
        self.dataset, self.idxs = dataset, [int(i) for i in indices]

    def __len__(self) -> int:
        return len(self.idxs)

    def __getitem__(self, item: int):
        return self.dataset[self.idxs[item]]


def quantize_images(x: np.ndarray) -> np.ndarray:
    """Normalised float images [..., H, W, 1] -> the uint8 images that ``Normalize`` maps back onto them."""
    raw = (x[..., 0] * FMNIST_STD[0] + FMNIST_MEAN[0]) * 255.0
    return np.clip(np.rint(raw), 0, 255).astype(np.uint8)


def _features_by_class(model, loader, grad: bool) -> dict[int, list[torch.Tensor]]:
    by_class: dict[int, list[torch.Tensor]] = {}
    with torch.set_grad_enabled(grad):
        for images, labels in loader:
            features, _ = model(images)
            features = features.clone().detach()
            for i in range(len(labels)):
                by_class.setdefault(labels[i].item(), []).append(features[i, :])
    return by_class


def _class_means(by_class: dict[int, list[torch.Tensor]]) -> dict[int, torch.Tensor]:
    """``tools.get_protos``: each class mean summed one feature at a time."""
    means = {}
    for label, feats in by_class.items():
        total = 0 * feats[0]
        for f in feats:
            total += f
        means[label] = total / len(feats)
    return means


class OfficialClient:
    def __init__(self, model: tr.FedPACCNN, dataset: Dataset, indices, cfg: tr.Config, num_classes: int):
        self.model, self.cfg, self.num_classes = model, cfg, num_classes
        self.loader = DataLoader(ClientSubset(dataset, indices), batch_size=cfg.batch_size, shuffle=True)
        self.head_keys = ["fc2.weight", "fc2.bias"]
        counts = torch.zeros(num_classes)
        for _, labels in self.loader:  # at construction, as the official prior_label/size_label do
            for k in range(num_classes):
                counts[k] += (labels == k).sum()
        self.size = len(indices)
        self.prior = counts / self.size
        self.class_sizes = self.prior * self.size
        self.global_centroids: dict[int, torch.Tensor] = {}

    def statistics(self) -> tuple[float, torch.Tensor]:
        feats = {k: torch.stack(v) for k, v in _features_by_class(self.model, self.loader, grad=False).items()}
        d = self.model.fc2.in_features
        prior, prior_sq = self.prior, self.prior * self.prior
        v, h_ref = 0.0, torch.zeros(self.num_classes, d)
        for k in range(self.num_classes):
            if k in feats:
                f = feats[k]
                mu = f.mean(dim=0)
                h_ref[k] = prior[k] * mu
                v += (prior[k] * torch.trace(torch.mm(f.t(), f) / f.shape[0])).item()
                v -= (prior_sq[k] * (mu * mu)).sum().item()
        return v / self.size, h_ref

    def _phase(self, params, lr: float, epochs: int, loss_fn) -> None:
        """``epochs`` epochs of a fresh SGD over ``params``, the rest of the model frozen."""
        trainable = {id(p) for p in params}
        for p in self.model.parameters():
            p.requires_grad = id(p) in trainable
        opt = torch.optim.SGD([p for p in self.model.parameters() if p.requires_grad], lr=lr,
                              momentum=self.cfg.momentum, weight_decay=self.cfg.weight_decay)
        for _ in range(epochs):
            for images, labels in self.loader:
                self.model.zero_grad()
                loss = loss_fn(images, labels)
                loss.backward()
                opt.step()
                loss.item()  # read back every step, as the official code does to log it

    def train(self, rnd: int):
        model, cfg = self.model, self.cfg
        model.train()
        self.last_model = copy.deepcopy(model)
        local_before = _class_means(_features_by_class(model, self.loader, grad=True))
        torch.optim.SGD(model.parameters(), lr=cfg.body_lr, momentum=0.5, weight_decay=5e-4)  # built, never stepped
        ce, mse = nn.CrossEntropyLoss(), nn.MSELoss()
        head = [p for n, p in model.named_parameters() if n in self.head_keys]
        body = [p for n, p in model.named_parameters() if n not in self.head_keys]
        self._phase(head, 0.1, cfg.head_epochs, lambda xb, yb: ce(model(xb)[1], yb))

        def body_loss(xb, yb):
            features, logits = model(xb)
            loss = ce(logits, yb)
            if rnd > 0:
                targets = features.clone().detach()
                for i in range(len(yb)):
                    yi = yb[i].item()
                    targets[i] = (self.global_centroids[yi] if yi in self.global_centroids else local_before[yi]).detach()
                loss = loss + cfg.lam * mse(targets, features)
            return loss

        self._phase(body, cfg.body_lr, cfg.body_epochs, body_loss)
        for p in model.parameters():
            p.requires_grad = True
        local_after = _class_means(_features_by_class(model, self.loader, grad=True))
        return model.state_dict(), local_after

    def set_body(self, state: dict) -> None:
        own = self.model.state_dict()
        self.model.load_state_dict({k: (v if k in self.head_keys else state[k]) for k, v in own.items()})

    def set_head(self, state: dict) -> None:
        own = self.model.state_dict()
        self.model.load_state_dict({k: (state[k] if k in self.head_keys else v) for k, v in own.items()})

    def set_centroids(self, centroids: dict[int, torch.Tensor]) -> None:
        self.global_centroids = centroids


def average_states(states: list[dict], sizes: list[float]) -> dict:
    w = torch.tensor(sizes)
    w = w / w.sum()
    out = copy.deepcopy(states[0])
    for key in out:
        out[key] = torch.zeros_like(out[key])
        for i, s in enumerate(states):
            out[key] += w[i] * s[key]
    return out


def aggregate_centroids(locals_: list[dict], class_sizes: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    feats, sizes = {}, {}
    for means, n in zip(locals_, class_sizes):
        for label, mu in means.items():
            feats.setdefault(label, []).append(mu)
            sizes.setdefault(label, []).append(n[label])
    out = {}
    for label, mus in feats.items():
        total = 0 * mus[0]
        for n, mu in zip(sizes[label], mus):
            total += n * mu
        out[label] = total / sum(sizes[label])
    return out


def head_weights(variances: list[float], hs: list[torch.Tensor]) -> list[list[float] | None]:
    """``tools.get_head_agg_weight``: per participant, P from outer products, its stability path, a cvxpy QP."""
    import cvxpy as cvx

    m, (num_classes, d) = len(hs), hs[0].shape
    weights = []
    for i in range(m):
        v = torch.tensor(variances)
        h_ref = hs[i]
        dist = torch.zeros(m, m)
        for j1 in range(m):
            for j2 in range(j1, m):
                acc = torch.zeros(d, d)
                for k in range(num_classes):
                    acc += torch.mm((h_ref[k] - hs[j1][k]).reshape(d, 1), (h_ref[k] - hs[j2][k]).reshape(1, d))
                dist[j1][j2] = dist[j2][j1] = torch.trace(acc)
        p = (torch.diag(v) + dist).numpy()
        evals, evecs = torch.linalg.eig(torch.tensor(p))
        evals, evecs = evals.real, evecs.real
        rebuilt = 0
        for ii in range(m):
            if evals[ii] >= 0.01:
                rebuilt += evals[ii] * torch.mm(evecs[:, ii].reshape(m, 1), evecs[:, ii].reshape(1, m))
        p = rebuilt.numpy() if not np.all(np.linalg.eigvals(p) >= 0.0) else p
        if np.all(np.linalg.eigvals(p) >= 0):
            alpha = cvx.Variable(m)
            cvx.Problem(cvx.Minimize(cvx.quad_form(alpha, p)), [cvx.sum(alpha) == 1.0, alpha >= 0]).solve()
            weights.append([a * (a > 1e-3) for a in alpha.value])
        else:
            weights.append(None)
    return weights


def combine_heads(states: list[dict], alpha, keys, own: int) -> dict:
    """``agg_classifier_weighted_p``: the alpha-weighted heads divided by the sum of alpha."""
    out = copy.deepcopy(states[own])
    for key in keys:
        out[key] = torch.zeros_like(out[key])
    total = 0
    for i, s in enumerate(states):
        total += alpha[i]
        for key in keys:
            out[key] += alpha[i] * s[key]
    for key in keys:
        out[key] = torch.div(out[key], total)
    return out


class OfficialFedPAC:
    """N clients with their own models, all deep copies of one initial model, and the official round."""

    def __init__(self, model: tr.FedPACCNN, images: np.ndarray, labels: np.ndarray, cfg: tr.Config = tr.Config(),
                 seed: int = 0):
        """``images`` uint8 [N, n, 28, 28], ``labels`` [N, n]; the clients' samples are stacked into one dataset."""
        torch.manual_seed(seed)
        num, n = labels.shape
        dataset = GrayImages(images.reshape(num * n, *images.shape[2:]), labels.reshape(-1))
        k = model.fc2.out_features
        self.cfg, self.round = cfg, 0
        self.clients = [OfficialClient(copy.deepcopy(model), dataset, range(i * n, (i + 1) * n), cfg, k)
                        for i in range(num)]
        self.rng = np.random.RandomState(seed)

    def round_(self) -> None:
        num = len(self.clients)
        chosen = sorted(self.rng.choice(range(num), num, replace=False))  # frac = 1: everyone, in index order
        states, variances, hs, centroids, class_sizes, sizes = [], [], [], [], [], []
        for idx in chosen:
            client = self.clients[idx]
            v, h = client.statistics()
            variances.append(copy.deepcopy(v)), hs.append(copy.deepcopy(h))
            class_sizes.append(client.class_sizes)
            state, local_centroids = client.train(self.round)
            states.append(copy.deepcopy(state)), centroids.append(copy.deepcopy(local_centroids))
            sizes.append(client.size)
        body = average_states(states, sizes)
        global_centroids = aggregate_centroids(centroids, class_sizes)
        for client in self.clients:
            client.set_body(body)
            client.set_centroids(global_centroids)
        if self.cfg.classifier_collaboration:
            alphas = head_weights(variances, hs)
            for pos, idx in enumerate(chosen):
                client = self.clients[idx]
                new = combine_heads(states, alphas[pos], client.head_keys, pos) if alphas[pos] is not None else states[pos]
                client.set_head(new)
        self.round += 1
