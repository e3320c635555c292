"""The drivers' and executors' Python and Spark's jars, packed to travel with a YARN application, so that a
NodeManager needs only a JVM (``pipelinectl pack-env``).

Why not venv-pack, conda-pack or PEX: venv-pack leaves the interpreter out (the archive's python is a
link to the build it was made with, which every node must then have at the same path); PEX needs an
interpreter on the node too, and its self-contained form (scie) downloads a python-build-standalone
build from GitHub at build time; conda-pack packs only conda environments, and this one is a pip/uv
virtualenv on a pyenv build. So this module packs what the virtualenv runs on itself:

- the interpreter the venv points at (``sys.base_prefix``): its executable, ``libpython`` and the
  shared libraries its kept extension modules need beyond glibc (OpenSSL, libffi, SQLite, zlib, xz,
  bzip2, libuuid), its standard library without test suites, GUI and build files;
- the venv's site-packages, only the distributions a driver can import: the closure of the
  project's declared requirements and of what a driver is seen to import (``DRIVER_MODULES``), less
  those no driver imports (``LEFT_OUT``: Airflow, Playwright), less pyspark's jars, which travel as
  the second archive (``spark.yarn.archive``), less test suites;
- laid out as a plain (not virtual) environment: ``bin/python`` finds its prefix from its own place
  (the ``lib/python3.X/os.py`` landmark), and every absolute ``RUNPATH`` is rewritten relative to the
  file (``elf.retarget``). Its settings set ``PYTHONNOUSERSITE``: the user's ``~/.local`` site folder
  on a node belongs to whoever runs the containers (``site`` is frozen into a 3.11 interpreter, so the
  packed copy of site.py cannot turn it off).

Both archives are named by a digest of their content, written whole or not at all, and built again
only when that content changes: the name is the version, and an upload to the store is needed once per
name. What the packed files still need from the nodes (glibc, and what manylinux wheels may assume:
libstdc++, libgcc_s) is listed by ``PackedArchive.required_from_nodes``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import Distribution, distributions
from pathlib import Path, PurePosixPath

from stream_pipelines.core.shipped import DISTRIBUTION
from stream_pipelines.launching import elf

Say = Callable[[str], None]

# The name Spark gives the unpacked environment in each container (``spark.archives=<url>#environment``).
ENVIRONMENT_LINK = "environment"
PACKED_PYTHON = f"./{ENVIRONMENT_LINK}/bin/python"
# How the archives this module writes are named (``<label>-<digest>``): the environment's label starts with
# the distribution's name (or python-env), the jars' with spark-jars.
ARCHIVE_PREFIXES = (f"{DISTRIBUTION}-", "python-env-", "spark-jars-")

# Declared requirements that no driver imports; measured by importing DRIVER_MODULES: no ``airflow``
# module is loaded (a pack fails should one ever be). Their requirements stay where something kept
# needs them too.
LEFT_OUT = {
    "apache-airflow": "the supervisor's side; no driver imports airflow",
    "apache-airflow-providers-apache-spark": "the supervisor's side; no driver imports airflow",
    # 165 MB (its Node.js driver). The report's PDF needs Chromium on the node as well, which a
    # NodeManager with only a JVM lacks: reconciliation.pdf then writes the report without the PDF.
    "playwright": "the report's PDF needs Chromium on the node; without it the report says why",
}
# What a driver imports: the spark_apps entry points' modules, and what the project imports lazily in
# them (in a function), whose optional imports count too (great_expectations takes sqlalchemy and
# boto3 when they are there; pyspark psutil). The distributions they load join the declared closure.
DRIVER_MODULES = (
    "stream_pipelines.driver.lifecycle",
    "stream_pipelines.reconciliation.job",
    "stream_pipelines.tables.compaction",
    "pyspark.sql",
    "great_expectations",
    "matplotlib.figure",
    "confluent_kafka.admin",
    "cryptography.x509",
    "fsspec",
    "s3fs",
    "upath",
    "hdfs_native.fsspec",
    "prometheus_client",
    "pyarrow.parquet",
)
# Modules of the project that ship only with the development tooling.
LEFT_OUT_PACKAGE_FOLDERS = ("stream_pipelines/devtools",)
# Under site-packages: Spark's jars travel as the jars archive; test suites are never imported.
LEFT_OUT_SITE_PACKAGES = re.compile(r"^pyspark/jars/|^[^/]+/(.+/)?tests/")

# The standard library's folders no driver needs: test suites, the GUI, the installers and the static
# library and Makefile for building extensions.
LEFT_OUT_STDLIB = re.compile(
    r"^(test|idlelib|tkinter|turtledemo|ensurepip|lib2to3|site-packages|config-[^/]+)/"
    r"|(^|/)(tests?|idle_test)/"
)
# Extension modules for a terminal or a GUI, old lookups and Python's own tests: each would drag in
# system libraries (Tk, ncurses, readline, NIS with Kerberos, gdbm) for nothing a driver does.
LEFT_OUT_EXTENSIONS = re.compile(
    r"^(_tkinter|_curses|_curses_panel|readline|nis|_crypt|_dbm|_gdbm|_test\w*|_ctypes_test|_xx\w*|xx\w*)\."
)
# Optimised bytecode (``-O``, ``-OO``) is never used by a driver.
OPTIMISED_BYTECODE = re.compile(r"\.opt-\d\.pyc$")
# What every Linux node has because its JVM runs on it: glibc's libraries and its loader. These must
# come from the node (a libc that does not match the loader's breaks both).
NODE_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "libutil.so.1",
        "libresolv.so.2",
        "libanl.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
        "linux-vdso.so.1",
    }
)
# The interpreter finds its libraries here: ``bin/python`` -> ``lib/``; an extension module in
# ``lib/python3.X/lib-dynload`` -> ``lib/``; libpython itself lies in ``lib/``.
EXECUTABLE_SEARCH_PATH = "$ORIGIN/../lib"
EXTENSION_SEARCH_PATH = "$ORIGIN/../.."
LIBRARY_SEARCH_PATH = "$ORIGIN"
# Fast over small: the archive is built once per version and uploaded once, and a NodeManager unpacks
# either about as fast (DEFLATE decodes at the same pace whatever the level). On 338 MB of
# site-packages, level 1 took 5.0 s for 117 MB, level 6 13.6 s for 103 MB (this machine, 2026-11-28).
GZIP_LEVEL = 1
DIGEST_LENGTH = 16
PROGRESS_STEP = 0.1
# What the environment's python says about itself (run with -s: no user site folder).
PROBE = r"""
import importlib.metadata, importlib.util, json, os, platform, sys, sysconfig
editable = {}
for dist in importlib.metadata.distributions():
    url = dist.read_text("direct_url.json")
    if url and json.loads(url).get("dir_info", {}).get("editable"):
        names = (dist.read_text("top_level.txt") or dist.metadata["Name"].replace("-", "_")).split()
        found = [importlib.util.find_spec(name) for name in names]
        editable[dist.metadata["Name"]] = [
            os.path.dirname(spec.origin) if spec.submodule_search_locations else spec.origin
            for spec in found if spec is not None and spec.origin
        ]
print(json.dumps({
    "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
    "executable": os.path.realpath(sys.executable),
    "stdlib": sysconfig.get_path("stdlib"),
    "site_packages": sysconfig.get_path("purelib"),
    "editable": editable,
    "markers": {
        "implementation_name": sys.implementation.name,
        "implementation_version": platform.python_version(),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "sys_platform": sys.platform,
    },
}))
"""


# Imports ``sys.argv[1:]`` and prints the distributions of every module then loaded.
IMPORT_PROBE = r"""
import importlib, importlib.metadata, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
owners = importlib.metadata.packages_distributions()
print(json.dumps(sorted({d for m in list(sys.modules) for d in owners.get(m.split(".")[0], [])})))
"""


class PackError(RuntimeError):
    """Why an archive could not be built; says what to do."""


@dataclass(frozen=True)
class Member:
    """One file of an archive: its path there, where its bytes come from, and how they are changed."""

    name: str
    source: Path
    executable: bool = False
    rewrite: Callable[[bytes], bytes] | None = field(default=None, compare=False)

    def content(self) -> bytes:
        data = self.source.read_bytes()
        return self.rewrite(data) if self.rewrite else data

    @property
    def mtime(self) -> int:
        # Kept, not zeroed: a .pyc is valid while its source's mtime matches the one it recorded.
        return int(self.source.stat().st_mtime)


@dataclass(frozen=True)
class PackedArchive:
    path: Path
    size: int
    files: int
    seconds: float
    reused: bool
    required_from_nodes: tuple[str, ...] = ()

    def describe(self) -> str:
        how = "already built" if self.reused else f"built in {self.seconds:.1f} s"
        return f"{self.path} ({self.size / 1e6:.0f} MB, {self.files} files, {how})"


@dataclass(frozen=True)
class Environment:
    """The environment a python runs in, as its probe reported it."""

    python: Path
    version: str
    base_executable: Path
    stdlib: Path
    site_packages: Path
    editable: dict[str, list[str]]
    markers: dict[str, str]

    @property
    def library_folder(self) -> str:
        return f"lib/python{self.version}"


def probe(python: Path) -> Environment:
    try:
        answer = subprocess.run(
            [str(python), "-s", "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", "") or error
        raise PackError(f"could not ask {python} about its environment: {detail}") from None
    found = json.loads(answer.stdout)
    return Environment(
        python=python,
        version=found["version"],
        base_executable=Path(found["executable"]),
        stdlib=Path(found["stdlib"]),
        site_packages=Path(found["site_packages"]),
        editable=found["editable"],
        markers=found["markers"],
    )


# --------------------------------------------------------------------------- the Python environment


def build_environment_archive(
    out_dir: Path,
    python: Path | None = None,
    roots: Iterable[str] | None = None,
    say: Say = print,
) -> PackedArchive:
    """The environment of ``python`` (default: this one) packed into ``out_dir`` as
    ``<label>-<digest>.tar.gz``: the interpreter, its standard library and the distributions ``roots``
    need (default: the project's requirements but ``LEFT_OUT``, and the project)."""
    started = time.monotonic()
    environment = probe(python or Path(sys.executable))
    if roots is None:
        # The project itself, but not all it declares: its requirements are the roots, less LEFT_OUT,
        # with what a driver was seen to import.
        say(f"importing what a driver imports, in {environment.python}")
        root_names = sorted(
            {*project_roots(environment), *imported_distributions(environment, DRIVER_MODULES)}
        )
        chosen = distribution_closure(environment, root_names)
        chosen.update(distribution_closure(environment, [DISTRIBUTION], follow=False))
    else:
        root_names = list(roots)
        chosen = distribution_closure(environment, root_names)
    say(f"python {environment.version} from {environment.base_executable}; {len(chosen)} distributions")
    members = [
        *interpreter_members(environment),
        *standard_library_members(environment),
        *site_packages_members(environment, chosen),
    ]
    label = f"{_label(environment, chosen)}-cp{environment.version.replace('.', '')}"
    archive = _write_once(out_dir, label, ".tar.gz", members, _write_tar, say)
    required = required_from_nodes(members)
    return PackedArchive(
        archive.path, archive.size, len(members), time.monotonic() - started, archive.reused, required
    )


def project_roots(environment: Environment) -> list[str]:
    """The project's declared requirements, but those no driver imports."""
    from packaging.requirements import Requirement  # deferred: only a pack evaluates requirements

    found = {
        _normalized(dist.metadata["Name"]): dist
        for dist in distributions(path=[str(environment.site_packages)])
    }
    project = found.get(_normalized(DISTRIBUTION))
    if project is None:
        raise PackError(f"{DISTRIBUTION} is not installed in {environment.python}'s environment")
    left_out = {_normalized(name) for name in LEFT_OUT}
    requirements = [Requirement(text) for text in project.requires or []]
    return [str(r) for r in requirements if _normalized(r.name) not in left_out]


def imported_distributions(environment: Environment, modules: Iterable[str]) -> list[str]:
    """The distributions whose modules are loaded once ``modules`` are imported in that environment,
    but the project itself (whose declared requirements are not all a driver's)."""
    try:
        answer = subprocess.run(
            [str(environment.python), "-s", "-c", IMPORT_PROBE, *modules],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", "") or error
        raise PackError(f"importing a driver's modules in {environment.python} failed: {detail}") from None
    found = [name for name in json.loads(answer.stdout) if _normalized(name) != _normalized(DISTRIBUTION)]
    left_out = sorted(name for name in found if _normalized(name) in {_normalized(n) for n in LEFT_OUT})
    if left_out:
        raise PackError(f"a driver imports {left_out}, which the pack leaves out (packed_env.LEFT_OUT)")
    return found


def distribution_closure(
    environment: Environment, roots: Iterable[str], *, follow: bool = True
) -> dict[str, Distribution]:
    """Every installed distribution that ``roots`` (requirement strings) need, through their
    requirements (markers and extras evaluated for that environment), by normalized name; with
    ``follow=False``, only the roots themselves."""
    from packaging.requirements import Requirement  # deferred: only a pack evaluates requirements

    installed = {
        _normalized(dist.metadata["Name"]): dist
        for dist in distributions(path=[str(environment.site_packages)])
    }
    wanted: dict[tuple[str, frozenset[str]], Distribution] = {}
    pending = [(Requirement(text), frozenset({""})) for text in roots]
    missing: list[str] = []
    while pending:
        requirement, extras_of_parent = pending.pop()
        marker = requirement.marker
        if marker and not any(marker.evaluate({**environment.markers, "extra": e}) for e in extras_of_parent):
            continue
        name = _normalized(requirement.name)
        dist = installed.get(name)
        if dist is None:
            missing.append(str(requirement))
            continue
        extras = frozenset({"", *requirement.extras})
        key = (name, extras)
        if key in wanted:
            continue
        wanted[key] = dist
        if follow:
            pending.extend((Requirement(text), extras) for text in dist.requires or [])
    if missing:
        raise PackError(
            f"required but not installed in {environment.python}'s environment: {sorted(missing)}"
        )
    return {name: dist for (name, _), dist in wanted.items()}


def interpreter_members(environment: Environment) -> list[Member]:
    """``bin/python`` (and ``python3``, ``python3.X``: plain copies, no links to survive an unpacker)
    and the shared libraries it and its kept extension modules need beyond glibc, in ``lib/``."""
    executable = environment.base_executable
    binary = _retargeted(executable, EXECUTABLE_SEARCH_PATH)
    names = ["python", "python3", f"python{environment.version}"]
    members = [Member(f"bin/{name}", executable, executable=True, rewrite=binary) for name in names]
    extensions = environment.stdlib / "lib-dynload"
    needing = [executable, *(path for path in sorted(extensions.glob("*.so")) if _kept_extension(path))]
    for soname, library in sorted(_libraries_beyond_glibc(needing).items()):
        members.append(
            Member(
                f"lib/{soname}", library, executable=True, rewrite=_retargeted(library, LIBRARY_SEARCH_PATH)
            )
        )
    return members


def standard_library_members(environment: Environment) -> Iterator[Member]:
    folder = environment.library_folder
    for path in _files_under(environment.stdlib):
        relative = path.relative_to(environment.stdlib).as_posix()
        if LEFT_OUT_STDLIB.search(relative) or OPTIMISED_BYTECODE.search(relative):
            continue
        if relative.startswith("lib-dynload/"):
            if _kept_extension(path):
                yield Member(f"{folder}/{relative}", path, True, _retargeted(path, EXTENSION_SEARCH_PATH))
        else:
            yield Member(f"{folder}/{relative}", path, executable=os.access(path, os.X_OK))


def site_packages_members(environment: Environment, chosen: dict[str, Distribution]) -> Iterator[Member]:
    """The files of the ``chosen`` distributions; an editable one (the project in a checkout) from its
    folders."""
    target = f"{environment.library_folder}/site-packages"
    root = environment.site_packages
    seen: set[str] = set()
    for _, dist in sorted(chosen.items()):
        editable_folders = environment.editable.get(dist.metadata["Name"])
        for relative, path in _distribution_files(root, dist, editable_folders):
            if (
                relative in seen
                or LEFT_OUT_SITE_PACKAGES.search(relative)
                or OPTIMISED_BYTECODE.search(relative)
            ):
                continue
            seen.add(relative)
            yield Member(f"{target}/{relative}", path, executable=os.access(path, os.X_OK))


def required_from_nodes(members: Iterable[Member]) -> tuple[str, ...]:
    """The libraries the packed ELF files need that the archive does not hold: what a node must have."""
    members = list(members)
    shipped = {PurePosixPath(member.name).name for member in members}
    needed: set[str] = set()
    for member in members:
        if member.name.startswith("bin/") or ".so" in PurePosixPath(member.name).name:
            section = elf.read_dynamic(member.source)
            if section is not None:
                needed.update(section.needed)
    return tuple(sorted(needed - shipped - {"linux-vdso.so.1"}))


# --------------------------------------------------------------------------- Spark's jars


def build_jars_archive(out_dir: Path, python: Path | None = None, say: Say = print) -> PackedArchive:
    """pyspark's jars, at the root of an uncompressed zip (jars are compressed already), for
    ``spark.yarn.archive``: YARN caches it per node and spark-submit uploads no jar of Spark's own."""
    started = time.monotonic()
    environment = probe(python or Path(sys.executable))
    jars_folder = environment.site_packages / "pyspark" / "jars"
    jars = sorted(jars_folder.glob("*.jar"))
    if not jars:
        raise PackError(
            f"no jars in {jars_folder}: is pyspark installed in {environment.python}'s environment?"
        )
    version = _installed_version(environment, "pyspark")
    members = [Member(jar.name, jar) for jar in jars]
    archive = _write_once(out_dir, f"spark-jars-{version}", ".zip", members, _write_zip, say)
    return PackedArchive(archive.path, archive.size, len(members), time.monotonic() - started, archive.reused)


# --------------------------------------------------------------------------- the settings


def spark_settings(
    environment_url: str | None, jars_url: str | None, *, drivers_in_cluster: bool
) -> dict[str, str]:
    """The Spark settings that run a YARN application on the two archives (either may be None).

    A driver in the cluster (deploy mode cluster) runs the packed python too; a client-mode driver runs
    on the launcher, in its own environment, and only the executors use the archive."""
    settings = {"spark.yarn.archive": jars_url} if jars_url else {}
    if environment_url is None:
        return settings
    settings |= {
        "spark.archives": f"{environment_url}#{ENVIRONMENT_LINK}",
        "spark.pyspark.python": PACKED_PYTHON,
        # The Python workers: nothing from the container user's ~/.local.
        "spark.executorEnv.PYTHONNOUSERSITE": "1",
    }
    if drivers_in_cluster:
        settings["spark.pyspark.driver.python"] = PACKED_PYTHON
        # Read by Spark's ApplicationMaster when spark.pyspark.* are not set; says the same.
        settings["spark.yarn.appMasterEnv.PYSPARK_PYTHON"] = PACKED_PYTHON
        settings["spark.yarn.appMasterEnv.PYTHONNOUSERSITE"] = "1"
    return settings


def remove_superseded(folder: Path, current: Iterable[Path]) -> list[Path]:
    """Remove the archives an earlier pack left in ``folder`` (a build cache for a store: each version is
    about 650 MB), keeping ``current``; the paths removed."""
    kept = {path.name for path in current}
    removed = []
    for path in sorted(folder.glob("*")):
        ours = path.name.endswith((".tar.gz", ".zip")) and path.name.startswith(ARCHIVE_PREFIXES)
        if ours and path.is_file() and path.name not in kept:
            path.unlink()
            removed.append(path)
    return removed


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Written:
    path: Path
    size: int
    reused: bool


def _write_once(
    out_dir: Path,
    label: str,
    suffix: str,
    members: list[Member],
    write: Callable[[Path, list[Member], _Progress], None],
    say: Say,
) -> _Written:
    """The archive of ``members`` named ``<label>-<digest><suffix>`` in ``out_dir``: reused when one by
    that name exists, else written to a temporary name and renamed, so a reader never sees half of one."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)  # before the hashing: a wrong folder fails at once
    except OSError as error:
        raise PackError(f"cannot create {out_dir}: {error}") from None
    members = sorted(members, key=lambda member: member.name)
    say(f"{label}: hashing {len(members)} files")
    digest = _digest(members)
    target = out_dir / f"{label}-{digest}{suffix}"
    if target.is_file():
        return _Written(target, target.stat().st_size, reused=True)
    partial = out_dir / f".{target.name}.{os.getpid()}.partial"
    try:
        write(partial, members, _Progress(target.name, members, say))
        os.replace(partial, target)
    except OSError as error:
        raise PackError(f"could not write {target}: {error}") from None
    finally:
        partial.unlink(missing_ok=True)
    return _Written(target, target.stat().st_size, reused=False)


def _digest(members: list[Member]) -> str:
    digest = hashlib.sha256()
    for member in members:
        digest.update(f"{member.name}\0{member.executable}\0{member.mtime}\0".encode())
        digest.update(hashlib.sha256(member.content()).digest())
    return digest.hexdigest()[:DIGEST_LENGTH]


def _write_tar(path: Path, members: list[Member], progress: _Progress) -> None:
    """A gzipped tar that depends only on the members: no owner, no timestamp in the gzip header."""
    with (
        path.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for member in members:
            data = member.content()
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            info.mtime = member.mtime
            info.mode = 0o755 if member.executable else 0o644
            archive.addfile(info, io.BytesIO(data))
            progress.advance(len(data))


def _write_zip(path: Path, members: list[Member], progress: _Progress) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for member in members:
            info = zipfile.ZipInfo(member.name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            data = member.content()
            archive.writestr(info, data)
            progress.advance(len(data))


class _Progress:
    """One line per tenth of the bytes written, with the time so far: a pack takes tens of seconds."""

    def __init__(self, name: str, members: list[Member], say: Say) -> None:
        self.name = name
        self.total = sum(member.source.stat().st_size for member in members) or 1
        self.done = 0
        self.next_report = PROGRESS_STEP
        self.started = time.monotonic()
        self.say = say

    def advance(self, size: int) -> None:
        self.done += size
        if self.done / self.total >= self.next_report:
            self.say(
                f"{self.name}: {self.done / 1e6:.0f} of {self.total / 1e6:.0f} MB "
                f"({time.monotonic() - self.started:.0f} s)"
            )
            while self.next_report <= self.done / self.total:
                self.next_report += PROGRESS_STEP


def _distribution_files(
    site_packages: Path, dist: Distribution, editable_folders: list[str] | None
) -> Iterator[tuple[str, Path]]:
    """(path under site-packages, file) of a distribution: its RECORD's files inside site-packages
    (scripts in ``bin/`` point at the build's python, and are left out); for an editable install, its
    metadata and the files of the folders it maps in, without bytecode (the checkout's, which changes
    with every run there, would change the archive's digest)."""
    for file in dist.files or []:
        path = Path(os.path.normpath(site_packages / file))
        if not path.is_relative_to(site_packages) or not path.is_file():
            continue
        relative = path.relative_to(site_packages).as_posix()
        if editable_folders is not None and not relative.split("/")[0].endswith(".dist-info"):
            continue  # the editable install's finder and .pth point into the checkout
        yield relative, path
    for folder in editable_folders or []:
        source = Path(folder)
        for path in _files_under(source):
            relative = f"{source.name}/{path.relative_to(source).as_posix()}"
            if "__pycache__" in relative or relative.startswith(LEFT_OUT_PACKAGE_FOLDERS):
                continue
            yield relative, path


def _files_under(folder: Path) -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(folder):
        subdirectories.sort()
        for name in sorted(files):
            path = Path(directory, name)
            if path.is_file():
                yield path


def _kept_extension(path: Path) -> bool:
    return not LEFT_OUT_EXTENSIONS.match(path.name)


def _libraries_beyond_glibc(files: Iterable[Path]) -> dict[str, Path]:
    """soname -> file of every library ``files`` load (directly or not) but glibc's, as the loader
    resolves them here (``ldd``)."""
    found: dict[str, Path] = {}
    for file in files:
        try:
            listing = subprocess.run(
                ["ldd", str(file)], capture_output=True, text=True, check=True, timeout=60
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise PackError(f"ldd {file} failed ({error}); packing needs glibc's ldd") from None
        for line in listing.stdout.splitlines():
            soname, arrow, rest = line.strip().partition(" => ")
            if not arrow or soname in NODE_LIBRARIES:
                continue
            resolved = rest.split(" (")[0].strip()
            if resolved == "not found":
                raise PackError(f"{file} needs {soname}, which the loader does not find on this machine")
            found.setdefault(soname, Path(os.path.realpath(resolved)))
    return found


def _retargeted(path: Path, search_path: str) -> Callable[[bytes], bytes] | None:
    """The rewrite that points ``path``'s RUNPATH at ``search_path``; None when it has none."""
    section = elf.read_dynamic(path)
    if section is None or section.search_path is None:
        return None

    def rewrite(data: bytes) -> bytes:
        return elf.retarget(data, section, search_path)

    return rewrite


def _installed_version(environment: Environment, name: str) -> str:
    for dist in distributions(path=[str(environment.site_packages)]):
        if _normalized(dist.metadata["Name"]) == _normalized(name):
            return dist.version
    raise PackError(f"{name} is not installed in {environment.python}'s environment")


def _label(environment: Environment, chosen: dict[str, Distribution]) -> str:
    if _normalized(DISTRIBUTION) in chosen:
        return f"{DISTRIBUTION}-{_installed_version(environment, DISTRIBUTION)}"
    return "python-env"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
