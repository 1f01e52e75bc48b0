"""The help of `edgemesh` (its subcommands, one line each) and of each subcommand (its own flags,
grouped under headings), printed in place of absl's, which lists flags by defining module.

A subcommand module gives its one-line description as `SUMMARY`, its usage as the first indented
block of its docstring and, optionally, `HELP_GROUPS`: (heading, flag names) pairs in help order.
Its flags no group names are listed last under the subcommand's name. absl's own flags stay in
`--helpfull`.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import textwrap

from absl import flags

HELP_ARGS = ("-h", "--help", "-?", "--helpshort")  # what asks for a subcommand's help
WIDTH = 100
_TYPES = {"int": "INT", "float": "FLOAT", "string": "STR"}
_PLAIN_SYNTAX = ("", "a number", "an integer")  # says no more than the type
_ENUM_PREFIX = re.compile(r"^<[^>]*>: ")  # absl's "<a|b>: " before an enum's help; the synopsis shows it


def summary(module_name: str) -> str:
    """The `SUMMARY` of a subcommand module, read from its source without importing it: importing
    defines the module's flags, and the flags of two subcommands clash."""
    with open(importlib.util.find_spec(module_name).origin) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SUMMARY" for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError("%s defines no SUMMARY" % module_name)


def main_help(subcommands: dict[str, str]) -> str:
    """`edgemesh --help`: the subcommands ({name: module}) with their summaries, and where their
    flags are."""
    width = max(map(len, subcommands))
    lines = ["usage: edgemesh SUBCOMMAND [--flags]", "", "Subcommands:"]
    lines += ["  %-*s  %s" % (width, name, summary(module)) for name, module in subcommands.items()]
    lines += ["", "edgemesh SUBCOMMAND --help (or edgemesh help SUBCOMMAND) lists the flags of SUBCOMMAND.",
              "A first job: edgemesh run (its defaults: edgemesh run --help)."]
    return "\n".join(lines)


def wants_help(args: list[str]) -> bool:
    """Whether the arguments of a subcommand ask for its help (before a `--`, after which every
    argument is positional)."""
    args = args[:args.index("--")] if "--" in args else args
    return any(a in HELP_ARGS for a in args)


def subcommand_help(name: str, module) -> str:
    """`edgemesh NAME --help` for the imported subcommand `module`: its summary and usage, its flags
    by group, and where the rest are."""
    lines = ["edgemesh %s: %s" % (name, module.SUMMARY)]
    usage = _usage(module.__doc__ or "")
    if usage:
        lines += ["", "Usage:", *usage]
    for heading, group in _groups(name, module):
        lines += ["", heading + ":"]
        for flag in group:
            lines += _flag_lines(flag)
    lines += ["", "edgemesh %s --helpfull lists these and absl's own flags too (logging, debugging)." % name]
    return "\n".join(lines)


def _usage(doc: str) -> list[str]:
    """The first indented block of a docstring (its examples), without trailing blank lines."""
    block = []
    for line in doc.splitlines()[1:]:
        if line.startswith("    "):
            block.append(line.rstrip())
        elif block and line.strip():
            break
        elif block:
            block.append("")
    while block and not block[-1]:
        block.pop()
    return block


def _groups(name: str, module) -> list[tuple[str, list]]:
    """(heading, flags) of the subcommand: its module's HELP_GROUPS, then the project's flags no
    group names (only the chosen subcommand's module is imported, so these are its own)."""
    own = {}
    for defining_module, defined in flags.FLAGS.flags_by_module_dict().items():
        if defining_module.startswith("edgemesh_tf."):
            own.update((f.name, f) for f in defined)
    groups = [(heading, [own.pop(n) for n in names]) for heading, names in getattr(module, "HELP_GROUPS", ())]
    if own:
        groups.append(("edgemesh %s flags" % name, list(own.values())))
    return groups


def _flag_lines(flag) -> list[str]:
    """A flag's synopsis (name, type, bounds, default) and its help text, wrapped."""
    notes = [] if flag.parser.syntactic_help in _PLAIN_SYNTAX else [flag.parser.syntactic_help]
    if flag.default is not None:
        notes.append("default %s" % _shown(flag.default))
    head = "  %s%s" % (_synopsis(flag), "  (%s)" % "; ".join(notes) if notes else "")
    text = _ENUM_PREFIX.sub("", flag.help)
    return [head] + textwrap.wrap(text, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6)


def _synopsis(flag) -> str:
    if flag.boolean:
        return "--[no]%s" % flag.name
    values = getattr(flag.parser, "enum_values", None)
    return "--%s=%s" % (flag.name, "|".join(values) if values else _TYPES.get(flag.parser.flag_type(), "VALUE"))


def _shown(value) -> str:
    """A default as it is typed: true/false, a number, a quoted string."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)
