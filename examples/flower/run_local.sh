#!/usr/bin/env bash
# Run a pflax algorithm as a Flower app on this machine: one SuperLink and N SuperNodes on 127.0.0.1,
# each SuperNode with its own data file, then `flwr run`. Everything is stopped on exit.
#
#   examples/flower/run_local.sh [ALGORITHM] [NUM_NODES] [ROUNDS]
#   examples/flower/run_local.sh fedpac 3 3
#
# Needs: pip install -e ".[flower]" (pflax and flwr>=1.41,<1.42). Work files go to $WORKDIR
# (default: a new temporary directory): data/, node<i>/ (client rows), checkpoints/, logs/.
set -euo pipefail

ALGORITHM="${1:-fedpac}"
NODES="${2:-3}"
ROUNDS="${3:-3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKDIR="${WORKDIR:-$(mktemp -d -t pflax-flower-XXXXXX)}"
mkdir -p "$WORKDIR/logs"
export FLWR_HOME="$WORKDIR/flwr-home"   # Flower's config, installed apps and logs stay in $WORKDIR
mkdir -p "$FLWR_HOME"

free_port() { python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
LINK_PORT="$(free_port)"

PIDS=()
cleanup() {
  # Each process was started in its own process group (setsid): stop the groups, SuperExec and
  # ClientApp/ServerApp children included.
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  sleep 2
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# 1. Each client's data: a synthetic federation, one file per client (copy each to its machine).
python - "$WORKDIR/data" "$NODES" <<'PY'
import sys
from pflax.data import toy_federation
from pflax.flower import save_client_data
train, test = toy_federation(num_clients=int(sys.argv[2]), train_per_client=60, test_per_client=20)
for p in save_client_data(train, sys.argv[1], test=test):
    print("wrote", p)
PY

# 2. The SuperLink (Fleet, Control and Runtime APIs on one port).
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "local"

[superlink.local]
address = "127.0.0.1:$LINK_PORT"
insecure = true
TOML
setsid flower-superlink --insecure --host 127.0.0.1 --port "$LINK_PORT" \
  --disable-runtime-dependency-installation > "$WORKDIR/logs/superlink.log" 2>&1 &
PIDS+=($!)
until python -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $LINK_PORT)))"; do sleep 0.5; done

# 3. N SuperNodes, each naming its own data file and a directory for its persistent row.
for ((i = 0; i < NODES; i++)); do
  setsid flower-supernode --insecure --superlink "127.0.0.1:$LINK_PORT" --host 127.0.0.1 --port "$(free_port)" \
    --node-config "data=\"$WORKDIR/data/client_$i.npz\" num-partitions=$NODES state-dir=\"$WORKDIR/node$i\"" \
    > "$WORKDIR/logs/supernode-$i.log" 2>&1 &
  PIDS+=($!)
done

# 4. The run: the app in app/ with this run's settings (any AppSpec field, hyphenated).
cat > "$WORKDIR/run.toml" <<TOML
algorithm = "$ALGORITHM"
rounds = $ROUNDS
min-clients = $NODES
checkpoint-dir = "$WORKDIR/checkpoints"
model-args = '{"num_classes": 10, "hidden": [64]}'
TOML
flwr run "$HERE/app" local --stream --run-config "$WORKDIR/run.toml" | tee "$WORKDIR/logs/run.log"

echo "checkpoints: $WORKDIR/checkpoints (read them with pflax.checkpoint.read)"
