"""FedPick, FedBN and the leaf-level sharing rules on BN backbones: the mask, the losses, what is
averaged and what is not, BatchNorm semantics, and the offline cross-domain data."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pflax.algorithms import fedbn, fedpick, leafwise
from pflax.data.clients import ClientData
from pflax.models.bn import MaskedBatchNorm, digits_cnn, is_bn_path

N_CLIENTS = 3


@pytest.fixture(scope="module")
def tiny_model():
    return digits_cnn(num_classes=10, width=0.0625, image_size=16)  # channels 4/4/8, k = 128


@pytest.fixture(scope="module")
def tiny_batch():
    # Drawn with NumPy: a 5-D jax.random.normal compiles for ~1.8 s on XLA:CPU, for data any draw serves.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N_CLIENTS, 40, 16, 16, 3)).astype(np.float32)
    y = rng.integers(0, 10, (N_CLIENTS, 40)).astype(np.int32)
    # Ragged clients: 40, 33, 26 real samples.
    mask = np.arange(40)[None, :] < np.array([40, 33, 26])[:, None]
    x = np.where(mask[..., None, None, None], x, 0.0).astype(np.float32)
    return ClientData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask), jnp.arange(N_CLIENTS, dtype=jnp.int32))


# ------------------------------------------------------------------------------------------- mask

def test_hard_mask_is_binary_forward_and_sigmoid_gradient_backward():
    z = jax.random.normal(jax.random.PRNGKey(3), (64, 32)) * 3.0
    key = jax.random.PRNGKey(4)
    tau = 10.0
    m = fedpick.selection_mask(z, key, tau)
    assert set(np.unique(np.asarray(m)).tolist()) <= {0.0, 1.0}
    noise = jax.random.logistic(key, z.shape)
    soft = jax.nn.sigmoid((z + noise) / tau)
    np.testing.assert_array_equal(np.asarray(m), np.asarray((z + noise) / tau >= 0, np.float32))
    assert np.mean(np.asarray(m) == np.asarray(soft >= 0.5)) > 0.999
    c = jax.random.normal(jax.random.PRNGKey(5), z.shape)
    grad = jax.grad(lambda zz: jnp.sum(c * fedpick.selection_mask(zz, key, tau)))(z)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(c * soft * (1 - soft) / tau), rtol=1e-5, atol=1e-7)


def test_noise_is_gumbel_difference_and_absent_at_evaluation():
    z = jnp.linspace(-2.0, 2.0, 101)[None, :].repeat(8, 0)
    m_eval = fedpick.selection_mask(z, None, tau=10.0)
    np.testing.assert_array_equal(np.asarray(m_eval), np.asarray(z >= 0, np.float32))
    # With noise, entries near 0 flip between draws; without it they never do.
    draws = [np.asarray(fedpick.selection_mask(z, jax.random.PRNGKey(i), tau=10.0)) for i in range(2)]
    assert (draws[0] != draws[1]).any()
    # Logistic(0, 1) = difference of two Gumbel(0, 1): variance pi^2 / 3.
    sample = np.asarray(jax.random.logistic(jax.random.PRNGKey(9), (200_000,)))
    assert abs(sample.var() - np.pi ** 2 / 3) < 0.05


def test_soft_mask_is_the_relaxation():
    z = jax.random.normal(jax.random.PRNGKey(3), (4, 8))
    np.testing.assert_allclose(fedpick.selection_mask(z, None, 2.0, mode="soft"), jax.nn.sigmoid(z / 2.0))


def test_evaluation_is_deterministic_and_uses_no_noise(tiny_model, tiny_batch):
    state = fedpick.init(jax.random.PRNGKey(0), tiny_model, tiny_batch.x[0], N_CLIENTS)
    state, _ = fedpick.round(state, tiny_batch)
    a = fedpick.evaluate(state, tiny_batch)["accuracy"]
    b = fedpick.evaluate(state, tiny_batch)["accuracy"]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    freq = np.asarray(fedpick.mask_frequency(state, tiny_batch.take(jnp.array([0]))))
    # Evaluation masks are 1[z^l >= 0] computed per sample: check one sample by hand.
    v = leafwise.personal_variables(state, jnp.array([0]))
    v0 = jax.tree.map(lambda a: a[0], v)
    z, _ = tiny_model.encode(v0["params"], v0["batch_stats"], tiny_batch.x[0, :1], False)
    z_l = fedpick.MaskNetwork(tiny_model.feature_dim).apply({"params": v0["params"]["pfsm"]["mask"]}, z)
    out, _ = fedpick.forward(tiny_model, state.config, v0["params"], v0["batch_stats"], tiny_batch.x[0, :1], False)
    np.testing.assert_array_equal(np.asarray(out["mask"]), np.asarray(z_l >= 0, np.float32))
    assert freq.shape == (1, tiny_model.feature_dim) and 0 <= freq.min() <= freq.max() <= 1


def test_compiled_init_equals_eager_init(tiny_model):
    # fedpick.init builds body, heads and PFSM as one compiled program; the values must be those
    # of calling the initialisers one by one (as the models' own eager/compiled init test does).
    x = jnp.zeros((1, 16, 16, 3))
    state = fedpick.init(jax.random.PRNGKey(5), tiny_model, x, N_CLIENTS)
    k_model, k_mask, k_p, k_u, _ = jax.random.split(jax.random.PRNGKey(5), 5)
    eager = tiny_model.init_eagerly(k_model, x)
    mask_net = fedpick.MaskNetwork(tiny_model.feature_dim)
    (p_p, s_p), (p_u, s_u) = tiny_model.init_head(k_p), tiny_model.init_head(k_u)
    eager["params"]["pfsm"] = {"mask": mask_net.init(k_mask, jnp.zeros((1, tiny_model.feature_dim)))["params"],
                               "head_p": p_p, "head_u": p_u}
    eager["batch_stats"]["pfsm"] = {"mask": {}, "head_p": s_p, "head_u": s_u}
    assert jax.tree.structure(state.server) == jax.tree.structure(eager)
    for a, b, c in zip(jax.tree.leaves(state.server), jax.tree.leaves(eager), jax.tree.leaves(state.clients)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(c), np.broadcast_to(np.asarray(b), (N_CLIENTS,) + b.shape))


# ----------------------------------------------------------------------------------------- losses

def _np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_loss_terms_match_hand_computation(tiny_model):
    cfg = fedpick.Config(tau=2.0, lam_lce=3.0, lam_ent=0.5, lam_dis=7.0)
    state = fedpick.init(jax.random.PRNGKey(1), tiny_model, jnp.zeros((1, 16, 16, 3)), 1, cfg)
    v = jax.tree.map(lambda a: a[0], state.clients)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((6, 16, 16, 3)), jnp.float32)
    y = jnp.array([0, 1, 2, 3, 4, 5])
    w = jnp.array([1, 1, 1, 1, 0, 0], jnp.float32)
    key = jax.random.PRNGKey(7)
    terms, _ = fedpick.loss_terms(tiny_model, cfg, v["params"], v["batch_stats"], {"x": x, "y": y}, w, key)
    out, _ = fedpick.forward(tiny_model, cfg, v["params"], v["batch_stats"], x, True, w, key)
    g, p, u = (np.asarray(out[k], np.float64) for k in ("global", "selected", "rejected"))
    real = np.asarray(w) > 0
    yy = np.asarray(y)

    def ce(logits):
        q = _np_softmax(logits)
        return -np.log(q[np.arange(len(yy)), yy])[real].mean()

    qg, qp, qu = _np_softmax(g), _np_softmax(p), _np_softmax(u)
    ent = (qu * np.log(qu)).sum(-1)[real].mean()
    dis = ((qp * (np.log(qp) - np.log(qg))).sum(-1) + (qg * (np.log(qg) - np.log(qp))).sum(-1))[real].mean()
    np.testing.assert_allclose(float(terms["gce"]), ce(g), rtol=1e-5)
    np.testing.assert_allclose(float(terms["lce"]), ce(p), rtol=1e-5)
    np.testing.assert_allclose(float(terms["ent"]), ent, rtol=1e-4)
    np.testing.assert_allclose(float(terms["dis"]), dis, rtol=1e-4, atol=1e-7)
    assert float(terms["ent"]) <= 0.0  # negative entropy
    total, _ = fedpick.objective(tiny_model, cfg, v["params"], v["batch_stats"], {"x": x, "y": y}, w, key)
    np.testing.assert_allclose(float(total), ce(g) + 3.0 * ce(p) + 0.5 * ent + 7.0 * dis, rtol=1e-4)


def test_kl_stop_gradient_option_changes_only_gradients():
    lp = jax.random.normal(jax.random.PRNGKey(0), (5, 10))
    lg = jax.random.normal(jax.random.PRNGKey(1), (5, 10))
    w = jnp.ones(5)
    assert np.isclose(fedpick.symmetric_kl(lp, lg, w), fedpick.symmetric_kl(lp, lg, w, True))
    g_free = jax.grad(lambda a: fedpick.symmetric_kl(a, lg, w))(lp)
    g_stop = jax.grad(lambda a: fedpick.symmetric_kl(a, lg, w, True))(lp)
    assert not np.allclose(g_free, g_stop)
    assert fedpick.symmetric_kl(lp, lp, w) == pytest.approx(0.0, abs=1e-6)


# ------------------------------------------------------------------------------ sharing and rounds

def _client_keys(state, ids):
    round_key = jax.random.fold_in(state.key, state.round)
    return [jax.random.fold_in(round_key, int(i)) for i in ids]


@pytest.mark.usefixtures("float32_matmuls")
def test_round_averages_exactly_the_non_bn_non_pfsm_leaves(tiny_model, tiny_batch):
    state = fedpick.init(jax.random.PRNGKey(0), tiny_model, tiny_batch.x[0], N_CLIENTS)
    new, _ = fedpick.round(state, tiny_batch)
    cfg = state.config
    # Each client's training, redone by hand from the same start and key.
    train_one = jax.jit(lambda start, c: leafwise.local_train(start, c, tiny_model, cfg, fedpick.objective)[0])
    trained = []
    for i, key in enumerate(_client_keys(state, range(N_CLIENTS))):
        start = jax.tree.map(lambda a: a[i], state.clients)
        c = {"x": tiny_batch.x[i], "y": tiny_batch.y[i], "mask": tiny_batch.mask[i], "key": key}
        trained.append(train_one(start, c))
    n = np.asarray(tiny_batch.mask.sum(1), np.float64)
    share = cfg.sharing.mask(state.server)
    flat_share = jax.tree_util.tree_flatten_with_path(share)[0]
    leaves_new_server = jax.tree.leaves(new.server)
    leaves_new_clients = jax.tree.leaves(new.clients)
    leaves_old_server = jax.tree.leaves(state.server)
    leaves_trained = [jax.tree.leaves(t) for t in trained]
    n_bn = n_pfsm = n_shared = 0
    for j, (path, shared) in enumerate(flat_share):
        is_pfsm = str(path[1].key) == "pfsm"
        if shared:
            n_shared += 1
            assert not is_bn_path(path) and not is_pfsm
            mean = sum(n[i] * np.asarray(leaves_trained[i][j], np.float64) for i in range(N_CLIENTS)) / n.sum()
            np.testing.assert_allclose(np.asarray(leaves_new_server[j]), mean, rtol=2e-4, atol=2e-6)
        else:
            n_bn += is_bn_path(path)
            n_pfsm += is_pfsm
            assert is_bn_path(path) or is_pfsm
            # Never averaged: every client keeps exactly what it trained; the server copy is untouched.
            for i in range(N_CLIENTS):
                np.testing.assert_allclose(np.asarray(leaves_new_clients[j][i]), np.asarray(leaves_trained[i][j]),
                                           rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(np.asarray(leaves_new_server[j]), np.asarray(leaves_old_server[j]))
    assert n_shared and n_bn and n_pfsm
    # BN running statistics really differ between clients (they saw different data).
    stats = np.asarray(new.clients["batch_stats"]["body"]["bn0"]["mean"])
    assert not np.allclose(stats[0], stats[1])


def _shared_paths(config, variables) -> set[str]:
    flat = jax.tree_util.tree_flatten_with_path(config.sharing.mask(variables))[0]
    return {"/".join(str(k.key) for k in path) for path, shared in flat if shared}


def test_share_ablations_average_what_they_name(tiny_model):
    # The round applies config.sharing.mask exactly (test above); here: what each switch puts in it.
    v = fedpick.init(jax.random.PRNGKey(0), tiny_model, jnp.zeros((1, 16, 16, 3)), 1).server
    default = _shared_paths(fedpick.Config(), v)
    share_bn = _shared_paths(fedpick.Config(share_bn=True), v)
    share_pfsm = _shared_paths(fedpick.Config(share_pfsm=True), v)
    assert not any("/bn" in p or p.startswith("batch_stats") or "/pfsm/" in p for p in default)
    assert "batch_stats/body/bn0/mean" in share_bn and "params/head/bn1/scale" in share_bn
    assert not any("/pfsm/" in p for p in share_bn)
    assert "params/pfsm/mask/fc0/kernel" in share_pfsm and "params/pfsm/head_p/out/kernel" in share_pfsm
    assert "params/pfsm/head_p/bn0/scale" not in share_pfsm  # BN stays local unless share_bn
    assert default < share_bn and default < share_pfsm


def test_without_pfsm_fedpick_is_fedbn(tiny_model, tiny_batch):
    key = jax.random.PRNGKey(0)
    pick = fedpick.init(key, tiny_model, tiny_batch.x[0], N_CLIENTS, fedpick.Config(use_pfsm=False))
    bn = fedbn.init(key, tiny_model, tiny_batch.x[0], N_CLIENTS)
    # Same body/head initialisation needs the same model key: rebuild FedBN's from FedPick's variables.
    variables = jax.tree.map(lambda a: a[0], pick.clients)
    variables = {c: {p: variables[c][p] for p in ("body", "head")} for c in variables}
    bn = leafwise.init_from_variables(jax.random.PRNGKey(1), variables, N_CLIENTS, tiny_model, fedbn.Config())
    bn = bn.replace(key=pick.key)
    pick, m1 = fedpick.round(pick, tiny_batch)
    bn, m2 = fedbn.round(bn, tiny_batch)
    np.testing.assert_allclose(np.asarray(m1["loss"]), np.asarray(m2["loss"]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(pick.server["params"]["body"]["conv0"]["kernel"]),
                               np.asarray(bn.server["params"]["body"]["conv0"]["kernel"]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(pick.clients["batch_stats"]["body"]["bn0"]["var"]),
                               np.asarray(bn.clients["batch_stats"]["body"]["bn0"]["var"]), rtol=1e-6)


def test_partial_sharing_rules(tiny_model):
    v = tiny_model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16, 16, 3)))
    every = _shared_paths(leafwise.Config(sharing=leafwise.Sharing(("body", "head"), bn=True)), v)
    is_bn = lambda p: "/bn" in p or p.startswith("batch_stats")
    assert _shared_paths(leafwise.rule("fedavg"), v) == every
    assert _shared_paths(leafwise.rule("fedprox"), v) == every
    assert _shared_paths(leafwise.rule("fedbn"), v) == {p for p in every if not is_bn(p)}
    assert _shared_paths(leafwise.rule("fedper"), v) == {p for p in every if "/body/" in p}
    assert _shared_paths(leafwise.rule("fedrep"), v) == {p for p in every if "/body/" in p}
    assert _shared_paths(leafwise.rule("lg_fedavg"), v) == {p for p in every if "/head/" in p}
    assert _shared_paths(leafwise.rule("local_only"), v) == set()
    assert fedbn.Config().sharing == leafwise.rule("fedbn").sharing


def test_fedrep_trains_head_before_body_with_the_other_frozen(tiny_model, tiny_batch):
    cfg = leafwise.rule("fedrep", head_epochs=1, local_epochs=0)  # head phase only: the body must not move
    state = leafwise.init(jax.random.PRNGKey(0), tiny_model, tiny_batch.x[0], N_CLIENTS, cfg)
    new, _ = leafwise.round(state, tiny_batch)
    np.testing.assert_array_equal(np.asarray(new.clients["params"]["body"]["conv0"]["kernel"]),
                                  np.asarray(state.clients["params"]["body"]["conv0"]["kernel"]))
    assert not np.allclose(np.asarray(new.clients["params"]["head"]["out"]["kernel"]),
                           np.asarray(state.clients["params"]["head"]["out"]["kernel"]))


def test_config_validation():
    with pytest.raises(ValueError, match="tau"):
        fedpick.Config(tau=0.0)
    with pytest.raises(ValueError, match="mask"):
        fedpick.Config(mask="gumbel")
    with pytest.raises(ValueError, match="ensemble"):
        fedpick.Config(ensemble="vote")
    with pytest.raises(ValueError, match="lam"):
        fedpick.Config(lam_dis=-1.0)
    with pytest.raises(ValueError, match="prox_mu"):
        leafwise.rule("fedprox", prox_mu=-0.1)
    assert fedpick.Config.office().tau == 1.0 and fedpick.Config.digits().lam_dis == 10.0


# ------------------------------------------------------------------------------------- BatchNorm

def test_masked_batchnorm_matches_pytorch_semantics():
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    mask = np.array([1, 1, 1, 1, 0, 0], bool)
    x[~mask] = 1e6  # padded rows must not reach the statistics
    bn = MaskedBatchNorm()
    v = bn.init(jax.random.PRNGKey(0), jnp.asarray(x), False)
    y, upd = bn.apply(v, jnp.asarray(x), True, jnp.asarray(mask), mutable=["batch_stats"])
    real = x[mask]
    mean, var = real.mean(0), real.var(0)
    np.testing.assert_allclose(np.asarray(y)[mask], (real - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(upd["batch_stats"]["mean"], 0.1 * mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(upd["batch_stats"]["var"], 0.9 + 0.1 * real.var(0, ddof=1), rtol=1e-5)
    # Evaluation uses the running statistics.
    y_eval = bn.apply({"params": v["params"], "batch_stats": upd["batch_stats"]}, jnp.asarray(real), False)
    rs = upd["batch_stats"]
    np.testing.assert_allclose(y_eval, (real - rs["mean"]) / np.sqrt(rs["var"] + 1e-5), rtol=1e-4, atol=1e-5)
    # An all-padding batch leaves the statistics alone.
    _, upd0 = bn.apply(v, jnp.asarray(x), True, jnp.zeros(6, bool), mutable=["batch_stats"])
    np.testing.assert_array_equal(upd0["batch_stats"]["mean"], np.zeros(4))


def test_alexnet_bn_shapes():
    from pflax.models.bn import adaptive_avg_pool, alexnet_bn

    model = alexnet_bn(10)
    variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 256, 256, 3))))
    assert model.feature_dim == 4096
    assert variables["params"]["body"]["fc0"]["kernel"].shape == (256 * 6 * 6, 4096)
    assert len(variables["batch_stats"]["body"]) == 7  # BN after every conv and FC layer
    out = jax.eval_shape(lambda v: model.logits(v, jnp.zeros((2, 256, 256, 3)))[0], variables)
    assert out.shape == (2, 10)
    # PyTorch's adaptive pooling windows: 7 -> 6 overlaps neighbouring windows by one pixel.
    x = jnp.arange(49.0).reshape(1, 7, 7, 1)
    pooled = np.asarray(adaptive_avg_pool(x, 6))[0, :, :, 0]
    assert pooled[0, 0] == pytest.approx(np.mean([0, 1, 7, 8]))


def test_digits_five_without_tfds_names_the_fix(tmp_path):
    from pflax.data.domains import digits_five_tfds
    from pflax.data.sources import DataError

    with pytest.raises(DataError, match="TensorFlow Datasets|tfds|data.npz"):
        digits_five_tfds(data_dir=str(tmp_path), domains=("mnist",))
    with pytest.raises(DataError, match="does not exist|data.npz"):
        digits_five_tfds(data_dir=str(tmp_path), domains=("usps",))


def test_digits_cnn_has_the_paper_feature_dim():
    model = digits_cnn()
    assert model.feature_dim == 8192
    shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3))))
    assert shapes["params"]["head"]["fc0"]["kernel"].shape == (8192, 2048)


# ------------------------------------------------------------------------------------------- data

def test_offline_digit_domains(mnist_dir, fmnist_dir):
    from pflax.data.domains import DOMAINS, digit_domains

    root = mnist_dir.parent
    train, test, names = digit_domains(root, train_per_domain=50, test_per_domain=40, seed=3)
    again, _, _ = digit_domains(root, train_per_domain=50, test_per_domain=40, seed=3)
    assert names == list(DOMAINS) and train.x.shape == (5, 50, 32, 32, 3) and test.x.shape == (5, 40, 32, 32, 3)
    np.testing.assert_array_equal(np.asarray(train.x), np.asarray(again.x))
    x = np.asarray(train.x)
    assert x.min() >= -1.0 and x.max() <= 1.0
    # Domains differ in low-level statistics (per-domain channel means are far apart).
    means = x.reshape(5, -1, 3).mean(1)
    assert min(np.linalg.norm(means[i] - means[j]) for i in range(5) for j in range(i + 1, 5) if {i, j} != {0, 4}) > 0.05
    # Test images are the same MNIST digits in every domain (same labels, in order).
    assert (np.asarray(test.y) == np.asarray(test.y)[0]).all()


def test_real_usps_is_a_domain_beside_mnist(usps_file, mnist_dir):
    from pflax.data.domains import digit_domains, load_usps

    usps = load_usps(usps_file)
    assert usps["x_train"].shape == (7291, 32, 32, 3) and usps["x_test"].shape == (2007, 32, 32, 3)
    assert set(np.unique(usps["y_train"])) == set(range(10)) and 0.0 <= usps["x_train"].min() < usps["x_train"].max() <= 1.0
    train, test, names = digit_domains(mnist_dir.parent, ("mnist", "usps", "inverse"), train_per_domain=60, seed=1)
    assert names == ["mnist", "usps", "inverse"] and train.x.shape == (3, 60, 32, 32, 3)
    assert np.asarray(test.sizes).tolist() == [10000, 2007, 10000]  # every domain's full test set
    x = np.asarray(train.x[1])
    # USPS's own images: not any MNIST image, and its labels follow USPS's (7291 images, all 10 digits).
    assert not any(np.array_equal(x[0], m) for m in np.asarray(train.x[0]))
    assert x.min() >= -1.0 and x.max() <= 1.0
    again, _, _ = digit_domains(mnist_dir.parent, ("mnist", "usps", "inverse"), train_per_domain=60, seed=1)
    np.testing.assert_array_equal(np.asarray(again.x), np.asarray(train.x))
    # The MNIST-based domains are the ones they would be without USPS beside them.
    alone, _, _ = digit_domains(mnist_dir.parent, ("mnist",), train_per_domain=60, seed=1)
    np.testing.assert_array_equal(np.asarray(alone.x[0]), np.asarray(train.x[0]))


def test_digits_five_reads_local_domains_as_rgb32(tmp_path):
    from pflax.data.domains import digits_five_tfds

    rng = np.random.default_rng(0)
    (tmp_path / "usps").mkdir()
    np.savez(tmp_path / "usps" / "data.npz", x_train=rng.integers(0, 256, (30, 16, 16), dtype=np.uint8),
             y_train=rng.integers(0, 10, 30), x_test=rng.integers(0, 256, (12, 16, 16), dtype=np.uint8),
             y_test=rng.integers(0, 10, 12))
    train, test, names = digits_five_tfds(str(tmp_path), train_per_domain=20, domains=("usps",))
    assert names == ["usps"] and train.x.shape == (1, 20, 32, 32, 3) and test.x.shape == (1, 12, 32, 32, 3)
    x = np.asarray(test.x)[0]
    assert -1.0 <= x.min() and x.max() <= 1.0 and np.allclose(x[..., 0], x[..., 2])  # grey -> RGB
    with pytest.raises(Exception, match="fewer than"):
        digits_five_tfds(str(tmp_path), train_per_domain=31, domains=("usps",))
