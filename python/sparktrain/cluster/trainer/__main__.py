"""``python -m sparktrain.cluster.trainer``: the trainer process, started by its task (see
:mod:`sparktrain.cluster.trainer.main`). Runs in the trainer process."""

import os
import sys

from sparktrain.cluster.trainer.main import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
# Skip interpreter teardown: user threads (TensorFlow's, for one) must not hold the exit.
os._exit(code)
