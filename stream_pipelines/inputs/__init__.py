"""What the apps read, typed: the event schemas and the parsing that types raw records or quarantines
them (``parsing``), and the sensor metadata table, re-read every micro-batch (``sensor_metadata``)."""
