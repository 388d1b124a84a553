#!/usr/bin/env bash
# FedPAC Table 1 (Fashion-MNIST, 20 clients, full participation) and the Table 2 ablation.
# Usage: bash benchmarks/fedpac_fmnist.sh [DATA_DIR] [ABLATION_ROUNDS]
# Paper setting: s = 20 %, 600 train / 600 test samples per client, 200 rounds, batch 50, body lr 0.01,
# head lr 0.1, momentum 0.5, wd 5e-4, lambda = 1, 1 head + 5 body epochs, seed 0.
# On a 2-core CPU one round takes ~13 s, so the full run takes ~45 min; the ablation arms run for
# ABLATION_ROUNDS (default 50) rounds and are compared with the "both" arm at the same round.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR=${1:-../shared/datasets}
ABL_ROUNDS=${2:-50}
OUT=benchmarks/results/fedpac_fmnist
COMMON=(--dataset fashion_mnist --data-dir "$DATA_DIR" --clients 20 --fraction 1.0 --s 0.2 --train-per-client 600 --test-per-client 600 --seed 0 --eval-every 10 --quiet)
pflax run fedpac "${COMMON[@]}" --rounds 200 --out "$OUT/both" &
pflax run fedpac "${COMMON[@]}" --rounds "$ABL_ROUNDS" --no-fa --no-cc --out "$OUT/none"
pflax run fedpac "${COMMON[@]}" --rounds "$ABL_ROUNDS" --no-cc --out "$OUT/fa_only"
pflax run fedpac "${COMMON[@]}" --rounds "$ABL_ROUNDS" --no-fa --out "$OUT/cc_only"
wait
python benchmarks/fedpac_table.py
