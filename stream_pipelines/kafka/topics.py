"""The configured Kafka topics on any cluster: create them (or grow their partitions)."""

from __future__ import annotations

from stream_pipelines.core.config import PipelineConfig, TopicSettings
from stream_pipelines.core.registry import App
from stream_pipelines.kafka.clients import KafkaAccessRefused, admin_client, cluster_metadata


def ensure_topics(config: PipelineConfig, timeout_s: float = 30.0) -> dict[str, str]:
    """Create the configured topics, or grow their partitions; returns what was done per topic."""
    from confluent_kafka.admin import NewPartitions, NewTopic

    existing = cluster_metadata(config, timeout_s).topics
    admin = admin_client(config)
    outcome: dict[str, str] = {}
    to_create: list[TopicSettings] = []
    for topic in config.kafka.topics.all():
        if topic.name not in existing:
            to_create.append(topic)
            continue
        current = len(existing[topic.name].partitions)
        if current < topic.partitions:
            admin.create_partitions([NewPartitions(topic.name, topic.partitions)])[topic.name].result(
                timeout_s
            )
            outcome[topic.name] = f"grown from {current} to {topic.partitions} partitions"
        elif current > topic.partitions:
            outcome[topic.name] = (
                f"exists with {current} partitions, more than the configured {topic.partitions} "
                "(Kafka cannot shrink a topic; left as it is)"
            )
        else:
            outcome[topic.name] = f"exists ({current} partitions)"
    if to_create:
        futures = admin.create_topics(
            [
                NewTopic(
                    topic.name,
                    num_partitions=topic.partitions,
                    config={"cleanup.policy": "compact"} if topic.compacted else {},
                )
                for topic in to_create
            ],
            operation_timeout=timeout_s,
        )
        for topic in to_create:
            futures[topic.name].result(timeout_s)
            outcome[topic.name] = f"created ({topic.partitions} partitions)"
    return outcome


class MissingTopicsError(RuntimeError):
    """A topic an app reads or writes does not exist: found at start-up, not by a producer time-out."""


# What the start-up topic check refuses for good: a restart cannot fix either.
REFUSALS = (MissingTopicsError, KafkaAccessRefused)


def require_topics(config: PipelineConfig, app: App, timeout_s: float = 15.0) -> str | None:
    """Refuse to start an app whose source or sink topics are missing, naming them and the fix, or
    whose credentials or certificates the cluster refuses (``KafkaAccessRefused``).

    A broker that does not answer is not a configuration error: refusing would stop supervision for
    good during a broker restart. The check is then skipped with a warning (returned) and Spark's
    own clients retry the connection."""
    from confluent_kafka import KafkaException

    needed = app.sink_topic_names(config)
    if config.source.kind == "kafka":
        needed |= app.source_topic_names(config)
    if not needed:
        return None
    try:
        existing = set(cluster_metadata(config, timeout_s).topics)
    except KafkaException as error:
        return (
            f"could not check that topic(s) {', '.join(sorted(needed))} exist: "
            f"{config.kafka.bootstrap_servers} did not answer ({error}); starting anyway"
        )
    missing = sorted(needed - existing)
    if missing:
        raise MissingTopicsError(
            f"{app.name}: topic(s) {', '.join(missing)} do not exist on {config.kafka.bootstrap_servers}; "
            f"create them with `pipelinectl topics` (same --env and --set as the app), then start "
            f"{app.name} again"
        )
    return None
