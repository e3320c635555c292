"""Config validation: errors name the key and the problem, as a user fixing them needs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stream_pipelines.core import config as config_module
from stream_pipelines.core.config import (
    DEFAULT_CONF_DIR,
    ConfigError,
    Duration,
    load_config,
    override_variables,
)


def error_for(
    *overrides: str, env: str = "local", environ: dict[str, str] | None = None, conf_dir=None
) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(env, overrides, environ=environ or {}, conf_dir=conf_dir)
    return str(caught.value)


def test_local_defaults_load_and_are_typed():
    config = load_config("local", environ={})
    assert config.sensors.watermark == Duration(120)
    assert config.sensors.watermark.spark() == "120 seconds"
    assert config.kafka.topics.sensors.partitions == 3
    assert config.kafka.topics.clicks.name == "clicks_ads"
    assert config.data_path("archive").endswith("/data/archive")


def test_bad_duration_names_key_and_unit():
    message = error_for("sensors.watermark=2 minuts")
    assert "sensors.watermark" in message
    assert "'2 minuts'" in message and "unknown unit 'minuts'" in message


def test_duration_without_unit_is_refused():
    assert "needs a unit" in error_for("ads.match_interval=300")


def test_slide_must_divide_window():
    message = error_for("sensors.slide=3 minutes")
    assert "sensors" in message
    assert "slide (3 minutes) does not divide sliding_window (10 minutes)" in message


def test_unknown_key_is_named():
    message = error_for("sensors.watermarks=2 minutes")
    assert "sensors.watermarks: unknown key" in message


def test_missing_metadata_file_is_named(tmp_path: Path):
    message = error_for(f"sensors.metadata_path={tmp_path}/nope.csv")
    assert f"sensors.metadata_path: file not found: {tmp_path}/nope.csv" in message


def test_missing_required_key_is_named(tmp_path: Path):
    shutil.copytree(DEFAULT_CONF_DIR, tmp_path / "conf")
    text = (tmp_path / "conf" / "local.yaml").read_text()
    (tmp_path / "conf" / "local.yaml").write_text(text.replace("  bootstrap_servers: 127.0.0.1:9092\n", ""))
    (tmp_path / "conf" / "sensor_metadata.csv").write_text("sensor_id,location,building,floor\n")
    message = error_for(conf_dir=tmp_path / "conf")
    assert "kafka.bootstrap_servers: required key is missing" in message


def test_unknown_environment_lists_the_available_ones():
    message = error_for(env="staging")
    assert "'staging'" in message and "cluster" in message and "local" in message


def test_command_line_override_wins_over_environment_variable():
    environ = {"PIPELINE__SENSORS__WATERMARK": "5 minutes"}
    assert load_config("local", environ=environ).sensors.watermark == Duration(300)
    config = load_config("local", ["sensors.watermark=10 minutes"], environ=environ)
    assert config.sensors.watermark == Duration(600)


def test_override_values_are_typed_as_yaml():
    config = load_config("local", ["kafka.max_offsets_per_trigger=500", "spark.ui_enabled=true"], environ={})
    assert config.kafka.max_offsets_per_trigger == 500
    assert config.spark.ui_enabled is True


def test_environment_variable_override_is_validated_and_named():
    message = error_for(environ={"PIPELINE__SPARK__SHUFFLE_PARTITIONS": "zero"})
    assert "spark.shuffle_partitions" in message


def test_secrets_come_from_the_environment_and_a_missing_one_is_named(tmp_path):
    from stream_pipelines.devtools.tls import make_test_pki

    on_this_host = f"kafka.security.ca_file={make_test_pki(tmp_path / 'tls').ca}"
    message = error_for(on_this_host, env="cluster")
    assert "kafka.security.sasl_username: environment variable KAFKA_USERNAME is not set" in message
    message = error_for(on_this_host, env="cluster", environ={"KAFKA_USERNAME": "svc"})
    assert "sasl_password_env: environment variable KAFKA_PASSWORD is not set" in message
    environ = {"KAFKA_USERNAME": "svc", "KAFKA_PASSWORD": "s3cret"}
    config = load_config("cluster", [on_this_host], environ=environ)
    assert 'password="s3cret"' in config.kafka.java_client_properties()["sasl.jaas.config"]
    assert config.kafka_client_config()["sasl.password"] == "s3cret"
    assert config.spark.master.startswith("spark://")
    assert config.data_path("archive") == "s3a://pipeline-data/archive"
    assert (
        config.checkpoint_dir("raw_archive", "archive")
        == "s3a://pipeline-data/checkpoints/raw_archive/archive"
    )


def test_a_location_on_a_store_the_file_layer_does_not_serve_is_refused_at_start_up():
    message = error_for("paths.checkpoints=gs://bucket/ck")
    assert "paths.checkpoints: gs://bucket/ck is on gs://" in message
    assert "use a local path, file:// (a folder every host mounts), s3a:// or hdfs://" in message


def test_malformed_set_argument_is_explained():
    assert "expected key.path=value" in error_for("sensors.watermark")


def test_every_value_can_be_overridden_through_a_section_that_is_a_value():
    assert "is a value, not a section" in error_for("env.name=x")


def test_spark_and_kafka_property_names_keep_their_dots():
    config = load_config(
        "local",
        ["spark.extra_conf.spark.executor.memory=3g", "kafka.client_properties.client.id=pipeline"],
        environ={},
    )
    assert config.spark.extra_conf["spark.executor.memory"] == "3g"
    assert config.kafka.client_properties["client.id"] == "pipeline"


def test_spark_and_kafka_property_values_are_strings_however_yaml_reads_them(tmp_path):
    # `false` and `500` are YAML's bool and int; Spark and Kafka properties are strings, written as
    # their own settings spell them.
    config = load_config(
        "local",
        [
            "spark.extra_conf.spark.sql.codegen.wholeStage=false",
            "kafka.client_properties.max.poll.records=500",
        ],
        environ={},
    )
    assert config.spark.extra_conf["spark.sql.codegen.wholeStage"] == "false"
    assert config.kafka.client_properties["max.poll.records"] == "500"
    conf_dir = tmp_path / "conf"  # relative paths resolve against its parent, as against the project
    shutil.copytree(DEFAULT_CONF_DIR, conf_dir)
    local = (conf_dir / "local.yaml").read_text()
    assert "  ui_enabled: false\n" in local
    (conf_dir / "local.yaml").write_text(
        local.replace(
            "  ui_enabled: false\n",
            "  ui_enabled: false\n  extra_conf: {spark.sql.codegen.wholeStage: true, spark.ratio: 0.5}\n",
        )
    )
    from_file = load_config("local", environ={}, conf_dir=conf_dir)
    assert from_file.spark.extra_conf == {"spark.sql.codegen.wholeStage": "true", "spark.ratio": "0.5"}


def test_a_property_value_that_is_a_section_is_refused_by_name():
    message = error_for("spark.extra_conf={spark.sql.codegen: {wholeStage: false}}")
    assert "spark.extra_conf.spark.sql.codegen" in message


def test_s3_credentials_in_the_config_are_refused_they_come_from_the_environment():
    message = error_for("spark.extra_conf.spark.hadoop.fs.s3a.secret.key=hunter2")
    assert "spark.hadoop.fs.s3a.secret.key: credentials come only from the environment" in message
    assert "hunter2" not in message


def test_the_file_layer_reaches_s3_where_sparks_s3a_settings_point():
    from stream_pipelines.core.store import s3_options

    s3a = "spark.hadoop.fs.s3a"
    options = s3_options(
        {
            f"{s3a}.endpoint": "minio.internal:9000",
            f"{s3a}.connection.ssl.enabled": "false",
            f"{s3a}.endpoint.region": "eu-west-1",
            f"{s3a}.path.style.access": "true",
        }
    )
    assert options["endpoint_url"] == "http://minio.internal:9000"
    assert options["client_kwargs"] == {"region_name": "eu-west-1"}
    assert options["config_kwargs"] == {"s3": {"addressing_style": "path"}}
    assert s3_options({f"{s3a}.endpoint": "s3.eu-west-1.amazonaws.com"})["endpoint_url"] == (
        "https://s3.eu-west-1.amazonaws.com"
    )


def test_overrides_handed_on_as_environment_variables_give_the_same_config():
    overrides = ["sensors.watermark=10 minutes", "spark.shuffle_partitions=3", "broker.port=19092"]
    variables = override_variables(overrides)
    assert variables["PIPELINE__SENSORS__WATERMARK"] == "10 minutes"
    assert load_config("local", environ=variables) == load_config("local", overrides, environ={})


def test_a_property_name_handed_on_as_an_environment_variable_keeps_its_case():
    # Hadoop's and Spark's names are case-sensitive (fs.defaultFS); a process started by another must
    # read the same key, not a lower-cased one beside the config's own.
    overrides = [
        "spark.extra_conf.spark.hadoop.fs.defaultFS=hdfs://127.0.0.1:9820",
        "kafka.client_properties.metadata.max.age.ms=1000",
    ]
    handed_on = load_config("hdfs", environ=override_variables(overrides))
    assert handed_on == load_config("hdfs", overrides, environ={})
    assert handed_on.spark.extra_conf["spark.hadoop.fs.defaultFS"] == "hdfs://127.0.0.1:9820"
    # A variable written by hand in capitals still names the lower-case property, as before.
    by_hand = load_config("local", environ={"PIPELINE__SPARK__EXTRA_CONF__SPARK__EXECUTOR__MEMORY": "3g"})
    assert by_hand.spark.extra_conf["spark.executor.memory"] == "3g"


def test_the_hdfs_config_is_the_local_one_with_the_labs_layout_on_hdfs():
    local, lab = load_config("local", environ={}), load_config("hdfs", environ={})
    assert lab.env == "hdfs"
    assert lab.spark.extra_conf["spark.hadoop.fs.defaultFS"] == "hdfs://127.0.0.1:8020"
    # The lab writes hdfs:///path; every location handed to Spark or the file layer names the NameNode
    # (Spark's checkpoint manager, over Hadoop's FileContext, refuses an HDFS URI without one).
    assert lab.paths.data_root == "hdfs:///pipeline"
    assert lab.data_path("checkpoints") == "hdfs://127.0.0.1:8020/pipeline/checkpoints"
    assert lab.checkpoint_dir("raw_archive", "archive").startswith("hdfs://127.0.0.1:8020/pipeline/")
    assert lab.data_path("outputs") == "hdfs://127.0.0.1:8020/pipeline/outputs"
    assert (
        lab.project_path(lab.sensors.metadata_path)
        == "hdfs://127.0.0.1:8020/datasets/sensors/sensor_metadata.csv"
    )
    absolute = load_config("hdfs", ["paths.archive=hdfs:///lab/archive"], environ={})
    assert absolute.data_path("archive") == "hdfs://127.0.0.1:8020/lab/archive"
    assert lab.hdfs.manage_local and not local.hdfs.manage_local
    # Everything it does not set is the local default's, section by section.
    assert lab.kafka == local.kafka and lab.supervision == local.supervision
    assert lab.spark.shuffle_partitions == local.spark.shuffle_partitions
    assert lab.sensors.watermark == local.sensors.watermark


def test_host_local_state_stays_on_the_host_when_the_data_root_is_on_hdfs():
    lab = load_config("hdfs", environ={})
    local_root = str(DEFAULT_CONF_DIR.parent / "data" / "hdfs-env")
    for name in ("scratch", "broker", "hdfs"):
        assert (
            lab.data_path(name)
            == f"{local_root}/{dict(scratch='scratch', broker='kafka', hdfs='hdfs')[name]}"
        )
    assert lab.scratch_dir("raw_archive") == f"{local_root}/scratch/raw_archive"
    # Without a local root, those entries follow the data root, as before.
    assert load_config("local", environ={}).local_root() == str(DEFAULT_CONF_DIR.parent / "data")


def test_a_config_extending_another_is_merged_key_by_key_and_a_cycle_is_named(tmp_path: Path):
    conf = tmp_path / "conf"
    shutil.copytree(DEFAULT_CONF_DIR, conf)
    (conf / "staging.yaml").write_text("base: local\nsensors: {watermark: 5 minutes}\n")
    staging = load_config("staging", environ={}, conf_dir=conf)
    assert staging.sensors.watermark == Duration(300)
    assert staging.sensors.window == load_config("local", environ={}).sensors.window
    (conf / "a.yaml").write_text("base: b\n")
    (conf / "b.yaml").write_text("base: a\n")
    assert "a -> b -> a is a cycle" in error_for(env="a", conf_dir=conf)
    (conf / "c.yaml").write_text("base: nowhere\n")
    assert "no config for the base of c.yaml 'nowhere'" in error_for(env="c", conf_dir=conf)


def test_a_local_hdfs_must_be_named_on_loopback():
    message = error_for(
        "spark.extra_conf.spark.hadoop.fs.defaultFS=hdfs://namenode.internal:8020", env="hdfs"
    )
    assert "hdfs.manage_local" in message and "hdfs://127.0.0.1:<port>" in message
    assert "hdfs.manage_local" in error_for("hdfs.manage_local=true")
    localhost = error_for("spark.extra_conf.spark.hadoop.fs.defaultFS=hdfs://localhost:8020", env="hdfs")
    assert "hdfs://127.0.0.1:<port>" in localhost


def test_an_hdfs_path_is_completed_only_from_a_default_fs_that_names_a_namenode():
    unnamed = load_config(
        "local",
        ["paths.data_root=hdfs:///pipeline", "spark.extra_conf.spark.hadoop.fs.defaultFS=hdfs:///"],
        environ={},
    )
    assert unnamed.data_path("archive") == "hdfs:///pipeline/archive"


def test_an_install_without_a_conf_dir_is_told_how_to_name_one(monkeypatch, tmp_path):
    """An installed wheel has no conf/ beside it: with neither PIPELINE_CONF_DIR nor --conf-dir, the error
    says how to name the folder instead of pointing into site-packages."""
    monkeypatch.setattr(config_module, "DEFAULT_CONF_DIR", tmp_path / "site-packages" / "conf")
    with pytest.raises(ConfigError) as refused:
        load_config("local", environ={})
    message = str(refused.value)
    assert "no config folder" in message and "PIPELINE_CONF_DIR" in message and "--conf-dir" in message
    assert "site-packages" not in message
    # A folder that was named but lacks the environment's file is still named in the error.
    named = tmp_path / "conf"
    named.mkdir()
    with pytest.raises(ConfigError, match=f"{named}/local.yaml does not exist"):
        load_config("local", environ={"PIPELINE_CONF_DIR": str(named)})
