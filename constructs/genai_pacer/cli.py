"""`genai-pacer`, the command line: one root for the commands each capability registers where it lives.

    genai-pacer quota-check ...                  genai_pacer.quota.check (ModelQuota plans vs the account)
    genai-pacer emulator | bench | experiments   genai_pacer.testing.cli (the offline test bed)

A capability adds its commands through an entry point of the group COMMANDS_GROUP in the package's
metadata (pyproject.toml, [project.entry-points."genai_pacer.commands"]): `name = "module:register"`,
where register(commands) adds its subparsers to the root's and sets each one's `run(args) -> int`.
This module names no capability, so the command line's production half never imports the test bed.

Every failure a command reports is one line on stderr: exit 2 for bad input (ValueError, a missing
optional dependency, a file that cannot be read or written), 1 for a run that finished with nothing to
show (CommandFailed), 130 when interrupted; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import NoReturn

__all__ = ["COMMANDS_GROUP", "CommandFailed", "Parser", "main", "parser"]

#: The entry-point group whose entries register genai-pacer's commands.
COMMANDS_GROUP = "genai_pacer.commands"
_DESCRIPTION = "genai-pacer: plan and check model quotas, and run the offline Bedrock test bed."


class Parser(argparse.ArgumentParser):
    """An input error is one line on stderr and exit status 2, not the whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class CommandFailed(RuntimeError):
    """A command ran to the end but achieved nothing (e.g. no request succeeded): exit status 1."""


def parser() -> argparse.ArgumentParser:
    """The root parser with every registered command (COMMANDS_GROUP), in the order of their entry names."""
    root = Parser(prog="genai-pacer", description=_DESCRIPTION)
    commands = root.add_subparsers(dest="command", required=True)
    registered = {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}  # one per name
    if not registered:
        raise LookupError(
            f"no genai-pacer command is registered (entry-point group {COMMANDS_GROUP!r}): the package's metadata "
            "is missing; install the package (pip install /path/to/genai-pacer, or in a checkout make, which installs "
            "it with pip install -r requirements.txt) rather than putting its folder on PYTHONPATH"
        )
    for name in sorted(registered):
        registered[name].load()(commands)
    return root


def main(argv: list[str] | None = None) -> int:
    """Run one command; every input error is one line on stderr (exit 2), never a traceback."""
    try:
        root = parser()
    except LookupError as missing:
        print(f"genai-pacer: {missing}", file=sys.stderr)
        return 2
    args = root.parse_args(argv)
    prog = f"genai-pacer {args.command}"
    try:
        return int(args.run(args))
    except CommandFailed as failure:
        print(f"{prog}: {failure}", file=sys.stderr)
        return 1
    except ValueError as error:  # bad input (a malformed file line, a refused setting)
        print(f"{prog}: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except ImportError as error:  # an optional dependency missing: the message says what to install
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a file that is missing or a directory, an --out or --port that cannot be used
        reason = error.strerror or str(error)
        print(f"{prog}: {f'{error.filename}: {reason}' if error.filename else reason}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
