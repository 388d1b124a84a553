"""Baselines: for each one, a test of its defining rule and a test that it learns.

Tiny federation: 10-class synthetic 12x12 images, FedPAC's s = 20% shards (5 clients, each with 3
dominant classes), an MLP with one hidden layer of 32 units. Chance is 0.1.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pflax.algorithms import (apfl, base, ditto, fedavg, fedavg_ft, fedbabu, fednova, fedper, fedprox, fedrep, fedrod, knnper,
                              lg_fedavg, local_only, pfedme, scaffold)
from pflax.core import federated
from pflax.core.optim import pytorch_sgd
from pflax.core.losses import cross_entropy, masked_mean
from pflax.data import fedpac_shards, from_partition, synthetic
from pflax.models import mlp

NUM_CLIENTS, NUM_CLASSES = 5, 10
MODEL = mlp(NUM_CLASSES, hidden=(32,))
KEY = jax.random.PRNGKey(0)
# Fast-learning setting shared by the tests (one compilation per algorithm serves both of its tests).
FAST = dict(lr=0.05, batch_size=20, local_epochs=2)


@pytest.fixture(scope="module")
def fed():
    d = synthetic(num_classes=NUM_CLASSES, train_per_class=100, test_per_class=60, image_size=12, seed=0, noise=0.3)
    train = from_partition(d.x_train, d.y_train, fedpac_shards(d.y_train, NUM_CLIENTS, 100, 0.2, NUM_CLASSES))
    test = from_partition(d.x_test, d.y_test, fedpac_shards(d.y_test, NUM_CLIENTS, 60, 0.2, NUM_CLASSES))
    return train, test


def leaves_equal(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def row(tree, i):
    return jax.tree.map(lambda a: a[i], tree)


def rows_identical(tree) -> bool:
    return all(np.array_equal(np.asarray(a[0]), np.asarray(a[i])) for a in jax.tree.leaves(tree) for i in range(a.shape[0]))


def start(mod, fed, **overrides):
    train, _ = fed
    cfg = mod.Config(**{**FAST, **overrides})
    state = mod.init(KEY, MODEL, train.x[0], NUM_CLIENTS, cfg)
    mod.check_inputs(state, train, fed[1])
    return state


def accuracy(mod, state, fed) -> np.ndarray:
    train, test = fed
    out = mod.evaluate(state, test, train)
    return np.asarray(out["accuracy"])


# ------------------------------------------------------------------------------------------ learning
# Personalized models clear 0.35; the global models (FedProx, SCAFFOLD, FedNova), pFedMe (lam = 10 keeps
# theta_i near w) and APFL's mixed model, which
# is 75% global at alpha = 0.25, reach ~0.27-0.32 after 3 rounds on these non-IID clients.
PERSONAL, GLOBALISH = 0.35, 0.25
LEARNERS = [(local_only, PERSONAL), (fedavg_ft, PERSONAL), (fedper, PERSONAL), (lg_fedavg, PERSONAL), (fedrep, PERSONAL),
            (fedbabu, PERSONAL), (fedprox, GLOBALISH), (ditto, PERSONAL), (apfl, GLOBALISH), (scaffold, GLOBALISH),
            (fedrod, PERSONAL), (knnper, PERSONAL), (pfedme, GLOBALISH), (fednova, GLOBALISH)]


@pytest.mark.parametrize("mod,floor", LEARNERS, ids=[m.__name__.rsplit(".", 1)[-1] for m, _ in LEARNERS])
def test_learns(mod, floor, fed):
    train, _ = fed
    state = start(mod, fed)
    before = accuracy(mod, state, fed).mean() if not mod.ALGORITHM.needs_train else 0.1
    for _ in range(3):
        state, metrics = mod.round(state, train)
        assert not bool(metrics["nonfinite"])
        assert metrics["loss"].shape == (NUM_CLIENTS,)
    after = accuracy(mod, state, fed)
    assert after.shape == (NUM_CLIENTS,)
    # Chance is 0.1.
    assert after.mean() > floor and after.mean() > before + 0.15, (before, after)

    # A participant without data (its padding NaN) changes nothing of its own and never poisons the
    # state. (pFedMe's theta_i restarts from w^t every round, the Moreau point of an empty objective.)
    empty = train.replace(mask=train.mask.at[1].set(False), x=train.x.at[1].set(jnp.nan))
    new, metrics = mod.round(state, empty)
    assert not bool(metrics["nonfinite"]) and float(metrics["n"][1]) == 0.0
    assert all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree.leaves(new) if jnp.issubdtype(a.dtype, jnp.floating))
    if mod is not pfedme:
        assert leaves_equal(row(new.clients, 1), row(state.clients, 1))


# ------------------------------------------------------------------------------------ defining rules
def test_local_only_never_communicates(fed):
    train, _ = fed
    state = start(local_only, fed)
    assert state.server == {}
    # Training client 0 alone gives exactly the model it gets in a full round: nobody else matters.
    full, _ = local_only.round(state, train)
    alone, _ = local_only.round(state, train.take(jnp.array([0])))
    assert leaves_equal(row(full.clients, 0), row(alone.clients, 0))
    assert leaves_equal(row(alone.clients, 1), row(state.clients, 1))  # non-participants untouched
    assert not rows_identical(full.clients["head"]) and not rows_identical(full.clients["body"])


def test_fedper_averages_body_never_head(fed):
    train, _ = fed
    state, _ = fedper.round(start(fedper, fed), train)
    assert set(state.server) == {"body"} and set(state.clients) == {"head"}
    assert not rows_identical(state.clients["head"])  # heads differ across clients


def test_lg_fedavg_averages_head_never_body(fed):
    train, _ = fed
    state, _ = lg_fedavg.round(start(lg_fedavg, fed), train)
    assert set(state.server) == {"head"} and set(state.clients) == {"body"}
    assert not rows_identical(state.clients["body"])  # bodies differ across clients


@pytest.mark.usefixtures("float32_matmuls")
def test_split_round_is_weighted_mean_of_trained_part(fed):
    """FedPer's new body = n-weighted mean of the participants' jointly trained bodies; heads kept."""
    train, _ = fed
    train = train.replace(mask=train.mask.at[1, 60:].set(False))  # unequal sizes
    state = start(fedper, fed)
    new, _ = fedper.round(state, train)
    keys = federated.participant_keys(state, train.client_ids)
    train_full = jax.jit(lambda params, client: base.train(params, base.ce_loss(MODEL), client, state.config))
    trained = [train_full({**state.server, **row(state.clients, i)},
                          {"x": train.x[i], "y": train.y[i], "mask": train.mask[i], "key": keys[i]})[0]
               for i in range(NUM_CLIENTS)]
    sizes = np.asarray(train.sizes, np.float64)
    want = jax.tree.map(lambda *b: sum(w * x for w, x in zip(sizes / sizes.sum(), b)), *[t["body"] for t in trained])
    for got, exp in zip(jax.tree.leaves(new.server["body"]), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-5, atol=1e-6)
    for i in range(NUM_CLIENTS):
        if jax.default_backend() == "cpu":
            assert leaves_equal(row(new.clients, i)["head"], trained[i]["head"])
        else:  # a GPU's batched kernels round the last bit differently from one client's (seen on an H100)
            for got, exp in zip(jax.tree.leaves(row(new.clients, i)["head"]), jax.tree.leaves(trained[i]["head"])):
                np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-6, atol=1e-7)


def test_fedrep_head_phase_then_body_phase(fed):
    """With zero body epochs only the heads move; with zero head epochs the heads stay put."""
    train, _ = fed
    heads_only, _ = fedrep.round(start(fedrep, fed, head_epochs=1, local_epochs=0), train)
    init = start(fedrep, fed)
    # The untouched bodies are still averaged, so equal up to the mean's float rounding.
    for a, b in zip(jax.tree.leaves(heads_only.server["body"]), jax.tree.leaves(init.server["body"])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert not leaves_equal(heads_only.clients, init.clients)
    body_only, _ = fedrep.round(start(fedrep, fed, head_epochs=0, local_epochs=1), train)
    assert leaves_equal(body_only.clients, init.clients)
    assert not leaves_equal(body_only.server["body"], init.server["body"])


def test_fedbabu_head_stays_at_init(fed):
    train, _ = fed
    state = start(fedbabu, fed)
    head0 = state.server["head"]
    for _ in range(2):
        state, _ = fedbabu.round(state, train)
    assert leaves_equal(state.server["head"], head0)
    assert not leaves_equal(state.server["body"], start(fedbabu, fed).server["body"])


def test_finetuned_evaluation_differs_from_global_and_keeps_state(fed):
    train, test = fed
    state, _ = fedavg_ft.round(start(fedavg_ft, fed), train)
    tuned = np.asarray(fedavg_ft.evaluate(state, test, train)["accuracy"])
    plain = np.asarray(fedavg.evaluate(state.replace(config=fedavg.Config(**FAST)), test)["accuracy"])
    assert tuned.mean() > plain.mean()  # local fine-tuning personalises the non-IID clients
    again = np.asarray(fedavg_ft.evaluate(state, test, train)["accuracy"])
    np.testing.assert_array_equal(tuned, again)  # deterministic, and the state is not changed


def test_fedprox_mu_zero_is_fedavg_and_huge_mu_stays_at_global(fed):
    train, _ = fed
    avg_cfg = fedavg.Config(**FAST)
    avg, _ = fedavg.round(fedavg.init(KEY, MODEL, train.x[0], NUM_CLIENTS, avg_cfg), train)
    prox0, _ = fedprox.round(start(fedprox, fed, prox_mu=0.0), train)
    for a, b in zip(jax.tree.leaves(avg.server), jax.tree.leaves(prox0.server)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)

    def drift(mu):
        state = start(fedprox, fed, prox_mu=mu, momentum=0.0, weight_decay=0.0)
        new, _ = fedprox.round(state, train)
        return np.sqrt(sum(float(jnp.sum((a - b) ** 2)) for a, b in zip(jax.tree.leaves(new.server), jax.tree.leaves(state.server))))

    # lr * mu = 1 without momentum: each step is w <- w^t - lr * grad f(w), so the model never leaves
    # a one-step neighbourhood of w^t, while FedAvg's 10 steps accumulate (measured ratio ~0.14).
    assert drift(1.0 / FAST["lr"]) < 0.2 * drift(0.0)


def _full_batch(mod, fed, **overrides):
    """One full-batch plain SGD step per epoch, so a round can be recomputed by hand."""
    return start(mod, fed, batch_size=100, local_epochs=1, momentum=0.0, weight_decay=0.0, **overrides)


def _grad(params, train, i):
    def loss(p):
        return masked_mean(cross_entropy(MODEL.apply(p, train.x[i]), train.y[i]), train.mask[i])
    return jax.grad(loss)(params)


def test_ditto_personal_step_includes_lambda_pull(fed):
    train, _ = fed
    lr, lam = 0.05, 1.0
    state, _ = ditto.round(_full_batch(ditto, fed, prox_mu=lam, personal_epochs=1), train)
    assert not leaves_equal(row(state.clients, 0), state.server)  # v and w now differ
    new, _ = ditto.round(state, train)
    for i in range(NUM_CLIENTS):
        v, w = row(state.clients, i), state.server
        want = jax.tree.map(lambda v_, g, w_: v_ - lr * (g + lam * (v_ - w_)), v, _grad(v, train, i), w)
        for got, exp in zip(jax.tree.leaves(row(new.clients, i)), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-5, atol=1e-6)


def test_apfl_evaluates_mixed_model_and_updates_v_through_it(fed):
    train, test = fed
    lr, alpha = 0.05, 0.25
    state, _ = apfl.round(_full_batch(apfl, fed, alpha=alpha), train)
    new, _ = apfl.round(state, train)
    for i in range(NUM_CLIENTS):
        v, w = row(state.clients, i), state.server
        g = _grad(apfl.mixed(v, w, alpha), train, i)
        want = jax.tree.map(lambda v_, g_: v_ - lr * alpha * g_, v, g)
        for got, exp in zip(jax.tree.leaves(row(new.clients, i)), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-5, atol=1e-6)
    acc = np.asarray(apfl.evaluate(new, test)["accuracy"])
    for i in range(NUM_CLIENTS):
        personal = apfl.mixed(row(new.clients, i), new.server, alpha)
        logits = MODEL.apply(personal, test.x[i])
        want = masked_mean((jnp.argmax(logits, -1) == test.y[i]).astype(jnp.float32), test.mask[i])
        assert acc[i] == pytest.approx(float(want))


def test_apfl_output_mixing_trains_and_scores_the_mixture_of_logits(fed):
    """``mixing = "outputs"`` (the official code): v's step is the gradient of the cross-entropy of
    ``alpha v(x) + (1 - alpha) w(x)`` with w constant, w's step is plain SGD on its own loss, and evaluation
    scores the mixture of logits, which differs from the mixture of parameters."""
    train, test = fed
    lr, alpha = 0.05, 0.25
    state, _ = apfl.round(_full_batch(apfl, fed, alpha=alpha, mixing="outputs"), train)
    new, _ = apfl.round(state, train)
    mixture = apfl.OutputMixture(MODEL, alpha)

    def mixed_loss(v, w, i):
        logits = mixture.apply({"v": v, "w": w}, train.x[i])
        return masked_mean(cross_entropy(logits, train.y[i]), train.mask[i])

    w_mean = []
    for i in range(NUM_CLIENTS):
        v, w = row(state.clients, i), state.server
        want_v = jax.tree.map(lambda v_, g_: v_ - lr * g_, v, jax.grad(mixed_loss)(v, w, i))
        for got, exp in zip(jax.tree.leaves(row(new.clients, i)), jax.tree.leaves(want_v)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-5, atol=1e-6)
        w_mean.append(jax.tree.map(lambda w_, g_: w_ - lr * g_, w, _grad(w, train, i)))
    sizes = np.asarray(train.mask.sum(axis=1), np.float64)
    want_w = jax.tree.map(lambda *ws: sum(s * x for s, x in zip(sizes, ws)) / sizes.sum(), *w_mean)
    for got, exp in zip(jax.tree.leaves(new.server), jax.tree.leaves(want_w)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-5, atol=1e-6)
    acc = np.asarray(apfl.evaluate(new, test)["accuracy"])
    differs = 0
    for i in range(NUM_CLIENTS):
        v = row(new.clients, i)
        logits = mixture.apply({"v": v, "w": new.server}, test.x[i])
        want = masked_mean((jnp.argmax(logits, -1) == test.y[i]).astype(jnp.float32), test.mask[i])
        assert acc[i] == pytest.approx(float(want))
        if not leaves_equal(v, new.server):  # where v and w differ, the two mixtures are different models
            param_logits = MODEL.apply(apfl.mixed(v, new.server, alpha), test.x[i])
            # after two small steps the difference is of second order in v - w, hence the tight tolerance
            differs += not np.allclose(np.asarray(logits), np.asarray(param_logits), rtol=0, atol=1e-6)
    assert differs == NUM_CLIENTS, differs


def test_scaffold_matches_hand_computation(fed):
    train, _ = fed
    lr = 0.05
    two = train.take(jnp.array([0, 1]))
    state, _ = scaffold.round(_full_batch(scaffold, fed), two)
    c, w = state.server["c"], state.server["params"]
    assert not leaves_equal(row(state.clients, 0), c)  # c_i != c, so the correction is active
    new, _ = scaffold.round(state, two)
    local_models, deltas_c = [], []
    for i in range(2):
        c_i = row(state.clients, i)
        w_i = jax.tree.map(lambda w_, g, ci, cc: w_ - lr * (g - ci + cc), w, _grad(w, train, i), c_i, c)
        k = 1  # one epoch of one full batch
        c_plus = jax.tree.map(lambda ci, cc, a, b: ci - cc + (a - b) / (k * lr), c_i, c, w, w_i)
        for got, exp in zip(jax.tree.leaves(row(new.clients, i)), jax.tree.leaves(c_plus)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-4, atol=1e-5)
        local_models.append(w_i)
        deltas_c.append(jax.tree.map(lambda a, b: a - b, c_plus, c_i))
    want_w = jax.tree.map(lambda w_, a, b: w_ + ((a - w_) + (b - w_)) / 2, w, *local_models)
    want_c = jax.tree.map(lambda c_, a, b: c_ + (2 / NUM_CLIENTS) * (a + b) / 2, c, *deltas_c)
    for got, exp in zip(jax.tree.leaves(new.server), jax.tree.leaves({"c": want_c, "params": want_w})):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-4, atol=1e-5)
    assert leaves_equal(row(new.clients, 3), row(state.clients, 3))  # non-participants keep c_i


@settings(max_examples=25, deadline=None)
@given(k=st.integers(0, 80), momentum=st.sampled_from([0.0, 0.1, 0.5, 0.9]))
def test_momentum_step_sum_is_how_far_momentum_sgd_moves_on_a_constant_gradient(k, momentum):
    opt, w = pytorch_sgd(1.0, momentum=momentum), np.float64(0.0)
    opt_state = opt.init(jnp.zeros(()))
    for _ in range(k):
        update, opt_state = opt.update(jnp.float32(-1.0), opt_state)
        w += float(update)
    assert float(scaffold.momentum_step_sum(k, momentum)) == pytest.approx(w, rel=1e-5, abs=1e-6)


def _control_spread(state) -> float:
    """|| c_i - c || over every client and leaf: the size of the drift corrections."""
    c_i = jnp.concatenate([a.reshape(a.shape[0], -1) for a in jax.tree.leaves(state.clients)], 1)
    c = jnp.concatenate([a.reshape(-1) for a in jax.tree.leaves(state.server["c"])])
    return float(jnp.linalg.norm(c_i - c))


def test_scaffold_controls_swing_under_momentum_unless_momentum_corrected(fed):
    """With momentum 0.5 option II's c_i come out about twice the mean gradient, so c_i - c overshoots
    and undershoots in alternate rounds; dividing by the momentum step sum gives plain SGD's steady size."""
    train, _ = fed
    spreads = {}
    for momentum, corrected in ((0.0, False), (0.5, False), (0.5, True)):
        state = start(scaffold, fed, lr=0.01, momentum=momentum, momentum_corrected_controls=corrected)
        spreads[momentum, corrected] = []
        for _ in range(4):
            state, _ = scaffold.round(state, train)
            spreads[momentum, corrected].append(_control_spread(state))
    plain, swinging, corrected = (np.array(spreads[key]) for key in ((0.0, False), (0.5, False), (0.5, True)))
    assert np.all(plain.max() / plain.min() < 1.05)  # plain SGD: the corrections settle at once
    assert swinging[0] > 1.6 * plain[0] and swinging[1] < 0.6 * plain[1]  # double, then a fraction
    assert swinging[2] > 1.3 * swinging[1] and swinging[3] < swinging[2]  # and on, alternately
    np.testing.assert_allclose(corrected, plain, rtol=0.05)


def test_scaffold_momentum_correction_changes_nothing_without_momentum(fed):
    train, _ = fed
    runs = []
    for corrected in (False, True):
        state = start(scaffold, fed, momentum=0.0, momentum_corrected_controls=corrected)
        runs.append(scaffold.round(scaffold.round(state, train)[0], train)[0])
    assert leaves_equal(runs[0].server, runs[1].server) and leaves_equal(runs[0].clients, runs[1].clients)


@pytest.mark.parametrize("trains_body", [False, True])
def test_fedrod_one_step_by_hand_with_and_without_the_personal_loss_reaching_the_body(fed, trains_body):
    """One full-batch plain SGD step: the body moves along the balanced loss's gradient, plus the personal
    loss's when ``personal_loss_trains_body``; the generic head never sees the personal loss."""
    train, _ = fed
    lr = 0.05
    state = _full_batch(fedrod, fed, personal_loss_trains_body=trains_body)
    # a personal head that is not zero (nor constant across classes), so its loss has a gradient in the body
    heads = state.clients["personal"]
    noise = [0.3 * jax.random.normal(jax.random.PRNGKey(i), a.shape) for i, a in enumerate(jax.tree.leaves(heads))]
    state = state.replace(clients={"personal": jax.tree.unflatten(jax.tree.structure(heads), noise)})
    new, _ = fedrod.round(state, train)
    grads = []
    for i in range(NUM_CLIENTS):
        offsets = fedrod.balanced_offsets(train.y[i], train.mask[i], NUM_CLASSES, 1.0)

        def balanced(shared):
            logits = MODEL.apply(shared, train.x[i]) + offsets
            return masked_mean(cross_entropy(logits, train.y[i]), train.mask[i])

        def personal(body):
            z = MODEL.features(body, train.x[i])
            logits = (jax.lax.stop_gradient(MODEL.logits_from_features(state.server["head"], z))
                      + MODEL.logits_from_features(row(state.clients["personal"], i), z))
            return masked_mean(cross_entropy(logits, train.y[i]), train.mask[i])

        g = jax.grad(balanced)(state.server)
        if trains_body:
            g = {**g, "body": jax.tree.map(jnp.add, g["body"], jax.grad(personal)(state.server["body"]))}
        grads.append(g)
    n = np.asarray(train.mask.sum(1), np.float32)
    want = jax.tree.map(lambda w, *gs: w - lr * sum(ni * gi for ni, gi in zip(n, gs)) / n.sum(), state.server, *grads)
    for got, exp in zip(jax.tree.leaves(new.server), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-4, atol=1e-6)


def test_fedrod_balanced_softmax_and_personal_path(fed):
    train, test = fed
    counts = np.bincount(np.asarray(train.y[0])[np.asarray(train.mask[0])], minlength=NUM_CLASSES)
    offsets = np.asarray(fedrod.balanced_offsets(train.y[0], train.mask[0], NUM_CLASSES, 1.0))
    np.testing.assert_allclose(offsets[counts > 0], np.log(counts[counts > 0]), rtol=1e-6)
    assert np.all(offsets[counts == 0] <= -1e8)  # absent classes leave the client's softmax
    state = start(fedrod, fed)
    assert all(float(jnp.abs(a).max()) == 0.0 for a in jax.tree.leaves(state.clients))  # personal = generic at start
    new, _ = fedrod.round(state, train)
    assert set(new.server) == {"body", "head"} and not rows_identical(new.clients["personal"])
    acc = np.asarray(fedrod.evaluate(new, test)["accuracy"])
    for i in range(NUM_CLIENTS):
        logits = (MODEL.apply(new.server, test.x[i])
                  + MODEL.logits_from_features(row(new.clients, i)["personal"], MODEL.features(new.server["body"], test.x[i])))
        want = masked_mean((jnp.argmax(logits, -1) == test.y[i]).astype(jnp.float32), test.mask[i])
        assert acc[i] == pytest.approx(float(want))


def test_knn_probabilities_by_hand():
    keys = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [9.0, 9.0]])
    labels = jnp.array([0, 1, 1, 0])
    valid = jnp.array([True, True, True, False])  # padding never votes, however near
    query = jnp.array([[0.1, 0.0], [9.0, 9.0]])
    p = np.asarray(knnper.knn_probabilities(query, keys, labels, valid, 2, k=2, scale=1.0))
    d = np.array([0.01, 0.81])  # the two nearest valid keys of query 0 (labels 0 and 1)
    w = np.exp(-d / 2)
    np.testing.assert_allclose(p[0], [w[0] / w.sum(), w[1] / w.sum()], rtol=1e-5)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("mod", [fedavg_ft, knnper], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_evaluating_on_a_fedavg_trajectory_equals_the_direct_run(mod, fed):
    """The premise of benchmarks/fedavg_family_eval.py: FedAvg-FT and kNN-Per train exactly as FedAvg
    (model, round counter and PRNG keys), so their evaluate on FedAvg's state equals the direct run's."""
    train, test = fed
    direct = start(mod, fed)
    avg = fedavg.init(KEY, MODEL, train.x[0], NUM_CLIENTS, fedavg.Config(**FAST))
    for _ in range(2):
        direct, _ = mod.round(direct, train)
        avg, _ = fedavg.round(avg, train)
    np.testing.assert_array_equal(np.asarray(direct.key), np.asarray(avg.key))
    np.testing.assert_array_equal(np.asarray(direct.round), np.asarray(avg.round))
    for a, b in zip(jax.tree.leaves(avg.server), jax.tree.leaves(direct.server)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    derived = start(mod, fed).replace(server=avg.server, round=avg.round, key=avg.key, sampling_key=avg.sampling_key)
    np.testing.assert_allclose(accuracy(mod, derived, fed), accuracy(mod, direct, fed), atol=1e-6)


def test_knnper_trains_as_fedavg_and_lam_zero_is_the_global_model(fed):
    train, test = fed
    state, _ = knnper.round(start(knnper, fed), train)
    avg, _ = fedavg.round(fedavg.init(KEY, MODEL, train.x[0], NUM_CLIENTS, fedavg.Config(**FAST)), train)
    for a, b in zip(jax.tree.leaves(avg.server), jax.tree.leaves(state.server)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    plain = knnper.evaluate(state.replace(config=knnper.Config(**FAST, knn_lam=0.0)), test, train)["accuracy"]
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(fedavg.evaluate(avg.replace(server=state.server), test)["accuracy"]))
    with_knn = np.asarray(knnper.evaluate(state, test, train)["accuracy"])
    assert with_knn.mean() > np.asarray(plain).mean()  # the local memory personalises


def test_pfedme_matches_hand_computation(fed):
    train, _ = fed
    cfg = dict(lr=0.05, personal_lr=0.02, prox_mu=10.0, inner_steps=3, beta=0.7)
    state = _full_batch(pfedme, fed, **cfg)
    two = train.take(jnp.array([0, 1]))
    new, _ = pfedme.round(state, two)
    w = state.server
    locals_ = []
    for i in range(2):
        theta = w
        for _ in range(cfg["inner_steps"]):
            g = _grad(theta, train, i)
            theta = jax.tree.map(lambda t, g_, w_: t - cfg["personal_lr"] * (g_ + cfg["prox_mu"] * (t - w_)), theta, g, w)
        for got, exp in zip(jax.tree.leaves(row(new.clients, i)), jax.tree.leaves(theta)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-4, atol=1e-6)
        locals_.append(jax.tree.map(lambda w_, t: w_ - cfg["lr"] * cfg["prox_mu"] * (w_ - t), w, theta))
    want = jax.tree.map(lambda w_, a, b: (1 - cfg["beta"]) * w_ + cfg["beta"] * (a + b) / 2, w, *locals_)
    for got, exp in zip(jax.tree.leaves(new.server), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-4, atol=1e-6)


def test_fednova_normalises_by_local_steps(fed):
    train, _ = fed
    # ||a||_1 of heavy-ball SGD: the sum of every gradient's total coefficient, by simulation.
    rho, tau = 0.5, 7
    coeff = [sum(rho**j for j in range(tau - k)) for k in range(tau)]
    assert float(fednova.momentum_norm(jnp.array(tau), rho)) == pytest.approx(sum(coeff), rel=1e-6)
    assert float(fednova.momentum_norm(jnp.array(tau), 0.0)) == tau
    # Unequal sizes: client 1 takes 3 steps per epoch, the others 5.
    train = train.replace(mask=train.mask.at[1, 60:].set(False))
    state = start(fednova, fed)
    new, metrics = fednova.round(state, train)
    inputs = {"x": train.x, "y": train.y, "mask": train.mask, "key": federated.participant_keys(state, train.client_ids)}
    train_full = jax.jit(lambda params, client: base.train(params, base.ce_loss(MODEL), client, state.config))
    sizes = np.asarray(train.sizes, np.float64)
    p = sizes / sizes.sum()
    norms = np.array([float(fednova.momentum_norm(jnp.array(2 * int(np.ceil(n / 20))), 0.5)) for n in sizes])
    np.testing.assert_allclose(np.asarray(metrics["tau_norm"]), norms, rtol=1e-6)
    tau_eff = float(np.sum(p * norms))
    trained = [train_full(state.server, row(inputs, i))[0] for i in range(NUM_CLIENTS)]
    want = jax.tree.map(lambda w_, *ws: w_ - tau_eff * sum(pi * (w_ - wi) / ni for pi, wi, ni in zip(p, ws, norms)),
                        state.server, *trained)
    for got, exp in zip(jax.tree.leaves(new.server), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-5, atol=1e-6)


def test_registry_and_common_api():
    import pflax
    from pflax.algorithms import REGISTRY

    baselines = {m.ALGORITHM for m, _ in LEARNERS}
    assert baselines <= set(REGISTRY.values())
    assert {n for n, a in REGISTRY.items() if a.needs_train} == {"fedavg_ft", "fedbabu", "knnper", "perfedavg"}
    for name, algo in REGISTRY.items():
        mod = getattr(pflax, name)
        assert mod.ALGORITHM is algo
        for attr in ("Config", "State", "init", "round", "evaluate", "sample_clients", "check_inputs"):
            assert hasattr(mod, attr), (name, attr)
        assert mod.__doc__ and len(mod.__doc__) > 200, name  # the rule and its choices are documented
    state = local_only.init(KEY, MODEL, jnp.zeros((1, 12, 12, 1)), 10)
    ids = np.asarray(local_only.sample_clients(state, 0.3))
    assert len(ids) == 3 and np.all(np.diff(ids) > 0)


def test_check_inputs_pairs_train_and_test_rows(fed):
    from pflax.data import DataError

    train, test = fed
    state = knnper.init(KEY, MODEL, train.x[0], NUM_CLIENTS, knnper.Config(**FAST))
    knnper.check_inputs(state, train, test)
    with pytest.raises(DataError, match="same clients"):
        knnper.check_inputs(state, train, test.take(jnp.array([1, 0, 2, 3, 4])))
    with pytest.raises(DataError):
        knnper.check_inputs(state.replace(num_clients=3), train)  # client ids outside the federation


def test_configs_validate():
    for bad in (lambda: knnper.Config(knn_lam=2.0), lambda: pfedme.Config(inner_steps=0), lambda: fedrod.Config(gamma=-1),
                lambda: fedprox.Config(prox_mu=-1), lambda: ditto.Config(prox_mu=-1), lambda: apfl.Config(alpha=1.5),
                lambda: scaffold.Config(global_lr=0), lambda: fedrep.Config(head_epochs=-1),
                lambda: fedbabu.Config(finetune_parts=("tail",)), lambda: local_only.Config(momentum=1.0)):
        with pytest.raises(ValueError):
            bad()
