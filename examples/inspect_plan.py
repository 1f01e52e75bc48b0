"""Which device computes which filters of examples/my_cnn.py on the pi4 cluster, and why.

    .venv/bin/python examples/inspect_plan.py                     # profiles the emulated pi4 cluster (root; ~1.5 min)
    .venv/bin/python examples/inspect_plan.py RUN/profile.json    # plans a saved profile (`edgemesh run` writes one)
    .venv/bin/python examples/inspect_plan.py RUN/profile.json 1  # ... with that many groups

The planner gives each device of a group a share of every split dim (conv2d filters, dense units)
about in proportion to its speed on that layer, within its memory budget, and splits a layer only
where it predicts the split to pay (the compute it saves against the gather it costs).
"""
import sys

import edgemesh_tf as em
from edgemesh_tf.planner.calibrate import calibrated, compute_scales
from edgemesh_tf.profiling.types import load_profile, save_profile

MODEL, CLUSTER, MIB = "examples/my_cnn.py", "layouts/pi4.yaml", 1 << 20

spec = em.load_model(MODEL, dataset="digits")
if len(sys.argv) > 1:
    profile = load_profile(sys.argv[1])
else:
    with em.start(CLUSTER) as cluster:
        profile = em.profile(cluster, spec, batch=32)
    save_profile(profile, "/tmp/my_cnn.profile.json")
    print("profile saved to /tmp/my_cnn.profile.json (pass it to skip profiling)")
plan = em.plan(profile, spec, groups=int(sys.argv[2]) if len(sys.argv) > 2 else None)
# the planner scales each device's profiled layer times so they add up to its measured whole step
scales, used = compute_scales(profile, spec), {d.name: d for d in calibrated(profile, spec).devices}

print("\nper device (batch %d): whole-model step alone (measured), layer times x scale, memory budget"
      % profile.batch)
for d in profile.devices:
    print("  %-8s %10s %8.1f ms x %.2f %7.0f MiB" % (
        d.name, "%.1f ms" % d.whole_step_ms if d.whole_step_ms else "not timed",
        sum(t.compute_ms for t in d.layers), scales.get(d.name, 1.0), d.memory_bytes / MIB))

for j, g in enumerate(plan.groups):
    p, names = g.prediction, dict(zip(g.layout.devices, g.names))
    print("\ngroup %d: %s, batch %d, predicted step %.1f ms (+ %.1f ms push/pull per commit)"
          % (j, ", ".join(g.names), g.batch, p.step_ms, p.ps_sync_ms))
    for name, mem in zip(g.names, p.memory_bytes):
        print("  %-8s predicted memory %6.1f of %6.0f MiB" % (name, mem / MIB, used[name].memory_bytes / MIB))
    shares = g.layout.shares(spec.split_dims())  # {dim: {TF device: units}}, only the split dims
    for lp in p.layers:
        if lp.name not in shares:
            print("  %-7s %5d units: not split (every device of the group computes all: %.2f ms)"
                  % (lp.name, lp.units, max(lp.compute_ms)))
            continue
        rate = {n: 1.0 / max(used[n].layer_ms(lp.name), 1e-9) for n in g.names}  # whole layers per ms
        print("  %-7s %5d units split, gather + reduce-scatter %.2f ms:" % (lp.name, lp.units, lp.comm_ms))
        first = 0
        for dev, n in shares[lp.name].items():  # in mesh order: the i-th device holds the i-th slice
            name = names[dev]
            print("    %-8s units %4d-%-4d (%4.1f%%; its speed earns %4.1f%%): whole layer %6.2f ms, "
                  "its share %6.2f ms" % (name, first, first + n - 1, 100 * n / lp.units,
                                          100 * rate[name] / sum(rate.values()), used[name].layer_ms(lp.name),
                                          lp.compute_ms[g.names.index(name)]))
            first += n

print("\nplan: %s, %.1f effective examples/s predicted, against:" % (plan.kind, plan.examples_per_sec))
for kind, rate in plan.alternatives:
    print("  %-20s %7.1f examples/s (plan %+.0f%%)" % (kind, rate, 100 * (plan.examples_per_sec / rate - 1)))
if plan.idle:
    print("idle (the job is predicted faster without them): %s" % ", ".join(plan.idle))
