"""More baselines (FedProto, IFCA, HypCluster, FedEM, Per-FedAvg, FedFomo, FeSEM, CFL, pFedHN): for each
one, a test of its defining rule and a test that it learns.

Same tiny federation as ``test_baselines.py``: 10-class synthetic 12x12 images, FedPAC's s = 20% shards
(5 clients, 3 dominant classes each), an MLP with one hidden layer of 32 units. Chance is 0.1. Each
algorithm uses one configuration for both of its tests, so it compiles once.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from pflax.algorithms import base, cfl, fedem, fedfomo, fedproto, fesem, hypcluster, ifca, perfedavg, pfedhn
from pflax.core.losses import cross_entropy
from pflax.core.train import sgd_steps
from pflax.data import fedpac_shards, from_partition, synthetic
from pflax.models import mlp

NUM_CLIENTS, NUM_CLASSES = 5, 10
MODEL = mlp(NUM_CLASSES, hidden=(32,))
KEY = jax.random.PRNGKey(0)
FAST = dict(lr=0.05, batch_size=20, local_epochs=2)
CONFIGS = {
    fedproto: {}, ifca: {}, hypcluster: {}, fedem: {}, fedfomo: {}, fesem: {},
    perfedavg: dict(alpha=0.05, beta=0.05),
    # Thresholds that always split once round >= start_round (2): rounds 0-1 are FedAvg, then bi-partitions.
    cfl: dict(eps1=1e9, eps2=0.0, start_round=2, max_clusters=4),
    # Plain server SGD here, so the hand computation below is the whole rule.
    pfedhn: dict(inner_steps=10, server_lr=0.05, server_momentum=0.0, server_weight_decay=0.0),
}
NEEDS_TRAIN = (perfedavg,)


@pytest.fixture(scope="module")
def fed():
    d = synthetic(num_classes=NUM_CLASSES, train_per_class=100, test_per_class=60, image_size=12, seed=0, noise=0.3)
    train = from_partition(d.x_train, d.y_train, fedpac_shards(d.y_train, NUM_CLIENTS, 100, 0.2, NUM_CLASSES))
    test = from_partition(d.x_test, d.y_test, fedpac_shards(d.y_test, NUM_CLIENTS, 60, 0.2, NUM_CLASSES))
    return train, test


def start(mod, fed, model=MODEL, **overrides):
    train, test = fed
    state = mod.init(KEY, model, train.x[0], NUM_CLIENTS, mod.Config(**{**FAST, **CONFIGS[mod], **overrides}))
    mod.check_inputs(state, train, test)
    return state


def accuracy(mod, state, fed) -> np.ndarray:
    train, test = fed
    out = mod.evaluate(state, test, train) if mod in NEEDS_TRAIN else mod.evaluate(state, test)
    return np.asarray(out["accuracy"])


def row(tree, i):
    return jax.tree.map(lambda a: a[i], tree)


def leaves_equal(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def assert_trees_close(got, want, rtol=1e-5, atol=1e-6):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def client_loss(params, train, i, mask=None):
    logits = MODEL.apply(params, train.x[i])
    m = np.asarray(train.mask[i] if mask is None else mask, np.float64)
    return float(np.sum(np.asarray(cross_entropy(logits, train.y[i]), np.float64) * m) / max(m.sum(), 1.0))


# ------------------------------------------------------------------------------------------ learning
PERSONAL, MIXED = 0.35, 0.2  # FedEM's and Per-FedAvg's shared models learn slower on these non-IID clients
LEARNERS = [(fedproto, PERSONAL), (ifca, PERSONAL), (fedem, MIXED), (perfedavg, MIXED), (fedfomo, PERSONAL),
            (fesem, PERSONAL), (cfl, PERSONAL), (pfedhn, PERSONAL)]


@pytest.mark.parametrize("mod,floor", LEARNERS, ids=[m.__name__.rsplit(".", 1)[-1] for m, _ in LEARNERS])
def test_learns(mod, floor, fed):
    train, _ = fed
    state = start(mod, fed)
    before = accuracy(mod, state, fed).mean()
    for _ in range(4):
        state, metrics = mod.round(state, train)
        assert not bool(metrics["nonfinite"])
        assert metrics["loss"].shape == (NUM_CLIENTS,)
    after = accuracy(mod, state, fed)
    assert after.shape == (NUM_CLIENTS,)
    assert after.mean() > floor and after.mean() > before + 0.08, (before, after)

    # A participant without data (its padding NaN) changes nothing of its own and never poisons the state.
    empty = train.replace(mask=train.mask.at[1].set(False), x=train.x.at[1].set(jnp.nan))
    new, metrics = mod.round(state, empty)
    assert not bool(metrics["nonfinite"]) and float(metrics["n"][1]) == 0.0
    assert all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree.leaves(new) if jnp.issubdtype(a.dtype, jnp.floating))
    assert leaves_equal(row(new.clients, 1), row(state.clients, 1))


# ------------------------------------------------------------------------------------ defining rules
def test_fedproto_global_prototypes_are_count_weighted_means(fed):
    train, _ = fed
    state, _ = fedproto.round(start(fedproto, fed), train)  # round 0: CE only, prototypes appear
    # Unequal sizes, and class 7 absent everywhere: it must keep its previous prototype.
    batch = train.replace(mask=train.mask.at[1, 60:].set(False) & (train.y != 7))
    new, _ = fedproto.round(state, batch)
    sums, weights = 0.0, 0.0
    for i in range(NUM_CLIENTS):  # hand computation from the participants' trained bodies
        body = row(new.clients, i)["body"]
        z = np.asarray(MODEL.features(body, train.x[i]), np.float64)
        onehot = np.eye(NUM_CLASSES)[np.asarray(train.y[i])] * np.asarray(batch.mask[i])[:, None]
        sums = sums + onehot.T @ z  # = n_{i,y} * c_{i,y}
        weights = weights + onehot.sum(0)
    got = np.asarray(new.server["protos"])
    present = weights > 0
    np.testing.assert_allclose(got[present], sums[present] / weights[present][:, None], rtol=1e-4, atol=1e-5)
    assert not present[7] and np.array_equal(got[7], np.asarray(state.server["protos"])[7])
    assert bool(new.server["valid"][7])  # still valid from round 0


def test_fedproto_local_prototypes_need_no_communication(fed):
    """FedProto-L (``prototypes="local"``): round 0 is FedProto-G's (plain CE, nothing to align to yet);
    afterwards each client aligns to its own previous prototypes, so its trajectory does not depend on
    any other client's data, while FedProto-G's does; the server never changes. The second round's
    local loss, by hand, is CE plus the MSE to the client's own class means from its previous model."""
    train, _ = fed
    local = start(fedproto, fed, prototypes="local")
    global_ = start(fedproto, fed)
    after_local, _ = fedproto.round(local, train)
    after_global, _ = fedproto.round(global_, train)
    # The two settings compile to different programs; under the suite's fast-compile flags XLA may round an
    # element differently (seen: 7e-9 in 1 of 11,520 weights on an AVX-512 CPU). Aligning to anything in round 0
    # would move the weights by orders of magnitude more.
    for a, b in zip(jax.tree.leaves(after_local.clients), jax.tree.leaves(after_global.clients)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)
    assert leaves_equal(after_local.server, local.server)

    # Other clients' data changed (client 3's labels shuffled): client 0 moves only under FedProto-G.
    other = train.replace(y=train.y.at[3].set(jnp.roll(train.y[3], 7)))
    for state, communicates in ((after_local, False), (after_global, True)):
        a, _ = fedproto.round(fedproto.round(state, train)[0], train)
        b, _ = fedproto.round(fedproto.round(state, other)[0], other)
        assert leaves_equal(row(a.clients, 0), row(b.clients, 0)) != communicates, state.config.prototypes

    # Round 2 of client 0 by hand: the loss is CE + lam * MSE(f(x), own class mean of f_prev(x)).
    params0 = row(after_local.clients, 0)
    z_prev = np.asarray(MODEL.features(params0["body"], train.x[0]), np.float64)
    labels, mask = np.asarray(train.y[0]), np.asarray(train.mask[0])
    means = np.stack([z_prev[mask & (labels == k)].mean(0) if (mask & (labels == k)).any() else np.zeros(z_prev.shape[1])
                      for k in range(NUM_CLASSES)])
    held = np.array([(mask & (labels == k)).any() for k in range(NUM_CLASSES)])
    loss = fedproto.proto_loss(MODEL, {"protos": jnp.asarray(means, jnp.float32), "valid": jnp.asarray(held)}, 1.0)
    key = jax.random.fold_in(jax.random.fold_in(after_local.key, 1), 0)  # the participant key of round 1, client 0
    cfg = after_local.config
    client = {"x": train.x[0], "y": train.y[0], "mask": train.mask[0], "key": key}
    want, _ = base.train(params0, loss, client, cfg)
    got, _ = fedproto.round(after_local, train)
    assert_trees_close(row(got.clients, 0), want, rtol=1e-4, atol=1e-5)


def test_ifca_assigns_the_cluster_with_the_smallest_loss(fed):
    train, _ = fed
    state, _ = ifca.round(start(ifca, fed), train)
    new, metrics = ifca.round(state, train)
    for i in range(NUM_CLIENTS):
        losses = [client_loss(row(state.server, j), train, i) for j in range(3)]
        np.testing.assert_allclose(np.asarray(metrics["cluster_losses"][i]), losses, rtol=1e-4)
        assert int(metrics["cluster"][i]) == int(np.argmin(losses))
    np.testing.assert_array_equal(np.asarray(new.clients["cluster"]), np.asarray(metrics["cluster"]))
    # A cluster nobody chose keeps its model exactly; a chosen one moves.
    for j in range(3):
        chosen = j in np.asarray(metrics["cluster"])
        assert leaves_equal(row(new.server, j), row(state.server, j)) != chosen
    # Evaluation uses each client's chosen cluster model.
    acc = np.asarray(ifca.evaluate(new, fed[1])["accuracy"])
    for i in range(NUM_CLIENTS):
        params = row(new.server, int(new.clients["cluster"][i]))
        pred = np.argmax(np.asarray(MODEL.apply(params, fed[1].x[i])), -1)
        assert acc[i] == pytest.approx(float(np.mean(pred == np.asarray(fed[1].y[i]))))


def test_hypcluster_is_ifca(fed):
    train, _ = fed
    # The same jitted functions and the same initial hypotheses; the rule itself is tested for IFCA.
    assert hypcluster.round is ifca.round and hypcluster.evaluate is ifca.evaluate
    assert issubclass(hypcluster.Config, ifca.Config) and "identical in rule to ifca" in hypcluster.__doc__.lower()
    b = hypcluster.init(KEY, MODEL, train.x[0], NUM_CLIENTS, hypcluster.Config(**FAST))
    assert leaves_equal(b.server, start(ifca, fed).server)


def test_fedem_pi_is_the_mean_responsibility(fed):
    train, _ = fed
    state, _ = fedem.round(start(fedem, fed), train)
    batch = train.replace(mask=train.mask.at[2, 70:].set(False))  # padding must not count
    new, metrics = fedem.round(state, batch)
    pi = np.asarray(new.clients["pi"])
    np.testing.assert_allclose(pi.sum(1), 1.0, rtol=1e-5)
    for i in range(NUM_CLIENTS):
        mask = np.asarray(batch.mask[i])
        losses = np.stack([np.asarray(cross_entropy(MODEL.apply(row(state.server, m), train.x[i]), train.y[i]), np.float64)
                           for m in range(3)])  # [M, n]
        logits = np.log(np.asarray(state.clients["pi"][i], np.float64))[:, None] - losses
        q = np.exp(logits - logits.max(0))
        q /= q.sum(0)
        np.testing.assert_allclose(pi[i], q[:, mask].mean(1), rtol=1e-4, atol=1e-6)
    assert not np.allclose(pi, 1.0 / 3)  # the E-step moved away from uniform
    # Prediction is the pi-mixture of the component softmaxes.
    acc = np.asarray(fedem.evaluate(new, fed[1])["accuracy"])
    x, y = fed[1].x[0], np.asarray(fed[1].y[0])
    probs = sum(pi[0, m] * np.asarray(jax.nn.softmax(MODEL.apply(row(new.server, m), x))) for m in range(3))
    assert acc[0] == pytest.approx(float(np.mean(np.argmax(probs, -1) == y)))


def test_fedem_client_size_weights_are_the_official_servers_mean_over_every_client(fed):
    """``component_weights = "client_size"``: each participant weighs every component by n_i, not by its
    responsibility mass n_i pi_im; and the server's mean counts the non-participants' copies, the current
    components, so a round of 2 of the 5 clients moves each component 2/5 of the way to the participants'
    mean. With M = 1 (q = 1 everywhere) the participants' mean is the default rule's."""
    train, _ = fed
    state, _ = fedem.round(start(fedem, fed), train)
    client = {"x": train.x[1], "y": train.y[1], "mask": train.mask[1].at[70:].set(False), "key": KEY,
              "client": row(state.clients, 1)}
    masses = {}
    for weights in ("responsibility", "client_size"):
        cfg = dataclasses.replace(state.config, component_weights=weights)
        masses[weights] = np.asarray(fedem._local_update(state.server, client, MODEL, cfg)["sum"]["weight"])
    np.testing.assert_allclose(masses["client_size"], [70.0] * 3)
    q = fedem.responsibilities(MODEL, state.server, state.clients["pi"][1], client["x"], client["y"], client["mask"])
    np.testing.assert_allclose(masses["responsibility"], np.asarray(q.sum(1)), rtol=1e-5)
    assert not np.allclose(masses["responsibility"], masses["client_size"])

    two = train.take(jnp.array([0, 3]))
    one = {w: start(fedem, fed, num_components=1, component_weights=w) for w in ("responsibility", "client_size")}
    moved = {w: fedem.round(s, two)[0].server for w, s in one.items()}
    want = jax.tree.map(lambda old, mean: old + (2 / NUM_CLIENTS) * (mean - old), one["client_size"].server,
                        moved["responsibility"])
    for got, exp in zip(jax.tree.leaves(moved["client_size"]), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-5, atol=1e-7)
    full = {w: fedem.round(s, train)[0].server for w, s in one.items()}  # everyone trains: the same mean
    for got, exp in zip(jax.tree.leaves(full["client_size"]), jax.tree.leaves(full["responsibility"])):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-6, atol=1e-7)


def test_fedem_ft_scores_each_client_fine_tuned_mixture(fed):
    """FedEM-FT (``finetune_epochs > 0``): each client runs a throw-away local FedEM update on its training
    split before it is scored. With lr = 0 the components stay and only the M-step moves ``pi``, so the
    score is the mixture with ``pi`` = the mean responsibility on the training split, by hand."""
    import dataclasses

    train, test = fed
    state, _ = fedem.round(start(fedem, fed), train)
    frozen = state.replace(config=dataclasses.replace(state.config, finetune_epochs=2, lr=0.0, weight_decay=0.0))
    acc = np.asarray(fedem.evaluate(frozen, test, train)["accuracy"])
    for i in range(NUM_CLIENTS):
        mask = np.asarray(train.mask[i])
        losses = np.stack([np.asarray(cross_entropy(MODEL.apply(row(state.server, m), train.x[i]), train.y[i]), np.float64)
                           for m in range(3)])
        logits = np.log(np.asarray(state.clients["pi"][i], np.float64))[:, None] - losses
        q = np.exp(logits - logits.max(0))
        pi = (q / q.sum(0))[:, mask].mean(1)
        probs = sum(pi[m] * np.asarray(jax.nn.softmax(MODEL.apply(row(state.server, m), test.x[i]))) for m in range(3))
        assert acc[i] == pytest.approx(float(np.mean(np.argmax(probs, -1) == np.asarray(test.y[i]))))
    # With training, fine-tuning on a split fits it: scored on the data it was tuned on, far above plain FedEM.
    tuned = state.replace(config=dataclasses.replace(state.config, finetune_epochs=10))
    plain = np.asarray(fedem.evaluate(state, test)["accuracy"])
    fitted = np.asarray(fedem.evaluate(tuned, test, test)["accuracy"])
    assert fitted.mean() > plain.mean() + 0.1, (fitted, plain)
    np.testing.assert_array_equal(fitted, np.asarray(fedem.evaluate(tuned, test, test)["accuracy"]))
    with pytest.raises(ValueError, match="training split"):
        fedem.evaluate(tuned, test)


def test_perfedavg_first_order_meta_steps_by_hand(fed):
    """Every meta-step is w <- w - beta grad f(w - alpha grad f(w; D); D'), D and D' from two shuffles."""
    from pflax.core import federated
    from pflax.core.train import epoch_order, gather_minibatch

    train, _ = fed
    c = start(perfedavg, fed).config
    state, _ = perfedavg.round(start(perfedavg, fed), train)
    new, _ = perfedavg.round(state, train)
    grad = jax.jit(jax.grad(base.ce_loss(MODEL)))
    keys = federated.participant_keys(state, train.client_ids)
    data = {"x": train.x, "y": train.y}
    models = []
    for i in range(NUM_CLIENTS):
        plans = [epoch_order(k, train.mask[i], c.local_epochs, c.batch_size) for k in jax.random.split(keys[i], 2)]
        w = state.server
        for t in range(plans[0][0].shape[0]):
            (b0, ok0), (b1, ok1) = [(gather_minibatch(row(data, i), idx[t], ok[t]), ok[t]) for idx, ok in plans]
            adapted = jax.tree.map(lambda a, g: a - c.alpha * g, w, grad(w, b0, ok0.astype(jnp.float32)))
            w = jax.tree.map(lambda a, g: a - c.beta * g, w, grad(adapted, b1, ok1.astype(jnp.float32)))
        models.append(w)
    assert_trees_close(new.server, jax.tree.map(lambda *m: sum(m) / NUM_CLIENTS, *models), rtol=1e-4, atol=1e-6)


def test_fedfomo_weights():
    scores = fedfomo.fomo_scores(jnp.float32(2.0), jnp.array([1.0, 3.0, 1.5, 0.5]), jnp.array([2.0, 1.0, 0.0, 3.0]),
                                 jnp.array([True, True, True, False]))
    np.testing.assert_allclose(np.asarray(scores), [0.5, -1.0, 0.0, 0.0])  # distance 0 and empty slot -> 0
    w = np.asarray(fedfomo.fomo_weights(jnp.array([0.5, -1.0, 0.25, 0.0])))
    np.testing.assert_allclose(w, [2 / 3, 0.0, 1 / 3, 0.0], rtol=1e-6)
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    # No neighbour lowers the loss: every weight is 0 (theta_i is kept), never NaN.
    np.testing.assert_array_equal(np.asarray(fedfomo.fomo_weights(jnp.array([-1.0, 0.0, -0.1]))), 0.0)
    train_mask, val_mask = fedfomo.validation_split(jnp.arange(20) < 17, 0.2)
    assert int(val_mask.sum()) == 3 and int(train_mask.sum()) == 14 and not bool(jnp.any(train_mask & val_mask))


def test_fedfomo_update_by_hand(fed):
    train, _ = fed
    state = start(fedfomo, fed)
    state, metrics = fedfomo.round(state, train)
    assert not bool(np.any(np.asarray(metrics["download_valid"])))  # round 0: nobody has uploaded yet
    # Reset client 0 to the initial model: the others' trained models now lower its validation loss.
    init = row(start(fedfomo, fed).clients, 0)
    state = state.replace(clients=jax.tree.map(lambda a, b: a.at[0].set(b), state.clients, init))
    new, metrics = fedfomo.round(state, train)
    sel = np.asarray(metrics["downloaded"])
    assert sel.shape == (NUM_CLIENTS, 4) and all(i not in sel[i] for i in range(NUM_CLIENTS))
    w = np.asarray(metrics["weights"])
    assert np.all(w >= 0) and np.all((np.abs(w.sum(1) - 1) < 1e-5) | (w.sum(1) == 0))
    assert w[0].sum() == pytest.approx(1.0)
    _, val = fedfomo.validation_split(train.mask[0], 0.2)
    own = ravel_pytree(init)[0]
    scores = []
    for n in sel[0]:
        theta_n = row(state.clients, int(n))
        dist = float(jnp.linalg.norm(ravel_pytree(theta_n)[0] - own))
        scores.append((client_loss(init, train, 0, val) - client_loss(theta_n, train, 0, val)) / dist)
    want = np.maximum(scores, 0) / np.maximum(scores, 0).sum()
    np.testing.assert_allclose(w[0], want, rtol=1e-3, atol=1e-6)
    # The affinity row grows by the signed scores of the downloaded models.
    np.testing.assert_allclose(np.asarray(new.server["affinity"][0, sel[0]] - state.server["affinity"][0, sel[0]]),
                               scores, rtol=1e-3, atol=1e-6)


def test_fesem_assigns_nearest_centre_and_averages_members(fed):
    train, _ = fed
    state, metrics = fesem.round(start(fesem, fed), train)  # initialisation round: maximin centres
    assert bool(state.server["ready"]) and len(set(np.asarray(metrics["cluster"]).tolist())) > 1
    batch = train.replace(mask=train.mask.at[3, 50:].set(False))  # unequal sizes
    new, metrics = fesem.round(state, batch)
    own = np.asarray(base.flat_rows(state.clients["params"]))
    centres = np.asarray(base.flat_rows(state.server["centers"]))
    want = np.argmin(((own[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(np.asarray(metrics["cluster"]), want)
    sizes = np.asarray(batch.sizes, np.float64)
    for k in range(3):
        members = want == k
        if not members.any():
            assert leaves_equal(row(new.server["centers"], k), row(state.server["centers"], k))
            continue
        p = sizes * members / (sizes * members).sum()
        mean = jax.tree.map(lambda a: np.tensordot(p, np.asarray(a, np.float64), axes=(0, 0)), new.clients["params"])
        assert_trees_close(row(new.server["centers"], k), mean)


def test_cfl_bipartition_by_hand():
    # Clients 0, 1, 4 push one way, 2 and 3 the other; client 5 is not a member.
    u = np.array([[1.0, 0.1, 0.0], [0.9, -0.1, 0.1], [-1.0, 0.0, 0.2], [-0.8, 0.1, -0.1], [1.0, 0.3, 0.0], [-1.0, 0.0, 0.0]])
    s = cfl.cosine_similarities(jnp.asarray(u))
    members = jnp.array([True, True, True, True, True, False])
    for linkage in ("complete", "single"):
        second = np.asarray(cfl.bipartition(s, members, linkage))
        np.testing.assert_array_equal(second, [False, False, True, True, False, False])
    np.testing.assert_allclose(np.asarray(cfl.cosine_similarities(jnp.zeros((2, 3)))), 0.0)  # zero update: no NaN


def test_cfl_splits_only_when_allowed(fed):
    train, _ = fed
    state = start(cfl, fed)
    early, metrics = cfl.round(state, train)  # round 0 < start_round: no split
    assert not np.any(np.asarray(metrics["split"])) and np.array_equal(np.asarray(early.server["active"]), [1, 0, 0, 0])
    assert np.all(np.asarray(early.clients["cluster"]) == 0)
    assert leaves_equal(row(early.server["models"], 1), row(state.server["models"], 1))  # inactive slots untouched
    late, metrics = cfl.round(early.replace(round=jnp.int32(2)), train)
    clusters = np.asarray(late.clients["cluster"])
    assert bool(metrics["split"][0]) and np.array_equal(np.asarray(late.server["active"]), [1, 1, 0, 0])
    assert set(clusters.tolist()) == {0, 1}
    assert float(metrics["mean_norm"][0]) < float(metrics["max_norm"][0])  # a weighted mean is shorter than the longest
    # Members of a cluster share its model; the two new clusters differ.
    assert not leaves_equal(row(late.server["models"], 0), row(late.server["models"], 1))


@pytest.mark.usefixtures("float32_matmuls")
def test_pfedhn_server_step_is_jacobian_transpose_times_delta(fed):
    """psi <- psi - lr sum_i J_psi(e_i)^T dtheta_i and e_i <- e_i - lr J_e^T dtheta_i, with J^T dtheta
    back-propagated by hand (float64 numpy) through the hypernetwork's layers."""
    train, _ = fed
    state = start(pfedhn, fed)
    new, metrics = pfedhn.round(state, train)  # every client, so the learning test's compilation is reused
    c = state.config
    inner = jax.jit(lambda th, idx, ok, x, y: sgd_steps(th, base.ce_loss(MODEL), {"x": x, "y": y}, idx, ok, c.optimizer()))
    psi = jax.tree.map(lambda a: np.asarray(a, np.float64), state.server["hypernetwork"])
    unravel = pfedhn.unraveler(MODEL, train.x[0])
    want = jax.tree.map(np.copy, psi)
    for i in range(NUM_CLIENTS):
        e = np.asarray(state.clients["embed"][i], np.float64)
        # The client's inner steps, redone with the same minibatches and optimiser.
        key = jax.random.fold_in(jax.random.fold_in(state.key, state.round), i)
        idx, ok = pfedhn.random_minibatches(key, train.mask[i], c.inner_steps, c.batch_size)
        theta = unravel(pfedhn.generate_flat(state.server["hypernetwork"], state.clients["embed"][i]))
        trained, _ = inner(theta, idx, ok, train.x[i], train.y[i])
        delta = np.asarray(ravel_pytree(theta)[0] - ravel_pytree(trained)[0], np.float64)
        assert float(metrics["delta_norm"][i]) == pytest.approx(np.linalg.norm(delta), rel=1e-4)
        # Forward pass, then the transpose of its Jacobian applied to delta, layer by layer.
        acts, pre = [e], []
        for layer in psi["hidden"]:
            pre.append(acts[-1] @ layer["w"] + layer["b"])
            acts.append(np.maximum(pre[-1], 0.0))
        want["out"]["w"] -= c.server_lr * np.outer(acts[-1], delta)
        want["out"]["b"] -= c.server_lr * delta
        g = psi["out"]["w"] @ delta
        for k in reversed(range(len(psi["hidden"]))):
            g = g * (pre[k] > 0)
            want["hidden"][k]["w"] -= c.server_lr * np.outer(acts[k], g)
            want["hidden"][k]["b"] -= c.server_lr * g
            g = psi["hidden"][k]["w"] @ g
        np.testing.assert_allclose(np.asarray(new.clients["embed"][i]), e - c.server_lr * g, rtol=1e-4, atol=1e-6)
    assert_trees_close(new.server["hypernetwork"], want, rtol=1e-4, atol=1e-6)


def test_pfedhn_server_momentum_is_pytorch_heavy_ball(fed):
    """With momentum m the server step is PyTorch SGD's: round 1 equals plain SGD (zero buffer), and
    round 2 moves by plain SGD's step plus m times round 1's step, for psi and the embeddings alike."""
    train, _ = fed
    plain, heavy = start(pfedhn, fed), start(pfedhn, fed, server_momentum=0.9)
    p1, _ = pfedhn.round(plain, train)
    h1, _ = pfedhn.round(heavy, train)
    part = lambda st: {"psi": st.server["hypernetwork"], "embed": st.clients["embed"]}
    assert_trees_close(part(h1), part(p1), rtol=1e-6, atol=1e-7)
    p2, _ = pfedhn.round(p1, train)  # same point, same keys: the same round-2 gradient as the momentum run
    h2, _ = pfedhn.round(h1, train)
    first_step = jax.tree.map(lambda a, b: np.asarray(a, np.float64) - np.asarray(b, np.float64), part(plain), part(p1))
    expected = jax.tree.map(lambda a, d: np.asarray(a, np.float64) - 0.9 * d, part(p2), first_step)
    assert_trees_close(part(h2), expected, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------------ API
MODULES = [fedproto, ifca, hypcluster, fedem, perfedavg, fedfomo, fesem, cfl, pfedhn]


def test_common_api_and_docs():
    for mod in MODULES:
        for attr in ("Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs"):
            assert hasattr(mod, attr), (mod.__name__, attr)
        assert mod.__doc__ and len(mod.__doc__) > 600, mod.__name__  # rule, defaults, differences
        assert issubclass(mod.Config, base.SGDConfig)


def test_configs_validate():
    bad = [lambda: fedproto.Config(lam=-1), lambda: ifca.Config(num_clusters=0), lambda: hypcluster.Config(num_clusters=0),
           lambda: fedem.Config(num_components=0), lambda: fedem.Config(component_weights="n_i"),
           lambda: perfedavg.Config(beta=0), lambda: perfedavg.Config(version="so"),
           lambda: fedfomo.Config(val_ratio=1.0), lambda: fedfomo.Config(num_downloads=-1), lambda: fedfomo.Config(epsilon=2),
           lambda: fesem.Config(num_clusters=0), lambda: cfl.Config(min_cluster_size=1), lambda: cfl.Config(linkage="ward"),
           lambda: cfl.Config(eps1=-1), lambda: pfedhn.Config(server_lr=0), lambda: pfedhn.Config(embed_dim=0),
           lambda: pfedhn.Config(momentum=1.0)]
    for make in bad:
        with pytest.raises(ValueError):
            make()
