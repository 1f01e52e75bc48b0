"""`edgemesh SUBCOMMAND [--flags]`: dispatches to one module per subcommand, and answers
`edgemesh --help`, `edgemesh help [SUBCOMMAND]` and `edgemesh SUBCOMMAND --help` (cli/help.py).

Each subcommand module defines its own absl flags and a ``main(argv)``; only the chosen module is
imported, so flags of different subcommands never clash.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback

from edgemesh_tf import tf_import
from edgemesh_tf.cli import help as cli_help

SUBCOMMANDS = {
    "run": "edgemesh_tf.cli.run",
    "train": "edgemesh_tf.cli.train",
    "tf-config": "edgemesh_tf.cli.tf_config",
    "server": "edgemesh_tf.cli.server",
    "launch": "edgemesh_tf.cli.launch",
    "cluster": "edgemesh_tf.cli.cluster",
    "profile": "edgemesh_tf.cli.profile",
    "plan": "edgemesh_tf.cli.plan",
}


def _subcommand(name: str):
    """The module of subcommand `name`; exits 2 naming it and the valid ones when there is none."""
    if name not in SUBCOMMANDS:
        print("edgemesh: expected a subcommand, got %r; the subcommands: %s (edgemesh --help says what each does)"
              % (name, ", ".join(SUBCOMMANDS)), file=sys.stderr)
        sys.exit(2)
    return importlib.import_module(SUBCOMMANDS[name])


def _print_help(name: str | None = None) -> None:
    """Prints the help of `edgemesh` (name None) or of one subcommand, and exits 0."""
    print(cli_help.main_help(SUBCOMMANDS) if name is None else cli_help.subcommand_help(name, _subcommand(name)))
    sys.exit(0)


def run(argv: list[str] | None = None) -> None:
    """The `edgemesh` entry point; `argv` defaults to sys.argv."""
    args = (sys.argv if argv is None else argv)[1:]
    if not args:  # nothing asked: the help, as a usage error
        print(cli_help.main_help(SUBCOMMANDS), file=sys.stderr)
        sys.exit(2)
    if args[0] in cli_help.HELP_ARGS or args[0] == "help":
        _print_help(args[1] if args[0] == "help" and len(args) > 1 else None)
    name, rest = args[0], args[1:]
    if argv is None:  # the process is this command's own: its TensorFlow needs no Keras (tf_import.py)
        tf_import.without_keras()
    module = _subcommand(name)
    if cli_help.wants_help(rest):
        _print_help(name)
    from absl import app

    try:
        app.run(module.main, argv=["edgemesh " + name] + rest)
    except BaseException as e:  # noqa: BLE001  (SystemExit too: every end of the command, once its clean-up ran)
        if argv is None:
            _exit_past_threads_in_tf(e)
        raise


def _exit_past_threads_in_tf(e: BaseException) -> None:
    """Ends the process with ``e``'s exit status and message by ``os._exit`` if a thread is still
    inside TF's C++ runtime waiting on servers that are gone (``cluster.watch.left_behind``: a run
    or a session's close on a testbed device that died); else returns, and the interpreter exits
    as usual. Such a thread, if its call returns while the interpreter finalizes, is ended by a
    forced unwind that TF's C++ frames catch without rethrowing: the process would abort (SIGABRT,
    "terminate called ...") after the command's own error. ``e`` reaches here after every ``with``
    block of the command has exited (the testbed's processes, namespaces and cgroups are removed by
    then), so only the interpreter's finalization is skipped; output and logs are flushed first."""
    from edgemesh_tf.cluster import watch

    if not watch.left_behind():
        return
    if isinstance(e, SystemExit):
        code = e.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            print(code, file=sys.stderr)
            status = 1
    else:
        traceback.print_exception(e)
        status = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    run()
