"""The executor task of a job: the body of each barrier task
(:mod:`~sparktrain.cluster.task.run`), the stages' partition functions
(:mod:`~sparktrain.cluster.task.stages`), the trainer's output on its way to the driver
(:mod:`~sparktrain.cluster.task.output`) and the feed of ``input_mode="spark"``
(:mod:`~sparktrain.cluster.task.feed`). Runs in the executor task (Spark's Python worker);
imports nothing of the driver's or the trainer's side."""
