"""Round time and memory of pflax's FedAvg and FedPAC against the PyTorch client loop, side by side.

Every figure is measured in one process with pflax and PyTorch rounds interleaved on the same data,
so a time is always quoted as the ratio pflax / PyTorch (the machine may be shared; absolute times
then drift, ratios much less). Data are random (speed does not depend on their values).

Two PyTorch comparators: ``torch_reference.py``, a tuned loop (the official model compute with the
Python overhead removed), everywhere; and, for the CPU acceptance figure, ``torch_official.py``, the
official code's loop with its per-sample data pipeline and Python loops kept (its evaluation passes
left out, as pflax's round evaluates nothing). Both ratios are reported.

    python benchmarks/speed/run.py acceptance            # FedPAC, FMNIST CNN, 20 clients x 600, 1+5 epochs
    python benchmarks/speed/run.py scaling               # FedAvg/FedPAC x {FMNIST, CIFAR} CNN x {10, 100, 1000} clients
    python benchmarks/speed/run.py plot                  # PNG from benchmarks/results/speed/scaling.json

On a GPU machine, ``--torch-device cuda --results benchmarks/results/speed/gpu_<name>`` runs the same
benchmark with PyTorch on the GPU beside JAX's default (GPU) backend; memory is then read from both
libraries' allocators (peak bytes in use on the device) as well as the process's RSS.

``scaling`` runs each (model, algorithm, clients) configuration in a fresh subprocess so peak-RSS figures
do not mix. Large client counts use few samples per client (``--samples``, default 50), one timed pflax
round, and the PyTorch loop on ``--torch-max`` clients, extrapolated linearly to all clients (the
JSON says ``torch_extrapolated``). FedPAC at >= 1000 participants runs without classifier
collaboration: its QP needs an [m, m, m] float64 tensor (8 GB at m = 1000), in pflax and in any
implementation that builds the m problems of spec A.5.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "speed"
SHAPES = {"fmnist": (28, 28, 1), "cifar": (32, 32, 3)}
WARMUP_BELOW = 10_000  # from this many clients on, compile ahead of time instead of an untimed first round


class PeakRSS:
    """Peak resident memory above the level at entry, sampled every 5 ms by a thread (bytes)."""

    def __enter__(self):
        import psutil

        self._proc = psutil.Process()
        self.start = self._proc.memory_info().rss
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        self.delta = self.peak - self.start


def random_clients(dataset: str, clients: int, samples: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((clients, samples) + SHAPES[dataset]).astype(np.float32)
    y = rng.integers(0, 10, size=(clients, samples)).astype(np.int32)
    return x, y


class PflaxRunner:
    """One algorithm's state and a ``step()`` that runs one round and waits for the result."""

    def __init__(self, algorithm: str, dataset: str, x, y, strategy: str = "auto", chunk_size: int = 4,
                 collaboration: bool = True):
        import jax
        import jax.numpy as jnp

        from pflax.algorithms import fedavg, fedpac
        from pflax.core.execution import Execution
        from pflax.data import ClientData
        from pflax.models import fedpac_cnn

        self.jax = jax
        execution = Execution(strategy, chunk_size=chunk_size)
        model = fedpac_cnn(dataset)
        m, n = y.shape
        self.batch = ClientData(jnp.asarray(x), jnp.asarray(y), jnp.ones((m, n), bool), jnp.arange(m, dtype=jnp.int32))
        key = jax.random.PRNGKey(0)
        if algorithm == "fedpac":
            self.algo = fedpac
            cfg = fedpac.Config(execution=execution, classifier_collaboration=collaboration)
        else:
            self.algo = fedavg
            cfg = fedavg.Config(execution=execution)
        self.state = self.algo.init(key, model, self.batch.x[0], m, cfg)
        self._round = self.algo.round

    def compile(self) -> None:
        """Compile the round ahead of time (no execution); later steps run the compiled executable."""
        self._round = self.algo.round.lower(self.state, self.batch).compile()

    def step(self):
        self.state, metrics = self._round(self.state, self.batch)
        self.jax.block_until_ready((self.state, metrics))
        return metrics

    def live_bytes(self) -> int:
        return int(sum(a.nbytes for a in self.jax.live_arrays()))


class TorchRunner:
    def __init__(self, algorithm: str, dataset: str, x, y, collaboration: bool = True, device: str = "cpu"):
        import torch

        import torch_reference as tr

        self.torch, self.device = torch, device
        torch.manual_seed(0)
        self.clients = tr.to_torch_clients(x, y, device)
        model = tr.make_model(dataset).to(device)
        cfg = tr.Config(classifier_collaboration=collaboration)
        self.server = tr.FedPACServer(model, len(self.clients), cfg) if algorithm == "fedpac" else tr.FedAvgServer(model, cfg)

    def step(self):
        self.server.round_(self.clients)
        if self.device != "cpu":
            self.torch.cuda.synchronize()  # kernels are queued asynchronously: wait before reading the clock


class OfficialTorchRunner:
    """The official FedPAC code's round, host-side work included (``torch_official.py``); CPU, FMNIST only."""

    def __init__(self, x, y):
        import torch

        import torch_official as to
        import torch_reference as tr

        torch.manual_seed(0)  # the initial model; OfficialFedPAC reseeds for the loaders' shuffling
        self.fed = to.OfficialFedPAC(tr.make_model("fmnist"), to.quantize_images(x), np.asarray(y))

    def step(self):
        self.fed.round_()


def jax_device_peak_bytes() -> int | None:
    """Peak bytes in use on JAX's default device since the process started (None on the CPU backend)."""
    import jax

    stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def torch_device_peak_bytes(device: str) -> int | None:
    if device == "cpu":
        return None
    import torch

    return int(torch.cuda.max_memory_allocated())


def timed(fn) -> tuple[float, int]:
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
    return seconds, mem.delta


def measure(algorithm: str, dataset: str, clients: int, samples: int, reps: int, torch_max: int,
            strategy: str = "auto", chunk_size: int = 4, collaboration: bool | None = None,
            warmup_round: bool = True, torch_device: str = "cpu", official: bool = False) -> dict:
    """Interleaved pflax / PyTorch rounds on the same random data; medians over ``reps``.

    Every side runs one untimed round first, so the timed rounds are rounds >= 1 everywhere (FedPAC's
    alignment term is off in round 0). ``official=True`` (FedPAC, FMNIST, CPU) also times the official
    code's loop with its host-side work (``torch_official.py``) beside the tuned PyTorch loop, on the
    same images quantised to uint8.

    ``warmup_round=False`` (used for very large client counts, where one round takes minutes) compiles
    the round ahead of time instead of running it once untimed; ``pflax_first_round_s`` is then the
    compile time alone.
    """
    if official and (algorithm, dataset, torch_device, min(clients, torch_max)) != ("fedpac", "fmnist", "cpu", clients):
        raise ValueError("the official loop is ported for FedPAC on FMNIST, on the CPU, all clients timed")
    if collaboration is None:
        collaboration = clients < 1000
    x, y = random_clients(dataset, clients, samples)
    torch_clients = min(clients, torch_max)
    with PeakRSS() as setup_mem:  # data on the device, compilation and the first round
        pf = PflaxRunner(algorithm, dataset, x, y, strategy, chunk_size, collaboration)
        t0 = time.perf_counter()
        pf.step() if warmup_round else pf.compile()
        compile_s = time.perf_counter() - t0
    # Warm PyTorch up on two clients (oneDNN/cuDNN primitive creation, allocator) before timing it.
    TorchRunner(algorithm, dataset, x[:2], y[:2], collaboration, torch_device).step()
    th = TorchRunner(algorithm, dataset, x[:torch_clients], y[:torch_clients], collaboration, torch_device)
    th.step()
    if official:
        off = OfficialTorchRunner(x, y)
        off.step()
    pf_times, th_times, pf_mem, th_mem, off_times, off_mem = [], [], [], [], [], []
    for _ in range(reps):
        s, m = timed(pf.step)
        pf_times.append(s), pf_mem.append(m)
        s, m = timed(th.step)
        th_times.append(s), th_mem.append(m)
        if official:
            s, m = timed(off.step)
            off_times.append(s), off_mem.append(m)
    pflax_device_peak = jax_device_peak_bytes()  # JAX's allocator only: PyTorch has its own
    pf_s, th_sub = float(np.median(pf_times)), float(np.median(th_times))
    th_s = th_sub * clients / torch_clients
    official_fields = {}
    if official:
        off_s = float(np.median(off_times))
        official_fields = {"torch_official_round_s": off_s, "torch_official_round_s_all": off_times,
                           "ratio_pflax_over_torch_official": pf_s / off_s,
                           "torch_official_peak_rss_delta_bytes": int(max(off_mem))}
    return {
        **official_fields,
        "algorithm": algorithm, "model": f"fedpac_{dataset}_cnn", "clients": clients, "samples_per_client": samples,
        "strategy": strategy, "chunk_size": chunk_size, "classifier_collaboration": collaboration,
        "reps": reps, "warmup_round": warmup_round, "pflax_round_s": pf_s, "pflax_round_s_all": pf_times, "pflax_first_round_s": compile_s,
        "torch_round_s": th_s, "torch_round_s_all": th_times, "torch_clients_timed": torch_clients,
        "torch_extrapolated": torch_clients < clients, "ratio_pflax_over_torch": pf_s / th_s,
        "pflax_peak_rss_delta_bytes": int(max(pf_mem)), "torch_peak_rss_delta_bytes": int(max(th_mem)),
        "pflax_live_buffer_bytes": pf.live_bytes(), "pflax_setup_peak_rss_delta_bytes": int(setup_mem.delta),
        "process_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "load_avg_1min": os.getloadavg()[0], "threads": int(os.environ.get("PFLAX_BENCH_THREADS", "0")),
        "pflax_device_peak_bytes": pflax_device_peak, "torch_device_peak_bytes": torch_device_peak_bytes(torch_device),
        "jax_backend": jax_backend_name(), "torch_device": torch_device, "torch_device_name": torch_device_name(torch_device),
        "pflax_commit": git_commit(),
    }


def jax_backend_name() -> str:
    import jax

    d = jax.devices()[0]
    return f"{jax.default_backend()}: {d.device_kind} (jax {jax.__version__})"


def torch_device_name(device: str) -> str:
    import torch

    name = torch.cuda.get_device_name() if device != "cpu" else "cpu"
    return f"{name} (torch {torch.__version__})"


def git_commit() -> str | None:
    """The commit the measured code came from (with "+dirty" if the working tree differs)."""
    if os.environ.get("PFLAX_COMMIT"):  # set by hand where .git is missing or stale (a copied tree)
        return os.environ["PFLAX_COMMIT"]
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pflax", "benchmarks/speed/*.py"], cwd=root,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def set_threads(threads: int) -> None:
    """Pin PyTorch and XLA:CPU to ``threads`` intra-op threads (0 = each library's default).

    On a shared machine, multi-threaded kernels lose time at every barrier where one thread was
    descheduled, PyTorch's OpenMP more than XLA's; one thread each is the fairer comparison then.
    Must run before jax is imported.
    """
    os.environ["PFLAX_BENCH_THREADS"] = str(threads)
    if threads:
        import torch

        torch.set_num_threads(threads)
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"


def cmd_one(args):
    """Child process: one configuration, one JSON line on stdout."""
    set_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).parent))
    r = measure(args.algorithm, args.model, args.clients, args.samples, args.reps, args.torch_max,
                args.strategy, args.chunk_size, warmup_round=args.clients < WARMUP_BELOW,
                torch_device=args.torch_device, collaboration=COLLABORATION[args.collaboration])
    print("RESULT " + json.dumps(r), flush=True)


COLLABORATION = {"auto": None, "on": True, "off": False}  # FedPAC's classifier combination (auto: on below 1000 clients)


def cmd_scaling(args):
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    out = results / "scaling.json"
    rows = json.loads(out.read_text()) if out.exists() and args.append else []
    for model in args.models.split(","):
        for clients in [int(c) for c in args.clients.split(",")]:
            for algorithm in args.algorithms.split(","):
                reps = 1 if clients >= 1000 and args.torch_device == "cpu" else args.reps  # a CPU round there takes minutes
                cmd = [sys.executable, __file__, "one", "--algorithm", algorithm, "--model", model,
                       "--clients", str(clients), "--samples", str(args.samples), "--reps", str(reps),
                       "--torch-max", str(args.torch_max), "--threads", str(args.threads),
                       "--torch-device", args.torch_device, "--strategy", args.strategy, "--chunk-size", str(args.chunk_size),
                       "--collaboration", args.collaboration]
                print(" ".join(cmd[1:]), flush=True)
                proc = subprocess.run(cmd, capture_output=True, text=True)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                if proc.returncode or not lines:
                    row = {"algorithm": algorithm, "model": f"fedpac_{model}_cnn", "clients": clients,
                           "error": proc.stderr[-2000:]}
                else:
                    row = json.loads(lines[-1][len("RESULT "):])
                print(json.dumps({k: row.get(k) for k in ("model", "algorithm", "clients", "pflax_round_s", "pflax_first_round_s",
                                                          "torch_round_s", "ratio_pflax_over_torch", "pflax_device_peak_bytes",
                                                          "error")}), flush=True)
                rows = [r for r in rows if (r["model"], r["algorithm"], r["clients"]) != (row["model"], algorithm, clients)]
                rows.append(row)
                out.write_text(json.dumps(rows, indent=1))
    cmd_plot(args)


def cmd_acceptance(args):
    """The issue's acceptance figure, for several execution strategies."""
    sys.path.insert(0, str(Path(__file__).parent))
    set_threads(args.threads)
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    rows = []
    for strategy in args.strategies.split(","):
        name, _, chunk = strategy.partition(":")
        official = args.torch_device == "cpu"
        r = measure("fedpac", "fmnist", 20, 600, args.reps, 20, name, int(chunk or 4), collaboration=True,
                    torch_device=args.torch_device, official=official)
        keys = ("strategy", "chunk_size", "pflax_round_s", "torch_round_s", "ratio_pflax_over_torch")
        keys += ("torch_official_round_s", "ratio_pflax_over_torch_official") if official else ()
        print(json.dumps({k: r[k] for k in keys}), flush=True)
        r["threads"] = args.threads
        rows.append(r)
    (results / f"acceptance_fedpac_fmnist_20x600_threads{args.threads}.json").write_text(json.dumps(rows, indent=1))


def growth_exponent(clients, values) -> float:
    """Slope of log(value) against log(clients): 1.0 means linear growth."""
    return float(np.polyfit(np.log(clients), np.log(values), 1)[0])


def cmd_plot(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pflax.figures import save_png

    results = Path(args.results)
    rows = [r for r in json.loads((results / "scaling.json").read_text()) if "error" not in r]
    on_gpu = rows[0].get("pflax_device_peak_bytes") is not None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    summary = {}
    for (model, algorithm) in sorted({(r["model"], r["algorithm"]) for r in rows}):
        sel = sorted((r for r in rows if r["model"] == model and r["algorithm"] == algorithm), key=lambda r: r["clients"])
        n = np.array([r["clients"] for r in sel])
        label = f"{algorithm} / {model.replace('fedpac_', '').replace('_cnn', '')}"
        pf = np.array([r["pflax_round_s"] for r in sel])
        th = np.array([r["torch_round_s"] for r in sel])
        mem = np.array([r["process_max_rss_bytes"] for r in sel]) / 2**20
        live = np.array([r["pflax_live_buffer_bytes"] for r in sel]) / 2**20
        line, = axes[0].loglog(n, pf, "o-", label=f"pflax {label}")
        axes[0].loglog(n, th, "x--", color=line.get_color(), label=f"PyTorch {label}")
        (axes[1].loglog if on_gpu else axes[1].semilogx)(n, pf / th, "o-", label=label)
        if on_gpu:  # accelerator memory: both allocators' peaks
            dev = np.array([r["pflax_device_peak_bytes"] for r in sel]) / 2**20
            line, = axes[2].loglog(n, dev, "o-", label=f"pflax device peak, {label}")
            axes[2].loglog(n, np.array([r["torch_device_peak_bytes"] for r in sel]) / 2**20, "x--",
                           color=line.get_color(), label=f"PyTorch device peak, {label}")
        else:
            line, = axes[2].loglog(n, mem, "o-", label=f"process peak RSS, {label}")
            axes[2].loglog(n, live, "s:", color=line.get_color(), label=f"JAX live buffers, {label}")
        if len(n) > 1:
            summary[label] = {"time_exponent": growth_exponent(n, pf), "torch_time_exponent": growth_exponent(n, th),
                              "process_peak_rss_exponent": growth_exponent(n, mem),
                              "live_buffer_exponent": growth_exponent(n, live),
                              "clients": n.tolist(), "pflax_round_s": pf.tolist(), "torch_round_s": th.tolist(),
                              "process_peak_rss_mib": mem.tolist(), "live_buffer_mib": live.tolist()}
            if on_gpu:
                summary[label] |= {"device_peak_exponent": growth_exponent(n, dev), "pflax_device_peak_mib": dev.tolist()}
    axes[0].set(xlabel="clients per round", ylabel="round time (s)", title="round time (torch dashed)")
    axes[1].set(xlabel="clients per round", ylabel="pflax / PyTorch", title="time ratio (lower is better)")
    axes[1].axhline(1.0, color="gray", lw=0.8)
    axes[2].set(xlabel="clients per round", ylabel="MiB",
                title="GPU memory: peak in use (torch dashed)" if on_gpu else "memory: process peak RSS (solid), JAX live (dotted)")
    for ax in axes:
        ax.legend(fontsize=7)
    load = max(r.get("load_avg_1min", 0.0) for r in rows)
    where = (f"{rows[0]['jax_backend']} vs PyTorch on {rows[0]['torch_device_name']}" if rows[0].get("torch_device", "cpu") != "cpu"
             else f"{os.cpu_count()}-core CPU")
    fig.suptitle(f"pflax vs PyTorch loop, {where} (max 1-min load while measured {load:.1f})\nrandom data, "
                 f"{rows[0]['samples_per_client']} samples/client, 1+5 (FedPAC) or 5 (FedAvg) epochs")
    fig.tight_layout()
    save_png(fig, results / "scaling.png", dpi=110)
    (results / "scaling_growth.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one")
    one.add_argument("--algorithm", default="fedpac")
    one.add_argument("--model", default="fmnist")
    one.add_argument("--clients", type=int, default=10)
    one.add_argument("--samples", type=int, default=50)
    one.add_argument("--threads", type=int, default=0, help="intra-op threads for both (0 = defaults)")
    one.add_argument("--reps", type=int, default=2)
    one.add_argument("--torch-max", type=int, default=100)
    one.add_argument("--strategy", default="auto")
    one.add_argument("--chunk-size", type=int, default=4)
    one.add_argument("--torch-device", default="cpu", help="cpu or cuda")
    one.add_argument("--collaboration", choices=list(COLLABORATION), default="auto")
    sc = sub.add_parser("scaling")
    sc.add_argument("--models", default="fmnist,cifar")
    sc.add_argument("--algorithms", default="fedavg,fedpac")
    sc.add_argument("--clients", default="10,100,1000")
    sc.add_argument("--samples", type=int, default=50)
    sc.add_argument("--threads", type=int, default=0, help="intra-op threads for both (0 = defaults)")
    sc.add_argument("--reps", type=int, default=2)
    sc.add_argument("--torch-max", type=int, default=100)
    sc.add_argument("--append", action="store_true", help="keep rows of other configurations already in the JSON")
    sc.add_argument("--torch-device", default="cpu", help="cpu or cuda (PyTorch's device; JAX uses its default backend)")
    sc.add_argument("--strategy", default="auto", help="pflax execution strategy")
    sc.add_argument("--chunk-size", type=int, default=4)
    sc.add_argument("--collaboration", choices=list(COLLABORATION), default="auto",
                    help="FedPAC classifier combination (auto: on below 1000 clients)")
    sc.add_argument("--results", default=str(RESULTS), help="folder for scaling.json, scaling.png, scaling_growth.json")
    ac = sub.add_parser("acceptance")
    ac.add_argument("--strategies", default="map", help="comma list, chunked as chunked:4")
    ac.add_argument("--threads", type=int, default=0, help="intra-op threads for both (0 = defaults)")
    ac.add_argument("--reps", type=int, default=3)
    ac.add_argument("--torch-device", default="cpu", help="cpu or cuda")
    ac.add_argument("--results", default=str(RESULTS))
    pl = sub.add_parser("plot")
    pl.add_argument("--results", default=str(RESULTS))
    args = p.parse_args()
    {"one": cmd_one, "scaling": cmd_scaling, "acceptance": cmd_acceptance, "plot": cmd_plot}[args.cmd](args)


if __name__ == "__main__":
    main()
