"""An emulated device's SIMD width: the vector unit its CPU computes with.

Edge CPUs compute with 128-bit vectors (ARM NEON on a Raspberry Pi 4/5's Cortex-A72/A76 and a
Jetson Nano's A57); this machine's cores have 512-bit AVX-512. A CPU quota alone makes a device
slower in every respect at once: its convolutions *and* its gRPC serialization, copies and Python.
Capping the ISA of oneDNN (which runs TF's convolutions and matmuls) slows only the vector math, as
the narrower unit of a real edge CPU does: about 4x slower matmuls and convolutions per core
(docs/DESIGN.md has the figures). So a device at 0.15-0.35 core with 128-bit SIMD trains at Pi-4 speed (3-7 GFLOP/s in whole steps) while its link
and its message handling are those of a 0.25-core device, the balance of compute to communication
a real Pi has; without the cap, the same quota computes ~4x faster relative to its links.
"""
from __future__ import annotations

ONEDNN_ISA = {128: "SSE41", 256: "AVX2", 512: None}
"""SIMD bits -> the `ONEDNN_MAX_CPU_ISA` oneDNN is capped at (None: no cap, the machine's own)."""


def server_env(simd_bits: int | None) -> dict[str, str]:
    """Environment variables for a device server computing with `simd_bits`-wide vectors (empty for
    None or 512: the machine's own ISA). oneDNN reads the variable once, when TF loads."""
    if simd_bits is None:
        return {}
    if simd_bits not in ONEDNN_ISA:
        raise ValueError("simd_bits must be one of %s, got %r" % (sorted(ONEDNN_ISA), simd_bits))
    isa = ONEDNN_ISA[simd_bits]
    return {"ONEDNN_MAX_CPU_ISA": isa} if isa else {}
