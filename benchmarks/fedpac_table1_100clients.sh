#!/usr/bin/env bash
# FedPAC Table 1/4, the Fashion-MNIST column with 100 clients at participation 0.3 (30 per round),
# 200 rounds, seed 0: FedPAC, then the baselines the CPU campaign runs first. Every run checkpoints
# every 10 rounds and resumes (--resume), so the script can be stopped and started again at will.
#   bash benchmarks/fedpac_table1_100clients.sh [method ...]
set -uo pipefail
cd "$(dirname "$0")/.."
DATA="${PFLAX_DATASETS:-$(cd .. && pwd)/shared/datasets}"
OUT=benchmarks/results/table1_fmnist_100clients
METHODS=("${@:-fedpac local_only fedavg fedrep fedrod}")
for method in ${METHODS[@]}; do
  resume=()
  [ -d "$OUT/$method/checkpoints" ] && resume=(--resume)  # a first start has nothing to resume
  pflax run "$method" --dataset fashion_mnist --data-dir "$DATA" --clients 100 --fraction 0.3 --rounds 200 \
    --eval-every 10 --checkpoint-every 10 "${resume[@]}" --quiet --out "$OUT/$method" || echo "$method stopped ($?)"
done
