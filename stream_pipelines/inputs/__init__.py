"""What the apps read, typed: the event schemas and the parsing that types raw records or quarantines
them (``parsing``), the sensor metadata table, re-read every micro-batch (``sensor_metadata``), and
rows the driver already holds, as a DataFrame built in the JVM (``local_rows``)."""
