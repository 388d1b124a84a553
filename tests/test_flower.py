"""pflax.flower: any registry algorithm as a Flower app runs the same round as ``ALGORITHM.round``.

* in one process (Flower's Message objects, the apps called directly): FedAvg, FedPAC, Ditto, FedPick and
  FedProto-L, three rounds, equal to the in-process run with the same seed, data and participants within
  1e-5;
* on Flower's Simulation Engine (``run_simulation``, Ray): FedPAC, the same check;
* deployed: a real ``flower-superlink`` and three ``flower-supernode`` processes on 127.0.0.1, each
  SuperNode loading its own partition from its node config; FedPAC, the same check (round 1 with every
  node, the later rounds after one SuperNode is killed), and no process or port left behind;
* faults: a client lost mid-round (the round completes with the others, equal to ``round`` over them),
  a SuperNode killed mid-run, and a ServerApp restarted from its checkpoint.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("flwr", reason="flwr is not installed: pip install 'pflax[flower]' (flwr>=1.41,<1.42)")

from pflax import REGISTRY, checkpoint  # noqa: E402
from pflax.data import toy_federation  # noqa: E402
from pflax.flower import AppSpec, DirectoryRowStore, Plan, from_arrays, row, to_arrays  # noqa: E402
from pflax.flower.apps import client_app, run_in_process, save_client_data, server_app  # noqa: E402
from pflax.flower.local import LocalFederation, port_open  # noqa: E402

pytestmark = [
    # Starting Flower's processes (and Ray's) forks a process that runs JAX; each one execs at once.
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning:ray"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:typer"),
]

APP = Path(__file__).resolve().parents[1] / "examples" / "flower" / "app"
TOL = 1e-5
ROUNDS = 3
CONFIGS = {
    "fedavg": {"local_epochs": 1, "batch_size": 20},
    "fedpac": {"body_epochs": 1, "head_epochs": 1, "batch_size": 20},
    "ditto": {"local_epochs": 1, "personal_epochs": 1, "batch_size": 20},
    "fedpick": {"local_epochs": 1, "batch_size": 16},
    # FedProto-L: the server's message is only whether round 0 is over
    "fedproto": {"local_epochs": 1, "batch_size": 20, "prototypes": "local"},
}


def _spec(name: str, **kw) -> AppSpec:
    if name in ("fedpick", "fedbn"):
        model, args = "pflax.models.bn:digits_cnn", {"num_classes": 10, "width": 0.0625, "image_size": 16}
    else:
        model, args = "pflax.models:mlp", {"num_classes": 10, "hidden": [8]}
    return AppSpec(name, model=model, model_args=args, config=CONFIGS.get(name, {}), rounds=ROUNDS, seed=3, **kw)


def _federation(name: str):
    if name in ("fedpick", "fedbn"):  # the BatchNorm CNN takes 16x16 RGB images
        train, _ = toy_federation(num_clients=3, train_per_client=30, image_size=16)
        return train.replace(x=np.repeat(np.asarray(train.x), 3, axis=-1))
    return toy_federation(num_clients=3, train_per_client=30)[0]


def _reference(spec: AppSpec, train, participants=None):
    """``ALGORITHM.round`` in one process: the sampled participants, or ``participants[r]`` in round r."""
    algo = REGISTRY[spec.algorithm]
    state = algo.init(jax.random.PRNGKey(spec.seed), spec.build_model(), train.x[0], train.num_clients,
                      spec.build_config())
    for r in range(spec.rounds):
        ids = np.asarray(algo.sample_clients(state, spec.fraction)) if participants is None else participants[r]
        state, _ = algo.round(state, train.take(ids))
    return state


def _max_diff(a, b) -> float:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    diffs = [np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))) for x, y in zip(la, lb) if np.size(x)]
    return float(max(diffs, default=0.0))


def _assert_same(reference, server_arrays, state_dirs, spec: AppSpec, train):
    """The deployed server state (its arrays) and every client's stored row equal the in-process state."""
    assert int(server_arrays["round"]) == int(reference.round)
    assert _max_diff(reference.server, server_arrays["server"]) <= TOL
    np.testing.assert_array_equal(np.asarray(server_arrays["key"]), np.asarray(reference.key))
    plan = Plan(spec, train.num_clients, {k: (getattr(train, k).shape[1:], getattr(train, k).dtype.name)
                                          for k in ("x", "y", "mask")})
    for i, directory in enumerate(state_dirs):
        stored = DirectoryRowStore(directory).at(int(reference.round))
        expected = jax.tree.map(lambda a: a[i], reference.clients)
        if not jax.tree.leaves(expected):
            continue
        assert stored is not None, f"client {i} stored no row"
        assert _max_diff(expected, from_arrays(stored[1], plan.row)) <= TOL, f"client {i}'s row"


def _nodes(tmp_path: Path, n: int, **extra) -> list[dict]:
    return [{"partition-id": i, "num-partitions": n, "state-dir": str(tmp_path / f"node{i}"), **extra} for i in range(n)]


def _server_arrays(state) -> dict:
    return {"server": state.server, "round": state.round, "key": state.key}


# --------------------------------------------------------------------------- in one process


@pytest.mark.parametrize("name,fraction", [("fedavg", 1.0), ("fedpac", 0.67), ("ditto", 0.67), ("fedpick", 1.0),
                                           ("fedproto", 0.67)])
def test_apps_in_process_match_round(name, fraction, tmp_path):
    spec, train = _spec(name, fraction=fraction), _federation(name)
    states, participants = [], []
    nodes = _nodes(tmp_path, train.num_clients)
    run_in_process(server_app(spec, on_round=lambda s, m: (states.append(s), participants.append(m["client_ids"]))),
                   client_app(spec, load_data=lambda ctx: row(train, ctx.node_config["partition-id"])),
                   node_configs=nodes)
    reference = _reference(spec, train)
    assert [len(p) for p in participants] == [max(int(fraction * 3), 1)] * ROUNDS
    _assert_same(reference, _server_arrays(states[-1]), [n["state-dir"] for n in nodes], spec, train)


def test_a_lost_client_leaves_the_round(tmp_path):
    """Client 1 dies with its round-1 train message: rounds 1 and 2 complete with clients 0 and 2, equal
    to ``round`` over them; client 1's row stays as round 0 left it."""
    spec, train = _spec("fedpac"), _federation("fedpac")
    states, participants = [], []
    nodes = _nodes(tmp_path, 3)
    run_in_process(server_app(spec, on_round=lambda s, m: (states.append(s), participants.append(m["client_ids"].tolist()))),
                   client_app(spec, load_data=lambda ctx: row(train, ctx.node_config["partition-id"])),
                   node_configs=nodes,
                   lose=lambda node, msg: node == 1001 and msg.metadata.message_type == "train"
                   and msg.metadata.group_id == "1")
    assert participants == [[0, 1, 2], [0, 2], [0, 2]]
    reference = _reference(spec, train, participants)
    _assert_same(reference, _server_arrays(states[-1]), [n["state-dir"] for n in nodes], spec, train)


def test_a_restarted_server_resumes_from_its_checkpoint(tmp_path):
    """The ServerApp crashes after round 2 (its checkpoint written); a new run on the same checkpoint
    directory and the same clients (rows in their state directories) resumes and finishes round 3."""
    spec, train = _spec("fedpac", checkpoint_dir=str(tmp_path / "ckpt")), _federation("fedpac")
    nodes = _nodes(tmp_path, 3)
    load = lambda ctx: row(train, ctx.node_config["partition-id"])  # noqa: E731

    def crash(state, metrics):
        if int(state.round) == 2:
            raise RuntimeError("server machine lost")

    with pytest.raises(RuntimeError, match="server machine lost"):
        run_in_process(server_app(spec, on_round=crash), client_app(spec, load_data=load), node_configs=nodes)
    assert checkpoint.latest_step(spec.checkpoint_dir) == 2
    rounds_seen = []
    run_in_process(server_app(spec, on_round=lambda s, m: rounds_seen.append(int(s.round))),
                   client_app(spec, load_data=load), node_configs=nodes)
    assert rounds_seen == [3]  # only the missing round ran
    arrays, _ = checkpoint.read(spec.checkpoint_dir)
    _assert_same(_reference(spec, train), arrays, [n["state-dir"] for n in nodes], spec, train)


def test_every_registry_algorithm_has_a_deployment_plan():
    data = {"x": ((20, 8, 8, 1), "float32"), "y": ((20,), "int32"), "mask": ((20,), "bool")}
    bn = {"x": ((20, 16, 16, 3), "float32"), "y": ((20,), "int32"), "mask": ((20,), "bool")}
    plans = {name: Plan(_spec(name), 4, bn if name in ("fedbn", "fedpick") else data) for name in REGISTRY}
    assert plans["fedfomo"].mirror  # its broadcast sends other clients' models: the server holds them
    assert plans["fedpac"].rows_read and plans["fedpac"].server_rows and not plans["fedpac"].mirror
    assert "client" not in plans["ditto"].sent  # personal models never leave the clients
    assert "client" in plans["fedbn"].sent  # FedBN's server averages the clients' shared leaves


def test_codec_round_trips_typed_keys_and_refuses_a_mismatch():
    tree = {"k": jax.random.split(jax.random.key(0), 2), "w": np.ones((2, 3), np.float32)}
    back = from_arrays(to_arrays(tree), jax.eval_shape(lambda: tree))
    np.testing.assert_array_equal(jax.random.key_data(back["k"]), jax.random.key_data(tree["k"]))
    with pytest.raises(ValueError, match="unexpected"):
        from_arrays({**to_arrays(tree), "['extra']": np.zeros(1)}, tree)


# --------------------------------------------------------------------------- Flower's Simulation Engine


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Flower's Simulation Engine needs Ray: pip install 'flwr[simulation]>=1.41,<1.42'")
def test_simulation_engine_matches_round(tmp_path):
    # Ray starts threads and processes in whatever process calls it and keeps some after shutdown, so the
    # simulation runs in a child process, which saves each round's server state; this process compares.
    # Two CPUs per client: one Ray worker, which imports JAX and loads the client's programs once.
    spec, train = _spec("fedpac", data_dir=str(tmp_path / "data")), _federation("fedpac")
    save_client_data(train, spec.data_dir)
    out = tmp_path / "server_states.npz"
    script = (
        "import sys, numpy as np, jax\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import test_flower as t\n"
        "from pflax.flower.apps import simulate\n"
        "spec = t._spec('fedpac', data_dir=sys.argv[2])\n"
        "states = []\n"
        "simulate(spec, num_nodes=3, on_round=lambda s, m: states.append(s),"
        " backend_config={'client_resources': {'num_cpus': 2, 'num_gpus': 0.0}})\n"
        "leaves = jax.tree.leaves(states[-1].server)\n"
        "np.savez(sys.argv[3], rounds=np.array([int(s.round) for s in states]),"
        " **{f'leaf{i}': np.asarray(x) for i, x in enumerate(leaves)})\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent), spec.data_dir, str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = np.load(out)
    assert saved["rounds"].tolist() == [1, 2, 3]
    reference = jax.tree.leaves(_reference(spec, train).server)
    assert len(reference) == len([k for k in saved.files if k.startswith("leaf")])
    worst = max(float(np.max(np.abs(np.asarray(r, np.float64) - saved[f"leaf{i}"].astype(np.float64))))
                for i, r in enumerate(reference))
    assert worst <= TOL


# --------------------------------------------------------------------------- deployed


@pytest.fixture
def federation(tmp_path):
    """Three SuperNodes, each with its own partition file and state directory, and a SuperLink."""
    train = _federation("fedpac")
    paths = save_client_data(train, tmp_path / "data")
    nodes = [{"data": str(p), "num-partitions": 3, "state-dir": str(tmp_path / f"node{i}")} for i, p in enumerate(paths)]
    fed = LocalFederation(nodes, tmp_path / "flower")
    try:
        fed.start()
        yield fed, train, nodes
    finally:
        fed.close()
        assert fed.leftovers() == [], "processes left behind"
        assert not any(port_open(p) for p in [fed.port, *fed.node_ports]), "a port is still open"


def test_deployment_matches_round_and_survives_a_killed_supernode(federation, tmp_path):
    """One deployed run checks both: round 1, with every SuperNode alive, equals ``round``; then SuperNode
    2 is killed (SIGKILL, with its ClientApp processes) once round 1 is checkpointed, and the next
    rounds complete with the other two once the SuperLink finds node 2 gone (its heartbeat lapses: Flower
    answers for it with an error within a minute), equal to ``round`` over them. (One federation instead
    of two: each deployed run starts a Flower process per message.)

    The round time-out is long on purpose: round 1 must hear from every SuperNode, and each reply starts a
    process that imports JAX and compiles, which on a loaded 2-core machine has taken more than 25 s. The
    killed node is dropped by the SuperLink's error reply, not by the time-out."""
    fed, train, nodes = federation
    spec = _spec("fedpac", checkpoint_dir=str(tmp_path / "ckpt"), min_clients=3, round_timeout=300.0)
    killed_at: list[float] = []
    killer = threading.Thread(target=_kill_after_step, args=(fed, spec.checkpoint_dir, 1, 2, killed_at), daemon=True)
    killer.start()
    log = fed.run(APP, spec.run_config(), timeout=900)
    finished_at = time.monotonic()
    killer.join(timeout=5)
    assert checkpoint.latest_step(spec.checkpoint_dir) == ROUNDS, log[-3000:]
    # Rounds 2 and 3 ended on the SuperLink's word that node 2 is gone, before any round timed out.
    assert killed_at and finished_at - killed_at[0] < spec.round_timeout, (finished_at - killed_at[0], log[-3000:])
    participants = [checkpoint.read(spec.checkpoint_dir, step=s)[1]["extra"]["participants"] for s in (1, 2, 3)]
    assert participants[0] == [0, 1, 2] and 2 not in participants[2], participants

    after_one, _ = checkpoint.read(spec.checkpoint_dir, step=1)
    one_round = dataclasses.replace(spec, rounds=1)
    reference_one = _reference(one_round, train, participants[:1])
    assert _max_diff(reference_one.server, after_one["server"]) <= TOL
    np.testing.assert_array_equal(np.asarray(after_one["key"]), np.asarray(reference_one.key))

    arrays, _ = checkpoint.read(spec.checkpoint_dir)
    _assert_same(_reference(spec, train, participants), arrays, [n["state-dir"] for n in nodes], spec, train)


def _kill_after_step(fed: LocalFederation, directory: str, step: int, node: int, killed_at: list) -> None:
    deadline = time.monotonic() + 800
    while time.monotonic() < deadline:
        if Path(directory).exists() and (checkpoint.latest_step(directory) or 0) >= step:
            fed.kill_node(node)
            killed_at.append(time.monotonic())
            return
        time.sleep(0.05)
