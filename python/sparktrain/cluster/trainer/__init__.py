"""The trainer process: its entry point (:mod:`~sparktrain.cluster.trainer.main`, run as
``python -m sparktrain.cluster.trainer``), ``ctx`` (:mod:`~sparktrain.cluster.trainer.context`),
the feed it reads (:mod:`~sparktrain.cluster.trainer.feed`) and the frameworks' variables
(:mod:`~sparktrain.cluster.trainer.frameworks`). Runs in the trainer process; imports nothing
of the driver's or the executor task's side."""
