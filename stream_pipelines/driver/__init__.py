"""What runs in a streaming app's driver.

runtime    the Spark edge: the session, the sources, the sinks, the driver's scratch
batch_log  the durable copy of every micro-batch's offsets and watermark
recovery   a failed query restarted from its checkpoint inside the running driver
lifecycle  an app's whole life, from its config to its exit (``run_app``)
"""
