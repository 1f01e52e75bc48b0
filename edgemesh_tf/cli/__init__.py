"""Entry points (`edgemesh SUBCOMMAND`): flags live here only; the library takes arguments."""


def cluster_from_flag(path, command: str):
    """The cluster file a ``--cluster`` flag names, or exit with a message naming ``command``, the
    file, the device and the field."""
    from edgemesh_tf.cluster import spec

    if not path:
        raise SystemExit("%s: --cluster FILE is required" % command)
    try:
        return spec.load_cluster(path)
    except spec.ClusterFileError as e:
        raise SystemExit("%s: %s" % (command, e))
