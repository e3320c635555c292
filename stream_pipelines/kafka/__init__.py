"""The project's own talk with Kafka, beside Spark's.

clients  the librdkafka clients, and what a broker's refusal of them means
topics   the configured topics: created, grown, and checked before an app starts
"""
