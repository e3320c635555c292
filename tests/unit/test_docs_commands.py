"""Every `make` and `pipelinectl` command in README.md and docs/ runs as written.

Where commands are read:

- code blocks marked as shell (```bash, sh, shell, console): every line, a line ending in ``\\`` joined
  with the next; the other blocks are diagrams, config or output;
- code spans in running text (a span may break across lines, as Markdown allows).

A command is what follows optional ``VAR=value`` assignments: ``make ...``, ``pipelinectl ...`` or
``.venv/bin/pipelinectl ...``; ``&&``, ``||``, ``;``, ``|`` and a trailing ``&`` separate commands, ``#``
starts a comment. A word ``a|b|c`` gives one command per alternative (``broker start|stop|status``),
``[--dry-run]`` is read as ``--dry-run``, and the placeholders of ``PLACEHOLDERS`` are replaced by real
values (an app of the registry for ``APP``), so that the rest of the line is still checked.

What is checked, without running anything:

- ``make``: each target is a target of the Makefile (``bench-*`` must match one); each ``VAR=value``,
  on make's command line or before it, is a variable the Makefile reads, or one the project reads from
  the environment that make hands to its recipes (``PIPELINE_ENV``, ``PIPELINE__...`` overrides); make
  gets no option of ours (a benchmark's or the chaos run's flag goes in ``BENCH_ARGS``/``CHAOS_ARGS``);
  and the value of a variable the recipe hands to a module (``python -m MODULE $(VAR)``) parses with
  that module's own argument parser.
- ``pipelinectl``: the words parse with the real CLI's parser (``stream_pipelines.cli``, the developer
  commands of ``stream_pipelines.devtools`` included). In running text a span may name a command alone
  (`pipelinectl reconcile`), or name it with some of its options and leave out its positional
  arguments (`pipelinectl checkpoint reset --from time`): those are filled with their first valid
  value, and the rest must parse.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import importlib
import io
import itertools
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from stream_pipelines import cli
from stream_pipelines.core.config import ENV_VARIABLE, OVERRIDE_PREFIX, PROJECT_ROOT
from stream_pipelines.core.registry import APP_NAMES

DOCUMENTS = sorted([PROJECT_ROOT / "README.md", *(PROJECT_ROOT / "docs").rglob("*.md")])
MAKEFILE = PROJECT_ROOT / "Makefile"

SHELL_BLOCKS = {"bash", "sh", "shell", "console"}
# Placeholders the docs use in commands, and the real value each is checked with. A placeholder in
# angle brackets is replaced wherever it stands (inside a URL too); the others only as whole words.
PLACEHOLDERS = {
    "APP": APP_NAMES[0],
    "<app>": APP_NAMES[0],
    "ACTION": "stop",
    "D": "2026-11-23",
    "<day>": "2026-11-23",
    "FILE": "targets.json",
    "SECONDS": "15",
    "N": "2",
    "<port>": "8020",
}
# Environment variables the project reads that make passes on to its recipes.
ENVIRONMENT_PREFIXES = (OVERRIDE_PREFIX,)
ENVIRONMENT_VARIABLES = {ENV_VARIABLE}

_FENCE = re.compile(r"^ {0,3}(```+|~~~+)\s*([\w+-]*)")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_SEPARATORS = {"&&", "||", ";", "|", "&"}
_PROGRAMS = {"make": "make", "pipelinectl": "pipelinectl", ".venv/bin/pipelinectl": "pipelinectl"}


@dataclass(frozen=True)
class Command:
    document: Path
    line: int
    text: str
    in_prose: bool

    def where(self, root: Path = PROJECT_ROOT) -> str:
        return f"{self.document.relative_to(root)}:{self.line}: {self.text}"


# --------------------------------------------------------------------------- reading the docs


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the shell code blocks, continuation lines joined."""
    found, fence, language, pending = [], None, "", None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is None:
            if opening:
                fence, language = opening.group(1), opening.group(2).lower()
            continue
        if line.strip().startswith(fence[:3]) and not line.strip()[len(fence) :].strip():
            fence, pending = None, None
            continue
        if language not in SHELL_BLOCKS:
            continue
        line = re.sub(r"^\s*\$ ", "", line)
        if pending is not None:
            start, before = pending
            line, number = f"{before} {line.strip()}", start
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1])
            continue
        pending = None
        found.append((number, line))
    return found


def prose_spans(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the code spans outside code blocks; a span may break across lines."""
    lines, fence = text.splitlines(), None
    paragraphs: list[list[tuple[int, str]]] = [[]]
    for number, line in enumerate(lines, start=1):
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
            paragraphs.append([])
        elif fence is not None:
            if line.strip().startswith(fence[:3]):
                fence = None
        elif not line.strip() or line.lstrip().startswith("|"):
            # A table row is a paragraph of its own.
            paragraphs.append([(number, line)] if line.strip() else [])
            paragraphs.append([])
        else:
            paragraphs[-1].append((number, line))
    found = []
    for paragraph in paragraphs:
        if not paragraph:
            continue
        joined, starts = "", []
        for number, line in paragraph:
            starts.append((len(joined), number))
            joined += line + "\n"
        for match in _CODE_SPAN.finditer(joined):
            number = max(line for offset, line in starts if offset <= match.start(2))
            found.append((number, " ".join(match.group(2).split())))
    return found


def split_commands(line: str) -> list[list[str]] | None:
    """The words of each command on a shell line (comments dropped), or None when the shell could not
    split it (an unbalanced quote)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    commands, current = [], []
    for word in words:
        if word in _SEPARATORS:
            commands.append(current)
            current = []
        else:
            current.append(word)
    commands.append(current)
    return [command for command in commands if command]


def program(words: list[str]) -> tuple[str | None, list[str], list[str]]:
    """(make or pipelinectl or None, the assignments before it, the words after it)."""
    assignments = list(itertools.takewhile(_ASSIGNMENT.match, words))
    rest = words[len(assignments) :]
    if not rest or rest[0] not in _PROGRAMS:
        return None, assignments, rest
    return _PROGRAMS[rest[0]], assignments, rest[1:]


def commands_in(document: Path) -> list[Command]:
    """Every make and pipelinectl command of a page, one per alternative of its `a|b` words."""
    text = document.read_text()
    sources = [(number, line, False) for number, line in shell_lines(text)]
    sources += [(number, span, True) for number, span in prose_spans(text)]
    found = []
    for number, line, in_prose in sorted(sources, key=lambda source: source[0]):
        commands = split_commands(line)
        if commands is None:
            if program(line.split())[0] is not None:
                found.append(Command(document, number, line, in_prose))
            continue
        for words in commands:
            if program(words)[0] is None:
                continue
            for alternative in alternatives(words):
                found.append(Command(document, number, shlex.join(alternative), in_prose))
    return found


def alternatives(words: list[str]) -> list[list[str]]:
    """One list of words per choice of each ``a|b`` word; ``[x]`` read as ``x``."""
    options, optional = [], False
    for word in words:
        # [--dry-run] or [--every SECONDS]: an optional group, read as given.
        if word.startswith("[") and not optional:
            word, optional = word[1:], True
        if optional and word.endswith("]"):
            word, optional = word[:-1], False
        assignment = _ASSIGNMENT.match(word)
        if assignment and "|" in assignment.group(2):
            # CHAOS_ARGS="--store hdfs|s3": the alternatives are inside the value.
            name, value = assignment.groups()
            options.append([f"{name}={shlex.join(choice)}" for choice in alternatives(shlex.split(value))])
        elif "|" in word.strip("|"):
            options.append(word.split("|"))
        else:
            options.append([word])
    return [list(choice) for choice in itertools.product(*options)]


def substitute(words: list[str]) -> list[str]:
    """The words with each placeholder replaced by its real value."""
    replaced = []
    for word in words:
        word = PLACEHOLDERS.get(word, word)
        for placeholder, value in PLACEHOLDERS.items():
            if placeholder.startswith("<"):
                word = word.replace(placeholder, value)
        replaced.append(word)
    return replaced


# --------------------------------------------------------------------------- make


@cache
def makefile() -> tuple[dict[str, str], set[str]]:
    """(each target and its recipe, every variable the Makefile reads)."""
    recipes: dict[str, str] = {}
    target = None
    text = MAKEFILE.read_text()
    for line in text.splitlines():
        header = re.match(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", line)
        if header and not header.group(1).startswith("."):
            target = header.group(1)
            recipes[target] = ""
        elif target and line.startswith("\t"):
            recipes[target] += line + "\n"
        elif line.strip() and not line.startswith("#"):
            target = None
    variables = set(re.findall(r"(?<!\$)\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]", text))
    return recipes, variables


def module_parse(module_name: str):
    """How the module a recipe runs parses its command line: ``build_parser().parse_args``, or its own
    ``parse_args(argv)``; neither runs anything."""
    for name in (module_name, f"{module_name}.__main__"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if hasattr(module, "build_parser"):
            return module.build_parser().parse_args
        if hasattr(module, "parse_args"):
            return module.parse_args
    raise LookupError(f"{module_name} has neither build_parser() nor parse_args(argv)")


def parse_quietly(parse, words: list[str]) -> str | None:
    """None when ``parse(words)`` accepts them, else argparse's complaint."""
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            parse(words)
        except SystemExit as exit:
            if exit.code not in (0, None):
                complaint = errors.getvalue().strip().splitlines()
                return complaint[-1] if complaint else f"exit {exit.code}"
    return None


def make_problems(assignments: list[str], words: list[str]) -> list[str]:
    recipes, variables = makefile()
    problems, targets, settings = [], [], dict(_ASSIGNMENT.match(word).groups() for word in assignments)
    for word in words:
        if assignment := _ASSIGNMENT.match(word):
            settings[assignment.group(1)] = assignment.group(2)
        elif word.startswith("-"):
            problems.append(f"make takes no option {word!r}: a target's own flags go in its *_ARGS variable")
            break  # what follows is that option's, not make's
        else:
            targets.append(word)
    for target in targets:
        if not fnmatch.filter(recipes, target):
            problems.append(f"no target {target!r} in the Makefile")
    for name, value in settings.items():
        if name in variables:
            problems.extend(variable_problems(name, value, [t for t in targets if t in recipes]))
        elif name not in ENVIRONMENT_VARIABLES and not name.startswith(ENVIRONMENT_PREFIXES):
            problems.append(f"the Makefile reads no variable {name}, nor does the project read it")
    return problems


def variable_problems(name: str, value: str, targets: list[str]) -> list[str]:
    """What the module a target hands ``$(name)`` to says about ``value``."""
    recipes, _ = makefile()
    problems = []
    for target in targets:
        handed = re.search(rf"-m\s+([\w.]+)\s+\$\({name}\)", recipes[target])
        if not handed:
            if f"$({name})" not in recipes[target]:
                problems.append(f"make {target} does not use {name}")
            continue
        complaint = parse_quietly(module_parse(handed.group(1)), substitute(shlex.split(value)))
        if complaint:
            problems.append(f"{name}={value!r}: {handed.group(1)} says: {complaint}")
    return problems


# --------------------------------------------------------------------------- pipelinectl


@cache
def pipelinectl_parser() -> argparse.ArgumentParser:
    return cli._build_parser()


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(
        action.choices for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )


def fill_positionals(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """A span in running text that leaves out positional arguments, with each filled by its first choice."""
    sub = subcommands(parser).get(words[0]) if words else None
    if sub is None:
        return words
    given = list(itertools.takewhile(lambda word: not word.startswith("-"), words[1:]))
    positionals = [action for action in sub._actions if not action.option_strings]
    missing = positionals[len(given) :]
    if any(not action.choices for action in missing):
        return words
    filled = [next(iter(action.choices)) for action in missing]
    return [words[0], *given, *filled, *words[1 + len(given) :]]


def pipelinectl_problems(words: list[str], in_prose: bool) -> list[str]:
    parser = pipelinectl_parser()
    if in_prose and len(words) == 1 and not words[0].startswith("-"):
        return [] if words[0] in subcommands(parser) else [f"pipelinectl has no command {words[0]!r}"]
    if in_prose:
        words = fill_positionals(parser, words)
    complaint = parse_quietly(parser.parse_args, words)
    return [f"pipelinectl says: {complaint}"] if complaint else []


# --------------------------------------------------------------------------- the check


def problems_of(command: Command) -> list[str]:
    commands = split_commands(command.text)
    if commands is None:
        return ["the shell cannot split it: a quote is not closed"]
    for words in commands:
        name, assignments, rest = program(words)
        rest = substitute(rest)
        if name == "make":
            return make_problems(assignments, rest)
        if name == "pipelinectl":
            return pipelinectl_problems(rest, command.in_prose)
    return []


def broken_commands(document: Path, root: Path = PROJECT_ROOT) -> list[str]:
    """Each command of ``document`` that would not run, as ``file:line: command: why``."""
    return [
        f"{command.where(root)}: {problem}"
        for command in commands_in(document)
        for problem in problems_of(command)
    ]


def test_the_commands_are_found():
    commands = [command for document in DOCUMENTS for command in commands_in(document)]
    texts = {command.text for command in commands}
    assert sum(text.startswith("make ") for text in texts) > 30, "the reader found almost no make commands"
    assert sum(text.startswith(("pipelinectl ", ".venv/bin/pipelinectl ")) for text in texts) > 20
    assert {"make demo", "make test", ".venv/bin/pipelinectl broker start"} <= texts


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(PROJECT_ROOT)))
def test_every_command_in_the_docs_runs_as_written(document: Path):
    assert broken_commands(document) == []


def test_a_missing_target_a_wrong_flag_and_a_stray_variable_are_found(tmp_path: Path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "# Page\n\n"
        "Run `make demo`, then `make no-such-target`; `make chaos --store hdfs` is make's flag, not\n"
        'the chaos run\'s, and `make chaos CHAOS_ARGS="--no-such-flag"` is not a flag of it either.\n'
        "`make demo NO_SUCH_VARIABLE=1`, `make demo PIPELINE_ENV=hdfs`, `make bench-*`.\n\n"
        "```bash\n"
        "pipelinectl run APP --trigger available-now   # fine\n"
        "pipelinectl run no_such_app\n"
        "pipelinectl checkpoint reset APP --from yesterday \\\n"
        "  --confirm APP\n"
        'make bench-stack BENCH_ARGS="--kills 1 --settle-seconds 600"\n'
        "```\n\n"
        "```\n"
        "pipelinectl diagrams --> are not read\n"
        "```\n\n"
        "`pipelinectl reconcile` names a command, `pipelinectl stop` leaves out its app, and so does\n"
        "`pipelinectl checkpoint reset --from time`; `pipelinectl no-such-command` does not exist.\n"
        "A span may break across lines: `make down\n"
        "NO_SUCH_ENV=yarn`.\n\n"
        "| command | what |\n"
        "| --- | --- |\n"
        "| `pipelinectl broker start|stop|restart` | a table cell, one command per alternative |\n"
        '\n`pipelinectl control APP pause --reason "unclosed`\n'
    )
    problems = broken_commands(page, root=tmp_path)
    assert [problem.split(": ", 2)[0] for problem in problems] == [
        "docs/page.md:3",
        "docs/page.md:3",
        "docs/page.md:4",
        "docs/page.md:5",
        "docs/page.md:9",
        "docs/page.md:10",
        "docs/page.md:20",
        "docs/page.md:21",
        "docs/page.md:26",
        "docs/page.md:28",
    ], "\n".join(problems)
    assert "no target 'no-such-target'" in problems[0]
    assert "make takes no option '--store'" in problems[1]
    assert "--no-such-flag" in problems[2]
    assert "NO_SUCH_VARIABLE" in problems[3]
    assert "no_such_app" in problems[4]
    assert "yesterday" in problems[5]
    assert "no-such-command" in problems[6]
    assert "make down NO_SUCH_ENV=yarn" in problems[7]
    assert "broker restart" in problems[8]
    assert "a quote is not closed" in problems[9]
