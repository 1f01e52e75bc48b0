"""`edgemesh plan`: the grid and filter division of a model on a profiled cluster, as a layout file.

    edgemesh plan --profile profiles/edge4.json --model vgg --out layouts/edge4_plan.yaml [--groups K] [--batch B]
        [--noengine] [--memory_fraction F] [--sync ashl]

Prints a table of layers x devices (filters per device, predicted ms) and writes the layout YAML
(one group: a plain layout for `edgemesh train --layout`; several: a `groups:` list).
"""
from absl import flags

SUMMARY = "divide a model over the devices of a profiled cluster; write the layout file"
FLAGS = flags.FLAGS
flags.DEFINE_string("profile", None, "Profile JSON written by profiling (per device layer ms, memory, links).")
flags.DEFINE_string("model", None, "The model: a zoo name or a model file (default: the profile's model, if a zoo "
                    "name).")
flags.DEFINE_string("out", None, "Write the plan here (YAML); default: only print it.")
flags.DEFINE_integer("groups", None, "Number of data-parallel groups (default: the best of 1..devices).",
                     lower_bound=1)
flags.DEFINE_integer("batch", None, "Examples per group per step (default: the profile's batch).", lower_bound=1)
flags.DEFINE_integer("chunks", None, "Coarse granularity: shares in multiples of about units/chunks.", lower_bound=1)
flags.DEFINE_bool("engine", True, "Plan for the engine's replicas (`edgemesh run`, `edgemesh train --sync`): every "
                  "device also keeps anchors, residuals and parameter-server buffers. --noengine: one group trained "
                  "as a single layout without a ps (`edgemesh train --layout`), which needs less memory.")
flags.DEFINE_float("memory_fraction", None, "Named option, off by default (the plan minimises time): no device may "
                   "be predicted above this fraction (0 < F <= 1) of the whole model's step on one device.")
flags.DEFINE_integer("commit_interval", 1, "Local steps per parameter-server commit (sync cost is divided by it); "
                     "only without --sync.", lower_bound=1)
flags.DEFINE_enum("sync", None, ["bsp", "asp", "ssp", "local_sgd", "adsp", "ashl"],
                  "Price the plan as the job this strategy runs with its default options (each phase's local "
                  "iterations, commits and waits: the planner's objective in `edgemesh run`); default: one "
                  "commit every --commit_interval steps.")


def main(argv):
    if len(argv) > 1:
        raise SystemExit("edgemesh plan: unexpected arguments %s" % argv[1:])
    if not FLAGS.profile:
        raise SystemExit("edgemesh plan: --profile is required (a profile JSON file)")
    from edgemesh_tf.models import MODEL_NAMES, load_model
    from edgemesh_tf.planner import format_table, plan, write_plan
    from edgemesh_tf.profiling.types import load_profile

    try:
        profile = load_profile(FLAGS.profile)
        if FLAGS.groups and FLAGS.groups > len(profile.devices):
            raise ValueError("--groups %d: the profile has only %d devices" % (FLAGS.groups, len(profile.devices)))
        if not FLAGS.model and profile.model not in MODEL_NAMES:
            raise ValueError("%s: profile was measured for model %r from a model file: pass it as --model FILE.py"
                             % (FLAGS.profile, profile.model))
        spec = load_model(FLAGS.model or profile.model, tuple(profile.image_shape), profile.num_classes)
        if spec.name != profile.model:
            raise ValueError("%s: profile was measured for model %r, not %r" % (FLAGS.profile, profile.model, spec.name))
        options = dict(groups=FLAGS.groups, chunks=FLAGS.chunks, engine=FLAGS.engine,
                       memory_fraction=FLAGS.memory_fraction)
        if FLAGS.sync:
            if FLAGS["commit_interval"].present:
                raise ValueError("--commit_interval and --sync: the strategy sets the commits; pass one of them")
            from edgemesh_tf.engine.core import job_cost
            from edgemesh_tf.engine.config import SyncConfig

            result = job_cost.plan_job(profile, spec, FLAGS.batch, SyncConfig(strategy=FLAGS.sync), **options)
        else:
            result = plan(profile, spec, batch=FLAGS.batch, commit_interval=FLAGS.commit_interval, **options)
        print(format_table(result))
        if FLAGS.out:
            write_plan(result, FLAGS.out)
            print("wrote %s" % FLAGS.out)
    except (ValueError, OSError) as e:
        raise SystemExit("edgemesh plan: %s" % e)
