"""spark-submit entry point of sensor_aggregation: its life is stream_pipelines.driver.lifecycle's, its
queries are built by stream_pipelines.apps.sensor_aggregation."""

import sys

from stream_pipelines.driver.lifecycle import run_app

if __name__ == "__main__":
    sys.exit(run_app("sensor_aggregation"))
