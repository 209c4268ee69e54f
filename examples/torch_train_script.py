"""The script form of ``torch_distributor.py``'s training: what ``torchrun`` would run, started
by ``TorchDistributor.run("torch_train_script.py", "--learning-rate", "0.05")`` or by
``sparktrain.Cluster.run(spark, "torch_train_script.py", args=[...], num_workers=2)``.

Rank 0 prints ``RESULT {json}``: its losses, its parameters and whether every rank's agree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# The training itself is the function form's, from the file beside this one.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--learning-rate", type=float, required=True)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    from torch_distributor import train

    result = train(args.learning_rate, args.steps)
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
