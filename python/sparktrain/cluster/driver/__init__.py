"""The driver's side of a job: ``Cluster.run`` and the job handle
(:mod:`~sparktrain.cluster.driver.launcher`), its options and confs
(:mod:`~sparktrain.cluster.driver.options`, :mod:`~sparktrain.cluster.driver.conf`), the checks
before a job (:mod:`~sparktrain.cluster.driver.preflight`,
:mod:`~sparktrain.cluster.driver.slots`), the Spark stage (:mod:`~sparktrain.cluster.driver.stage`),
restarts (:mod:`~sparktrain.cluster.driver.restarts`) and the trainers' output
(:mod:`~sparktrain.cluster.driver.console`). Runs on the driver."""
