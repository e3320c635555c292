"""The JVM pieces: a Java 17+ check, and pinned Maven Central artifacts resolved once into a local cache.

Resolution uses the Ivy jar that pyspark bundles (the resolver behind ``--packages``), so no Maven
install is needed. Each bundle is described by ``launching/jvm_bundles/<bundle>.ivy.xml``; a stamp holding the
descriptor's hash makes ``resolve`` a no-op when nothing changed, and lets apps start offline.

What Ivy downloads stays in the user's cache folder (``PIPELINE_IVY_CACHE`` to name another), as Maven's
and pip's downloads do: a second checkout or install of the same user resolves from it without the
network (decision 0028). Removing that folder is always safe: the next setup downloads again.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from stream_pipelines.core.shipped import cache_dir, user_cache_dir

# The bundles' Ivy descriptors ship inside the package: an installed wheel resolves the same pins.
DESCRIPTOR_DIR = Path(__file__).resolve().parent / "jvm_bundles"
CACHE_VARIABLE = "PIPELINE_JVM_CACHE"
DOWNLOAD_CACHE_VARIABLE = "PIPELINE_IVY_CACHE"
BUNDLES = ("spark-kafka", "spark-s3a", "kafka-broker", "hdfs-server", "yarn-server")
MINIMUM_JAVA = 17


class JvmSetupError(RuntimeError):
    """Java or a JVM artifact is missing; the message says what to do."""


def cache_root() -> Path:
    """PIPELINE_JVM_CACHE, else a checkout's .cache/jvm, else the user's cache folder (core.shipped)."""
    return cache_dir(CACHE_VARIABLE, "jvm")


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JvmSetupError(
            f"Java {MINIMUM_JAVA} or newer is required and no `java` is on PATH. Install a JDK "
            "(Debian/Ubuntu: `apt-get install openjdk-17-jdk-headless`; macOS: `brew install openjdk@17`) "
            "or set JAVA_HOME."
        )
    return found


@functools.cache
def java_version_text() -> str:
    """What ``java -version`` prints; asked once per process (setup needs it twice)."""
    result = subprocess.run([java_executable(), "-version"], capture_output=True, text=True, check=False)
    return result.stderr + result.stdout


def java_option(option: str) -> str:
    """One JVM option as extraJavaOptions takes it: spark-submit splits them at blanks unless quoted."""
    return f'"{option}"' if any(character.isspace() for character in option) else option


def java_major_version() -> int:
    text = java_version_text()
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not match:
        raise JvmSetupError(
            f"could not read the Java version from `{java_executable()} -version`: {text.strip()}"
        )
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def check_java() -> int:
    major = java_major_version()
    if major < MINIMUM_JAVA:
        raise JvmSetupError(
            f"Java {major} found at {java_executable()}, but Spark 4 and Kafka 4 need Java {MINIMUM_JAVA}+. "
            "Install openjdk-17 (or newer) and point JAVA_HOME at it."
        )
    return major


def download_cache_root() -> Path:
    """PIPELINE_IVY_CACHE, else the user's cache folder: Ivy's downloads, shared by every checkout and
    install of the user (the resolved bundles and the class archive stay in ``cache_root``)."""
    named = os.environ.get(DOWNLOAD_CACHE_VARIABLE)
    return Path(named) if named else user_cache_dir("ivy")


def spark_home() -> Path:
    """The Spark home of this install: pip's pyspark package folder (its jars/, bin/, python/lib/)."""
    import pyspark  # deferred: only a launch or setup needs to know where pyspark lives

    return Path(pyspark.__file__).parent


def _ivy_jar() -> Path:
    jars = sorted((spark_home() / "jars").glob("ivy-*.jar"))
    if not jars:
        raise JvmSetupError("pyspark's bundled Ivy jar was not found; is pyspark installed in this venv?")
    return jars[-1]


def bundle_dir(bundle: str) -> Path:
    return cache_root() / bundle


def _descriptor_digest(bundle: str) -> str:
    return hashlib.sha256((DESCRIPTOR_DIR / f"{bundle}.ivy.xml").read_bytes()).hexdigest()


def is_resolved(bundle: str) -> bool:
    stamp = bundle_dir(bundle) / ".resolved"
    return stamp.is_file() and stamp.read_text().strip() == _descriptor_digest(bundle)


def resolve(bundle: str, *, quiet: bool = False) -> Path:
    """Fetch a bundle's jars (once) into the cache and return the folder that holds them."""
    target = bundle_dir(bundle)
    if is_resolved(bundle):
        return target
    check_java()
    staging = target.with_name(f".{bundle}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    # One Ivy cache per bundle: `resolve_all` runs them at once, and Ivy does not lock a shared cache;
    # the lock file keeps two setups of this user (two checkouts, CI beside a developer) out of each
    # other's way in the one they share.
    downloads = download_cache_root() / bundle
    downloads.mkdir(parents=True, exist_ok=True)
    command = [
        java_executable(),
        "-jar",
        str(_ivy_jar()),
        "-ivy",
        str(DESCRIPTOR_DIR / f"{bundle}.ivy.xml"),
        "-cache",
        str(downloads),
        "-confs",
        "default",
        "-retrieve",
        f"{staging}/[artifact]-[revision](-[classifier]).[ext]",
    ]
    if not quiet:
        print(f"resolving {bundle} (from Maven Central, once per user) ...", file=sys.stderr, flush=True)
    lock_file = downloads.parent / f"{bundle}.lock"
    with lock_file.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another setup of this user resolves the same bundle; the kernel frees its lock if it dies.
            print(f"waiting for another setup resolving {bundle} ({lock_file})", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not any(staging.glob("*.jar")):
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise JvmSetupError(f"could not resolve {bundle} ({DESCRIPTOR_DIR / (bundle + '.ivy.xml')}):\n{tail}")
    (staging / ".resolved").write_text(_descriptor_digest(bundle))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def resolve_all(bundles: tuple[str, ...] = BUNDLES) -> dict[str, Path]:
    """Every bundle, resolved at once (downloads wait on the network, not on this machine's cores)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(bundles)) as pool:
        folders = dict(zip(bundles, pool.map(resolve, bundles), strict=True))
    # Where a checkout kept its own downloads before they moved to the user's cache: 220 MB not read.
    shutil.rmtree(cache_root() / "ivy-cache", ignore_errors=True)
    return folders


def jars(bundle: str) -> list[Path]:
    if not is_resolved(bundle):
        raise JvmSetupError(
            f"the JVM bundle {bundle!r} is not in {bundle_dir(bundle)}; run `make setup` "
            "(or `pipelinectl setup-jvm`) once while Maven Central is reachable"
        )
    return sorted(bundle_dir(bundle).glob("*.jar"))


def spark_kafka_jars() -> list[str]:
    return [str(jar) for jar in jars("spark-kafka")]


def spark_s3a_jars() -> list[str]:
    return [str(jar) for jar in jars("spark-s3a")]


def kafka_classpath() -> str:
    return os.pathsep.join(str(jar) for jar in jars("kafka-broker"))


# The jars of pyspark's own distribution the HDFS daemons run on beside the hdfs-server bundle: the same
# Hadoop 3.4.2 client Spark uses, and its logging. Names, not globs: a pyspark upgrade that changes them
# must fail here, loudly, and bring launching/jvm_bundles/hdfs-server.ivy.xml along.
HDFS_SERVER_PYSPARK_JARS = (
    "hadoop-client-api-3.4.2.jar",
    "hadoop-client-runtime-3.4.2.jar",
    "slf4j-api-2.0.17.jar",
    "jcl-over-slf4j-2.0.17.jar",
    "log4j-api-2.24.3.jar",
    "log4j-core-2.24.3.jar",
    "log4j-slf4j2-impl-2.24.3.jar",
    "log4j-1.2-api-2.24.3.jar",
)


def hdfs_server_classpath(conf_dir: Path) -> str:
    """The classpath of a NameNode or DataNode: its config folder first, the hdfs-server bundle, then
    the Hadoop client and logging jars pyspark ships (not on Spark's classpath twice: separate JVMs)."""
    spark_jars = spark_home() / "jars"
    shipped = [spark_jars / name for name in HDFS_SERVER_PYSPARK_JARS]
    missing = [str(jar) for jar in shipped if not jar.is_file()]
    if missing:
        raise JvmSetupError(
            f"pyspark no longer ships {', '.join(missing)}: update jvm.HDFS_SERVER_PYSPARK_JARS and "
            "launching/jvm_bundles/hdfs-server.ivy.xml to the Hadoop version pyspark ships"
        )
    return os.pathsep.join(str(entry) for entry in [conf_dir, *jars("hdfs-server"), *shipped])


def yarn_server_classpath(conf_dir: Path) -> str:
    """The classpath of a ResourceManager or NodeManager: its config folder first, the yarn-server bundle
    (plain Hadoop with its dependencies), then the minicluster jar for the one class that set lacks
    (launching/jvm_bundles/yarn-server.ivy.xml says which, and why not the minicluster alone)."""
    minicluster = [jar for jar in jars("hdfs-server") if jar.name.startswith("hadoop-client-minicluster-")]
    return os.pathsep.join(str(entry) for entry in [conf_dir, *jars("yarn-server"), *minicluster])
