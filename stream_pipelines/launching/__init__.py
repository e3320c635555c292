"""Starting a driver: its Spark settings, its spark-submit line, the start checks, and on YARN finding and
following its application.

  jvm                     Java, and the pinned JVM artifacts resolved into a local cache
  class_archive           the driver JVM's class-data archive, mapped into every driver
  spark_conf              every Spark setting of a session or a spark-submit (no pyspark needed)
  submit                  the spark-submit line of an app or a job, and its environment
  driver_bundle           what a driver in YARN loads its config from: conf dir, TLS files, variables
  yarn_driver             a driver in a YARN application: found, followed, stopped
  launch                  one start of an app for every launcher: checks, bookkeeping, the command
  class_archive_training  building the class-data archive (``make setup``)
  packed_env              the drivers' Python (interpreter included) and Spark's jars, packed for YARN
  elf                     a shared library's needs and search path, moved beside it (for packed_env)
"""
