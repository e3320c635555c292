"""The Spark settings of a session or a spark-submit: one place, so a driver started by the launcher and a
session opened in-process run with the same settings.

Nothing here imports pyspark at load time: a launcher (``pipelinectl run``, the Airflow supervisor)
builds a driver's command line without it.
"""

from __future__ import annotations

import sys

from stream_pipelines.checkpoint.format import STATE_STORE_PROVIDERS
from stream_pipelines.core import store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.kafka_security import SECRET_OPTIONS_PATTERN
from stream_pipelines.core.resource_manager import tags_of
from stream_pipelines.launching import class_archive, jvm, packed_env

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def spark_conf(config: PipelineConfig, app: str | None = None, job: str | None = None) -> dict[str, str]:
    """Every Spark setting the apps need; used by the session builder and by spark-submit alike.

    With ``app``, the settings of that streaming app's driver: its scratch goes to its own folder. On
    YARN, ``app`` or ``job`` names the application (its tags, how the supervisor finds it).
    """
    settings = config.spark
    conf = {
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": STATE_STORE_PROVIDERS[settings.state_store],
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(
            settings.changelog_checkpointing
        ).lower(),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": str(settings.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.streaming.metricsEnabled": "true",
        "spark.sql.redaction.options.regex": SECRET_OPTIONS_PATTERN,
    }
    if settings.master.startswith("local"):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # Python workers (UDF-free, but the metadata data source runs in them) need this venv.
        conf["spark.pyspark.python"] = sys.executable
        conf["spark.pyspark.driver.python"] = sys.executable
    if "spark.jars.packages" not in settings.extra_conf:
        # The S3A connector only where the config stores something on S3: 38 more jars to load otherwise.
        s3a = jvm.spark_s3a_jars() if store.uses_object_store(config.stored_urls()) else []
        conf["spark.jars"] = ",".join([*jvm.spark_kafka_jars(), *s3a])
    if config.on_yarn:
        conf.update(yarn_conf(config, app or job or "session", streaming=app is not None))
    # A driver in a YARN container writes its scratch to the container's folders, which YARN removes.
    scratch = scratch_conf(config, app) if app is not None and not config.drivers_in_cluster else {}
    conf.update(scratch)
    conf.update(settings.extra_conf)
    # Theirs after ours: the deployment's other options stay, and a temp folder of its own wins.
    java_options = [
        option
        for option in (
            scratch.get(DRIVER_JAVA_OPTIONS),
            class_archive.driver_java_option(config),
            settings.extra_conf.get(DRIVER_JAVA_OPTIONS),
        )
        if option
    ]
    if java_options:
        conf[DRIVER_JAVA_OPTIONS] = " ".join(java_options)
    return conf


def yarn_conf(config: PipelineConfig, name: str, *, streaming: bool) -> dict[str, str]:
    """What a YARN application of ``name`` needs (docs/decisions/0014-drivers-in-yarn.md):

    - its tags, which is how a supervisor finds an app's applications (``resource_manager``);
    - one attempt: a failed driver is restarted by its Airflow supervisor, which counts it;
    - a streaming app's spark-submit returns once YARN accepted it, and the supervisor follows the
      application through the ResourceManager; a batch job's waits for its end (its exit is the job's);
    - the config for a driver in its container comes in its bundle (``driver_bundle``, added by
      ``submit.submission``);
    - Python and Spark's jars from ``yarn.python_environment`` and ``yarn.spark_jars_archive``
      (``pipelinectl pack-env``), else from this install, which every node then needs at the same path.
    """
    conf = {
        "spark.yarn.tags": tags_of(name),
        "spark.yarn.maxAppAttempts": "1",
        "spark.yarn.submit.waitAppCompletion": "false" if streaming else "true",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    yarn = config.yarn
    conf.update(
        packed_env.spark_settings(
            yarn.python_environment, yarn.spark_jars_archive, drivers_in_cluster=config.drivers_in_cluster
        )
    )
    jars = jvm.spark_home() / "jars"
    # Not in a driver in YARN, whose pyspark comes from pyspark.zip (no jars there): it keeps the
    # value its spark-submit was given.
    if jars.is_dir() and not {"spark.yarn.jars", "spark.yarn.archive"} & {*config.spark.extra_conf, *conf}:
        conf["spark.yarn.jars"] = f"local:{jars}/*"
    return conf


def scratch_conf(config: PipelineConfig, app: str) -> dict[str, str]:
    """Spark's scratch space for an app's driver, all in the app's own folder, which its restarts clear.

    A driver killed with -9 runs no shutdown hook, so whatever it wrote to the system temp folder stays
    there for good: the local dirs (``spark-<uuid>`` with a copy of every jar, ``blockmgr-<uuid>``,
    RocksDB's working copies) come from ``spark.local.dir``; the launcher's ``spark-<uuid>``,
    ``artifacts-<uuid>`` and the native libraries the JVM unpacks (snappy, lz4, RocksDB) from
    ``java.io.tmpdir``, which only the JVM's command line sets. Empty when the folder is not local.
    """
    folder = config.scratch_dir(app)
    if folder is None:
        return {}
    return {"spark.local.dir": folder, DRIVER_JAVA_OPTIONS: jvm.java_option(f"-Djava.io.tmpdir={folder}")}
