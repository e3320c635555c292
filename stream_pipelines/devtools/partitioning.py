"""Kafka's default partitioner for keyed records, bit for bit.

The generator assigns partitions itself and sends with an explicit partition, because librdkafka's
default (``consistent_random``, CRC32-based) disagrees with the Java client's murmur2. Reproducing the
Java choice means a key lands where any Java/Spark producer would put it, so tests can reason about
which partition a sensor or user lives on.
"""

from __future__ import annotations

_MASK_32 = 0xFFFFFFFF
_MURMUR2_SEED = 0x9747B28C
_MURMUR2_M = 0x5BD1E995
_MURMUR2_R = 24


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: returns the same signed 32-bit int as the Java method."""
    length = len(data)
    # Java does all of this in wrapping 32-bit ints; masking after each multiply reproduces that,
    # and working on unsigned values makes Python's ``>>`` behave like Java's ``>>>``.
    h = (_MURMUR2_SEED ^ length) & _MASK_32
    whole_words_end = length & ~3
    for offset in range(0, whole_words_end, 4):
        k = int.from_bytes(data[offset : offset + 4], "little")
        k = (k * _MURMUR2_M) & _MASK_32
        k ^= k >> _MURMUR2_R
        k = (k * _MURMUR2_M) & _MASK_32
        h = (h * _MURMUR2_M) & _MASK_32
        h ^= k

    # The Java switch falls through from 3 to 1, so each shorter tail includes the steps below it.
    tail_length = length & 3
    if tail_length == 3:
        h ^= data[whole_words_end + 2] << 16
    if tail_length >= 2:
        h ^= data[whole_words_end + 1] << 8
    if tail_length >= 1:
        h ^= data[whole_words_end]
        h = (h * _MURMUR2_M) & _MASK_32

    h ^= h >> 13
    h = (h * _MURMUR2_M) & _MASK_32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (not ``abs``, which overflows on MIN_VALUE)."""
    return value & 0x7FFFFFFF


def kafka_default_partition(key: bytes, num_partitions: int) -> int:
    """Partition the Java client's default partitioner picks for a record with this serialized key."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
