"""What the lifecycle records about a failed query: the line that says what went wrong."""

from __future__ import annotations

from stream_pipelines.driver.lifecycle import error_summary


def test_the_innermost_cause_of_a_py4j_wrapped_python_error_is_kept():
    text = (
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function. Reason: An "
        "exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        '  File "/app/sink.py", line 37, in write\n'
        "    raise RuntimeError('sink unavailable')\n"
        "RuntimeError: sink unavailable: Topic sensor_sliding_avg not present in metadata\n"
    )
    assert (
        error_summary(text)
        == "RuntimeError: sink unavailable: Topic sensor_sliding_avg not present in metadata"
    )


def test_a_kafka_producer_timeout_is_named():
    text = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted.\n"
        "org.apache.kafka.common.errors.TimeoutException: Topic sensor_sliding_avg not present in metadata "
        "after 60000 ms.\n"
        "\tat org.apache.kafka.clients.producer.KafkaProducer.waitOnMetadata(KafkaProducer.java:1)"
    )
    assert error_summary(text).startswith(
        "org.apache.kafka.common.errors.TimeoutException: Topic sensor_sliding"
    )


def test_a_plain_message_is_its_first_line():
    assert error_summary("disk full\nmore detail") == "disk full"
    assert error_summary("") == "str"
