"""The ``shardscope`` command line: every stage runs without Snakemake from here.

Each stage registers its own subcommands (``<stage>/commands.py``). User errors (bad files,
bad values) print one sentence on stderr and exit with status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from shardscope.buildenv import environment_first_on_path, extensions_dir
from shardscope.errors import UserError

#: The most GPUs a command accepts: a larger count is a typo, and the models' numbers stop meaning anything.
MAX_GPUS = 100_000

#: Stages whose ``commands.register`` adds subcommands, in the order ``--help`` lists them.
STAGES = ("topology", "plan", "jobs", "collectives", "training", "results", "reference", "figures", "paper", "costmodel", "emulated", "cluster", "diagnose")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``shardscope: error: …``, with exit status 2.

    argparse prints the whole usage block before an error; a user reads the one line and
    ``--help``. Subparsers inherit the class (``add_subparsers`` uses the parent's type), so every
    subcommand of :func:`build_parser` behaves the same.
    """

    def error(self, message: str) -> NoReturn:
        """Print one line naming the problem (and, for a missing subcommand, the choices); exit 2."""
        choices = self._subcommand_choices()
        if choices and message.startswith("the following arguments are required"):
            message = f"choose one of: {', '.join(choices)}"
        command = self.prog.removeprefix("shardscope").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"shardscope: error: {where}{message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """As argparse's, but an unknown flag is reported by the subcommand it was given to (its prog and --help)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost subcommand's parser that ``parsed`` went through (this parser if it has none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(parsed, action.dest, None) or "")
                if sub is not None:
                    return sub._chosen(parsed) if isinstance(sub, Parser) else sub
        return self

    def _subcommand_choices(self) -> list[str]:
        """The names of this parser's subcommands, if it has any."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return list(action.choices)
        return []


def gpu_count(text: str) -> int:
    """An argparse ``type`` for a GPU count: a whole number from 1 to :data:`MAX_GPUS`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_GPUS:
        raise argparse.ArgumentTypeError(f"expected a whole number of GPUs from 1 to {MAX_GPUS}, got {text!r}")
    return value


def _version() -> str:
    """The installed package's version (``shardscope --version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shardscope")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (the public command-line contract)."""
    import importlib

    parser = Parser(prog="shardscope", description="Which data-parallel strategy is fastest within memory on this machine, and why.")
    parser.add_argument("--version", action="version", version=f"shardscope {_version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for stage in STAGES:
        importlib.import_module(f"shardscope.{stage}.commands").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``shardscope`` console script."""
    # One C++ op cache and one ninja per environment (shardscope.buildenv), inherited by every
    # torchrun rank this command starts; torch's default ~/.cache is shared by environments.
    os.environ["TORCH_EXTENSIONS_DIR"] = str(extensions_dir())
    os.environ["PATH"] = environment_first_on_path(os.environ.get("PATH", ""))
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, a usage error: its status, as from a command
        return exc.code if isinstance(exc.code, int) else 2
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UserError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a full disk, a read-only or forbidden path: the machine's state, not a bug
        sentence = storage_problem(exc)
        if sentence is None:
            raise
        print(f"shardscope: error: {sentence}", file=sys.stderr)
        return 2


#: errno -> what it means for the user, for the failures of the machine's storage (not of shardscope).
STORAGE_ERRORS = {
    errno.ENOSPC: "no space left on the device; free some space and run the command again",
    errno.EDQUOT: "the disk quota is exceeded; free some space and run the command again",
    errno.EROFS: "the file system is read-only; choose a writable path",
    errno.EACCES: "permission denied; choose a path this user may write, or fix its permissions",
    errno.EPERM: "operation not permitted; choose a path this user may write, or fix its permissions",
}
#: The same failures as DuckDB words them (it raises its own IOException, not OSError).
_DUCKDB_WORDS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                 "Read-only file system": errno.EROFS, "Permission denied": errno.EACCES}


def storage_problem(exc: BaseException) -> str | None:
    """One sentence naming the path and the storage failure behind ``exc``, or None when it is not one.

    An OSError with one of :data:`STORAGE_ERRORS`, or DuckDB's IOException with the same words; the
    cause chain is searched too (an error raised while handling one).
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in STORAGE_ERRORS:
            where = seen.filename or "a file"
            return f"{where}: {STORAGE_ERRORS[seen.errno]}"
        if "duckdb" in type(seen).__module__:
            message = str(seen)
            for words, code in _DUCKDB_WORDS.items():
                if words in message:
                    path = re.search(r'file "([^"]+)"', message)
                    return f"{path.group(1) if path else 'the database'}: {STORAGE_ERRORS[code]}"
        seen = seen.__cause__ or seen.__context__
    return None
