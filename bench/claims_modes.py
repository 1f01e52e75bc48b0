"""The modes of bench/edgemesh_claims.py: the layouts each mode runs, the replicas that run them side
by side (a multi-group hybrid's as the engine's AHL rounds), and a mode's peak memory per device."""
import concurrent.futures
import dataclasses
import statistics
import time

from edgemesh_tf.cluster import DeviceDied, emulated_cluster, watched
from edgemesh_tf.engine import RoundRunner
from edgemesh_tf.mesh import Layout, even_split_layout, single_device_layout
from edgemesh_tf.planner import GroupPlan, predict
from edgemesh_tf.profiling import LayoutRunner, PeakWatch, measure_side_by_side

MODE_TIMEOUT_S = 900.0  # set-up and steps of one mode in the memory phase


def proportional(total: int, weights: list[float]) -> tuple[int, ...]:
    """`total` split in proportion to `weights`, every part >= 1, largest remainders first."""
    if total < len(weights):
        raise ValueError("cannot give %d devices at least one of %d examples" % (len(weights), total))
    raw = [(total - len(weights)) * w / sum(weights) for w in weights]
    parts = [1 + int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: -(raw[i] - int(raw[i])))[:total - sum(parts)]:
        parts[i] += 1
    return tuple(parts)


def mode_layouts(mode, plans, device, batch, dp_shares):
    """[(layout, batch)] of the replicas a mode runs concurrently; device(name) -> TF device string.
    `alone:<device>`: that device trains the whole model alone; `data_parallel`: synchronous data
    parallelism, one replica over the devices of ``dp_shares``, the batch split by them (one device: alone);
    a plan's mode (filter split, hybrid, even, memory capped): its groups, each on its own devices and batch."""
    if not mode.startswith("alone:") and mode != "data_parallel":
        return [(dataclasses.replace(g.layout, devices=tuple(device(n) for n in g.names)), g.batch)
                for g in plans[mode].groups]
    names = [mode.split(":", 1)[1]] if mode.startswith("alone:") else list(dp_shares)
    if len(names) == 1:
        return [(single_device_layout(device(names[0])), batch)]
    return [(Layout(mesh=(("batch", len(names)),), devices=tuple(device(n) for n in names),
                    rules=(("batch", "batch"),), sizes=(("batch", tuple(dp_shares[n] for n in names)),)), batch)]


def even_plan(one_group, profile, spec, stats, batch):
    """The one-group plan's devices with every split dim split evenly (for the cost model's check)."""
    names = one_group.groups[0].names
    layout, shares = even_split_layout(spec.split_dims(), names)
    pred = predict([profile.device(n) for n in names], stats, shares, profile_batch=profile.batch)
    return dataclasses.replace(one_group, kind="even", groups=(GroupPlan(names, layout, pred, batch),))


def commits(mode, plans) -> bool:
    """Whether ``mode``'s replicas commit to the ps: the groups of a multi-group hybrid grid."""
    return mode == "hybrid" and len(plans["hybrid"].groups) > 1


def per_iteration_ms(pred, commit_every: int | None) -> float:
    """A group's predicted ms per local iteration: its step, plus its ps push and pull over the
    iterations between commits when it commits (None: it does not)."""
    return pred.step_ms + (pred.ps_sync_ms / commit_every if commit_every else 0.0)


class ModeRunner:
    """The replicas (``layouts``) of ``mode`` on the testbed ``em``; step_ms() runs one step of each concurrently
    (wall ms), each replica's own step time kept in ``own[i]``. When the mode commits (every ``every`` local
    iterations) a replica's step is an AHL round (the engine's RoundRunner: pull, the iterations, a dense push), its
    own time per local iteration."""

    def __init__(self, spec, layouts, em, cluster, tag, mode, plans, every):
        groups = [f"{tag}{i}" for i in range(len(layouts))]
        ps = em.device(cluster.by_role("ps")[0].name)
        self.runners = [RoundRunner(spec, lay, b, em.session_target, ps_device=ps, group=g, groups=groups,
                                    local_steps=every, initialize_ps=(g == groups[0]), container=g)
                        if commits(mode, plans)
                        else LayoutRunner(spec, lay, b, em.session_target, cluster.master.device_string, container=g)
                        for g, (lay, b) in zip(groups, layouts)]
        self.batches = [b for _, b in layouts]
        self.own = [[] for _ in layouts]
        self.pool = concurrent.futures.ThreadPoolExecutor(len(self.runners))

    def step_ms(self):
        t0 = time.perf_counter()
        for own, f in zip(self.own, [self.pool.submit(r.step_ms) for r in self.runners]):
            own.append(f.result(timeout=600))
        return (time.perf_counter() - t0) * 1e3

    def ms_per_example(self):
        """1 / examples per ms, every replica at its own median step time (replicas are asynchronous)."""
        return 1.0 / sum(b / statistics.median(t) for b, t in zip(self.batches, self.own))

    def close(self):
        self.pool.shutdown()
        for r in self.runners:
            r.close()


def interleaved(runners, counts, warmup=2, restore_quotas=lambda: None):
    """{mode: its step_ms() timings}, ``counts[mode]`` of them, the modes taking turns one step each so that a
    shared machine's noise hits every mode alike; each replica's warm-up steps are not counted, the first one (each
    device's first run of the graph) run before ``restore_quotas()``, the others under the devices' quotas."""
    for r in runners.values():
        r.step_ms()
    restore_quotas()
    for r in runners.values():
        for _ in range(warmup - 1):
            r.step_ms()
        r.own = [[] for _ in r.own]
    return measure_side_by_side(runners, counts, round_steps=1, warmup=0)


def peak_memory(cluster, spec, mode, plans, batch, dp_shares, commit_every, steps=2) -> dict:
    """{"peak_bytes": {device: bytes above its idle RSS}, "max_peak_mib", "mean_peak_mib"} of the devices ``mode``
    uses, on a fresh testbed with the memory limits enforced; {"out_of_memory": error} if a device's server died.
    CPU quotas lifted (thread pools stay sized to them, so the same ops run at once): peaks do not depend on speed,
    and a slow device would take minutes a mode."""
    with emulated_cluster(cluster) as em:
        em.lift_quotas()
        layouts = mode_layouts(mode, plans, em.device, batch, dp_shares)
        by_device = {em.device(n): n for n in em.devices}
        used = sorted({by_device[d] for lay, _ in layouts for d in lay.devices})
        watch = PeakWatch({n: em.devices[n].pid for n in used})

        def run():
            runner = ModeRunner(spec, layouts, em, cluster, mode, mode, plans, commit_every)
            for _ in range(steps):
                runner.step_ms()
            return runner

        try:
            runner = watched(run, em.check, MODE_TIMEOUT_S, "mode %s" % mode)
        except DeviceDied as dead:  # the runner is left to the teardown: closing it waits on the dead server
            return {"out_of_memory": str(dead), "devices": used}
        runner.close()
        peaks = watch.peaks()
        return {"peak_bytes": peaks, "devices": used, "max_peak_mib": round(max(peaks.values()) / 2 ** 20, 1),
                "mean_peak_mib": round(statistics.mean(peaks.values()) / 2 ** 20, 1)}
