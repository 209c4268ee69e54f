#!/usr/bin/env bash
# Spark's GPU discovery script for sparktrain jobs (spark.executor.resource.gpu.discoveryScript):
# prints the GPUs this container may use as Spark's resource JSON, e.g.
#   {"name": "gpu", "addresses": ["0", "1"]}
# from nvidia-smi, limited to CUDA_VISIBLE_DEVICES when the cluster manager has set it. With no
# GPU it prints an empty list, which is still valid JSON: Spark then says the executor has fewer
# GPUs than asked for, rather than that the script failed.
set -euo pipefail
if ! command -v nvidia-smi >/dev/null; then
    echo "discover_gpus.sh: nvidia-smi not found on $(hostname)" >&2
    exit 1
fi
# nvidia-smi fails ("No devices were found") where there is a driver but no GPU.
if ! listed=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>&1); then
    echo "discover_gpus.sh: nvidia-smi on $(hostname): $listed" >&2
    listed=""
fi
addresses=$(tr -d ' ' <<<"$listed" | grep -E '^[0-9]+$' || true)
if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    addresses=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | tr -d ' ' | grep -v '^$' || true)
fi
if [[ -z "$addresses" ]]; then
    printf '{"name": "gpu", "addresses": []}\n'
    exit 0
fi
printf '{"name": "gpu", "addresses": [%s]}\n' "$(sed 's/.*/"&"/' <<<"$addresses" | paste -sd, -)"
