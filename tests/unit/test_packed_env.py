"""The packed environment (``launching.packed_env``), built from a small throwaway virtualenv: unpacked
anywhere, its python runs with nothing from the machine but glibc, the Spark jars go to their own
archive, and an archive is named by its content."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from stream_pipelines.launching import elf, packed_env

# Run by the packed python: where everything it found and loaded lies.
REPORT_SCRIPT = """
import bz2, ctypes, hashlib, json, lzma, os, sqlite3, ssl, sys, uuid, zlib
import tinypkg
mapped = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line.split()[-1]})
print(json.dumps({
    "prefix": sys.prefix, "base_prefix": sys.base_prefix, "exec_prefix": sys.exec_prefix,
    "executable": sys.executable, "path": [os.path.abspath(entry) for entry in sys.path],
    "modules": {name: module.__file__ for name, module in sys.modules.items()
                if getattr(module, "__file__", None)},
    "mapped": mapped, "tinypkg": tinypkg.VALUE,
}))
"""


def make_wheel(folder: Path, name: str, files: dict[str, bytes], requires: tuple[str, ...] = ()) -> Path:
    """A pure wheel of ``name`` 1.0 holding ``files``, written as any build backend would."""
    info = f"{name}-1.0.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires
    )
    contents = {
        **files,
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in contents.items()
    ]
    contents[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in contents.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture(scope="module")
def throwaway_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A uv virtualenv on the interpreter this one runs on, with tinypkg (needs tinydep), an unrelated
    package, and a stand-in pyspark whose jars folder holds two small jars."""
    folder = tmp_path_factory.mktemp("throwaway")
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        uv = Path(shutil.which("uv") or "uv")
    venv = folder / "venv"
    subprocess.run([str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    wheels = [
        make_wheel(folder, "tinypkg", {"tinypkg/__init__.py": b"VALUE = 'tiny'\n"}, requires=("tinydep",)),
        make_wheel(folder, "tinydep", {"tinydep/__init__.py": b""}),
        make_wheel(folder, "unrelated", {"unrelated/__init__.py": b""}),
        make_wheel(
            folder,
            "pyspark",
            {
                "pyspark/__init__.py": b"",
                "pyspark/jars/spark-core.jar": b"core classes",
                "pyspark/jars/spark-sql.jar": b"sql classes",
            },
        ),
    ]
    subprocess.run(
        [
            str(uv),
            "pip",
            "install",
            "--quiet",
            "--offline",
            "--python",
            str(venv / "bin" / "python"),
            *map(str, wheels),
        ],
        check=True,
    )
    return venv


@pytest.fixture(scope="module")
def packed(throwaway_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> packed_env.PackedArchive:
    progress: list[str] = []
    archive = packed_env.build_environment_archive(
        tmp_path_factory.mktemp("out"),
        throwaway_venv / "bin" / "python",
        ["tinypkg", "pyspark"],
        progress.append,
    )
    assert any("MB" in line for line in progress), progress
    return archive


@pytest.fixture(scope="module")
def unpacked(packed: packed_env.PackedArchive, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Where the venv was is gone from the picture: another folder, unpacked by tar as YARN does it.
    folder = tmp_path_factory.mktemp("container") / packed_env.ENVIRONMENT_LINK
    folder.mkdir()
    subprocess.run(["tar", "xzf", str(packed.path), "-C", str(folder)], check=True)
    return folder


def run_packed(unpacked: Path, home: Path) -> dict:
    """The report of the packed python, started from its folder with an empty environment but HOME and
    what the archive's Spark settings give every Python of the application."""
    given = [
        f"{key.rsplit('.', 1)[1]}={value}"
        for key, value in packed_env.spark_settings("e", "j", drivers_in_cluster=True).items()
        if key.startswith("spark.executorEnv.")
    ]
    answer = subprocess.run(
        ["env", "-i", f"HOME={home}", *given, "./bin/python", "-c", REPORT_SCRIPT],
        cwd=unpacked,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(answer.stdout)


def test_the_unpacked_python_finds_everything_in_its_own_folder(unpacked: Path, tmp_path: Path):
    # A user site folder that exists, as on a node whose container user has one: it must stay out.
    home = tmp_path / "home"
    (home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages").mkdir(
        parents=True
    )
    report = run_packed(unpacked, home)
    root = unpacked.resolve()

    def inside(path: str) -> bool:
        return Path(path).resolve().is_relative_to(root)

    assert inside(report["prefix"]) and inside(report["base_prefix"]) and inside(report["exec_prefix"])
    assert inside(report["executable"])
    assert [entry for entry in report["path"] if not inside(entry)] == []
    assert [f"{name}: {file}" for name, file in report["modules"].items() if not inside(file)] == []
    assert report["tinypkg"] == "tiny"
    assert inside(report["modules"]["tinypkg"])
    # libpython, OpenSSL, libffi, SQLite and the compression libraries come from the archive: only
    # glibc's own libraries come from the machine.
    from_machine = [path for path in report["mapped"] if not inside(path)]
    assert [path for path in from_machine if Path(path).name not in packed_env.NODE_LIBRARIES] == []
    assert any(Path(path).name.startswith("libpython") for path in report["mapped"] if inside(path))


def test_only_what_the_roots_need_is_packed_and_no_spark_jar(packed: packed_env.PackedArchive):
    with tarfile.open(packed.path) as archive:
        names = archive.getnames()
    site_packages = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
    assert f"{site_packages}/tinypkg/__init__.py" in names
    assert f"{site_packages}/tinydep/__init__.py" in names  # tinypkg's requirement
    assert f"{site_packages}/pyspark/__init__.py" in names
    assert not [name for name in names if "/unrelated" in name or "/pyspark/jars/" in name]
    assert not [name for name in names if "/test/" in name or "/idlelib/" in name or "tkinter" in name]
    assert {"bin/python", "bin/python3"} <= set(names)
    assert packed.required_from_nodes and set(packed.required_from_nodes) <= packed_env.NODE_LIBRARIES


def test_the_packed_binaries_look_for_libraries_beside_themselves(unpacked: Path):
    assert elf.read_dynamic(unpacked / "bin" / "python").search_path == packed_env.EXECUTABLE_SEARCH_PATH
    ssl_module = next((unpacked / "lib").glob("python3.*/lib-dynload/_ssl.*.so"))
    assert elf.read_dynamic(ssl_module).search_path == packed_env.EXTENSION_SEARCH_PATH


def test_an_archive_is_named_by_its_content_and_built_once(
    packed: packed_env.PackedArchive, throwaway_venv: Path
):
    again = packed_env.build_environment_archive(
        packed.path.parent, throwaway_venv / "bin" / "python", ["tinypkg", "pyspark"], lambda line: None
    )
    assert again.path == packed.path and again.reused and not packed.reused
    assert packed.path.name.startswith("python-env-cp3") and packed.path.name.endswith(".tar.gz")
    assert not [path for path in packed.path.parent.iterdir() if path.name.startswith(".")]


def test_the_jars_archive_holds_the_jars_at_its_root_uncompressed(throwaway_venv: Path, tmp_path: Path):
    archive = packed_env.build_jars_archive(tmp_path, throwaway_venv / "bin" / "python", lambda line: None)
    assert archive.path.name.startswith("spark-jars-1.0-") and archive.path.suffix == ".zip"
    with zipfile.ZipFile(archive.path) as jars:
        assert sorted(jars.namelist()) == ["spark-core.jar", "spark-sql.jar"]
        assert {info.compress_type for info in jars.infolist()} == {zipfile.ZIP_STORED}
        assert jars.read("spark-sql.jar") == b"sql classes"


def test_a_missing_requirement_is_named(throwaway_venv: Path, tmp_path: Path):
    with pytest.raises(packed_env.PackError, match="not-installed-anywhere"):
        packed_env.build_environment_archive(
            tmp_path, throwaway_venv / "bin" / "python", ["not-installed-anywhere"], lambda line: None
        )


def test_a_search_path_longer_than_the_old_one_is_refused(unpacked: Path):
    binary = unpacked / "bin" / "python"
    section = elf.read_dynamic(binary)
    with pytest.raises(elf.ElfError, match="longer"):
        elf.retarget(binary.read_bytes(), section, "$ORIGIN/" + "x" * section.search_path_capacity)


def test_the_settings_ship_the_environment_and_the_jars():
    cluster = packed_env.spark_settings("hdfs:///env/e.tar.gz", "hdfs:///env/j.zip", drivers_in_cluster=True)
    assert cluster == {
        "spark.archives": "hdfs:///env/e.tar.gz#environment",
        "spark.pyspark.python": "./environment/bin/python",
        "spark.pyspark.driver.python": "./environment/bin/python",
        "spark.yarn.appMasterEnv.PYSPARK_PYTHON": "./environment/bin/python",
        "spark.yarn.archive": "hdfs:///env/j.zip",
        "spark.executorEnv.PYTHONNOUSERSITE": "1",
        "spark.yarn.appMasterEnv.PYTHONNOUSERSITE": "1",
    }
    client = packed_env.spark_settings("hdfs:///env/e.tar.gz", "hdfs:///env/j.zip", drivers_in_cluster=False)
    assert (
        "spark.pyspark.driver.python" not in client
        and client["spark.pyspark.python"] == "./environment/bin/python"
    )


def test_a_build_cache_keeps_only_the_current_archives(tmp_path: Path):
    names = [
        "stream-pipelines-0.1.0-cp311-aaaa.tar.gz",
        "stream-pipelines-0.1.0-cp311-bbbb.tar.gz",
        "spark-jars-4.1.3-aaaa.zip",
        "spark-jars-4.1.3-bbbb.zip",
        "notes.zip",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    current = [tmp_path / names[1], tmp_path / names[3]]
    removed = packed_env.remove_superseded(tmp_path, current)
    assert [path.name for path in removed] == [names[2], names[0]]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([names[1], names[3], "notes.zip"])
