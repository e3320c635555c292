"""A bare PySpark driver for ``make bench-overhead``: an app's queries and nothing else.

spark-submit runs this file with the app's own Spark settings. It builds the app's session and queries
exactly as the app's driver does (``runtime.get_spark``, the app module's ``build_sinks``, ``start_sink``)
and waits on them: no start checks, no lease, no metrics exporter, no batch log, no watch loop, no
in-driver recovery. What the deployed driver costs beyond this is the project's own overhead. It runs
until signalled; the benchmark stops it by its process group.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stream_pipelines.core.config import add_config_arguments, config_from_args
from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.driver.lifecycle import build_sinks
from stream_pipelines.driver.runtime import get_spark, start_sink


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bare_driver", description=__doc__)
    parser.add_argument("--app", required=True, choices=APP_NAMES)
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    config, app = config_from_args(args), declared_app(args.app)
    spark = get_spark(config, app.name, own_scratch=True)
    queries = [start_sink(config, app, sink, "processing") for sink in build_sinks(app, spark, config)]
    print(f"{app.name}: started {len(queries)} bare queries", flush=True)
    spark.streams.awaitAnyTermination()
    return 1


if __name__ == "__main__":
    sys.exit(main())
