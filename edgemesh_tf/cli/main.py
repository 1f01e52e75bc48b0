"""`edgemesh SUBCOMMAND [--flags]`: dispatches to one module per subcommand.

Each subcommand module defines its own absl flags and a ``main(argv)``; only the chosen module is
imported, so flags of different subcommands never clash.
"""
import importlib
import sys

SUBCOMMANDS = {
    "run": "edgemesh_tf.cli.run",
    "train": "edgemesh_tf.cli.train",
    "tf-config": "edgemesh_tf.cli.tf_config",
    "server": "edgemesh_tf.cli.server",
    "cluster": "edgemesh_tf.cli.cluster",
    "profile": "edgemesh_tf.cli.profile",
    "plan": "edgemesh_tf.cli.plan",
}


def _usage() -> str:
    return "usage: edgemesh {%s} [--flags]  (edgemesh SUBCOMMAND --help for its flags)" % "|".join(SUBCOMMANDS)


def run() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in SUBCOMMANDS:
        got = sys.argv[1] if len(sys.argv) > 1 else "nothing"
        sys.exit("edgemesh: expected a subcommand, got %r\n%s" % (got, _usage()))
    name = sys.argv[1]
    module = importlib.import_module(SUBCOMMANDS[name])
    from absl import app

    app.run(module.main, argv=["edgemesh " + name] + sys.argv[2:])


if __name__ == "__main__":
    run()
