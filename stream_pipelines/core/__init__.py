"""What every other part stands on: the config, the file layer, the registry of apps and datasets, the
exit codes, and where a process lives (on this host, or in YARN).

  exit_codes        the exit codes of every driver and job, and which refusals no restart fixes
  procfs            this host's processes, read from /proc
  kafka_security    the Kafka cluster's security settings, checked when the config loads
  resource_manager  YARN's ResourceManager over its REST API
  store             the file layer: local paths, S3 and HDFS behind one API
  config            the pipeline's configuration, loaded and validated
  registry          every app, query and dataset, declared once
  shipped           the files shipped beside the code (starter conf, monitoring), the DAG files and
                    starter conf dir written from them, and the caches' default folders
"""
