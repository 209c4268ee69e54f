#!/usr/bin/env bash
# Spark's GPU discovery script for sparktrain jobs (spark.executor.resource.gpu.discoveryScript):
# prints the GPUs this container may use as Spark's resource JSON, e.g.
#   {"name": "gpu", "addresses": ["0", "1"]}
# from nvidia-smi, limited to CUDA_VISIBLE_DEVICES when the cluster manager has set it.
set -euo pipefail
if ! command -v nvidia-smi >/dev/null; then
    echo "discover_gpus.sh: nvidia-smi not found on $(hostname)" >&2
    exit 1
fi
addresses=$(nvidia-smi --query-gpu=index --format=csv,noheader | tr -d ' ')
if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    addresses=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES")
fi
if [[ -z "$addresses" ]]; then
    printf '{"name": "gpu", "addresses": []}\n'
    exit 0
fi
printf '{"name": "gpu", "addresses": [%s]}\n' "$(sed 's/.*/"&"/' <<<"$addresses" | paste -sd, -)"
