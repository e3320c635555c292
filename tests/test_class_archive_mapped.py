"""The class-data archive that `make setup` built, mapped by a real spark-submit driver.

``-Xshare:on`` makes the JVM refuse to start when it cannot map the archive (missing, written by
another Java build, or for other jars), so a driver that runs at all has mapped it; the class-loading
log then shows Spark's own classes coming from the archive rather than from their jars.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from stream_pipelines.core.config import load_config
from stream_pipelines.launching import class_archive
from stream_pipelines.launching.spark_conf import DRIVER_JAVA_OPTIONS, spark_conf
from stream_pipelines.launching.submit import spark_submit_executable, submit_environment

DRIVER = """
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
print("rows:", spark.range(3).count())
spark.stop()
"""


def test_a_driver_maps_the_class_archive_that_setup_built(tmp_path: Path):
    assert class_archive.is_current(), "`make setup` builds the class archive; it is missing or stale"
    config = load_config("local", environ={})
    script, classes = tmp_path / "driver.py", tmp_path / "classes.log"
    script.write_text(DRIVER)
    options = f"{spark_conf(config)[DRIVER_JAVA_OPTIONS]} -Xshare:on -Xlog:class+load=info:file={classes}"
    command = [
        spark_submit_executable(),
        "--master",
        "local[1]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"{DRIVER_JAVA_OPTIONS}={options}",
        str(script),
    ]

    result = subprocess.run(
        command, env=submit_environment(), capture_output=True, text=True, timeout=300, check=False
    )

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "rows: 3" in result.stdout
    loaded = classes.read_text()
    assert re.search(r"org\.apache\.spark\.SparkContext source: shared objects file \(top\)", loaded)
    assert re.search(r"org\.apache\.spark\.sql\.SparkSession source: shared objects file \(top\)", loaded)
