"""spark-submit entry point; the app lives in stream_pipelines.apps.sensor_aggregation."""

import sys

from stream_pipelines.apps.sensor_aggregation import main

if __name__ == "__main__":
    sys.exit(main())
