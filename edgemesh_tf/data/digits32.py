"""``digits32``: scikit-learn's 8x8 digits made into a harder 32x32 task, generated offline.

Every original 8x8 image (1797, shipped inside scikit-learn: nothing is downloaded) is upscaled
to 32x32 (cubic spline), then drawn many times with a random affine transform (rotation, scale,
shear, translation), an elastic distortion (smooth random displacements) and additive
Gaussian noise. The originals are split FIRST (stratified by label): the test images are variants
of held-out originals only, so a model cannot score by recognising a training image's twin.

Images float32 (N, 32, 32, 1) in [0, 1], labels int32 in 0..9. Deterministic for a seed. With
the defaults: 1347 train originals x 16 variants = 21,552 train images, 450 test originals x 12
variants = 5,400 test images (~110 MB as float32); about 3-4 s to build on this 2-core machine
(numpy + scipy.ndimage, vectorised over all images), so nothing is cached on disk. A process keeps
the last datasets it built (read-only arrays): a warm group process (engine/runtime/warm.py) builds it once
for all the jobs it runs.
"""
from __future__ import annotations

import functools

import numpy as np

from edgemesh_tf.data.dataset import Dataset

SIZE = 32
"""Output height and width, pixels."""


def _upscaled_originals() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 digits upscaled 8x8 -> 32x32 (cubic spline, clipped to [0, 1]) and their labels."""
    from scipy import ndimage  # lazy: keep `import edgemesh_tf.data` light
    from sklearn.datasets import load_digits

    bunch = load_digits()
    small = bunch.images.astype(np.float32) / np.float32(16.0)
    # pad by one zero pixel so the spline falls off to the background at the border
    padded = np.pad(small, ((0, 0), (1, 1), (1, 1)))
    big = ndimage.zoom(padded, (1, SIZE / 10, SIZE / 10), order=3, grid_mode=True, mode="grid-constant")
    return np.clip(big, 0.0, 1.0).astype(np.float32), bunch.target.astype(np.int32)


def _coarse_to_fine(k: int, size: int) -> np.ndarray:
    """(size, k) matrix that interpolates a k-point control grid linearly over ``size`` pixels."""
    pos = np.linspace(0.0, k - 1.0, size)
    lo = np.minimum(np.floor(pos).astype(int), k - 2)
    frac = pos - lo
    m = np.zeros((size, k), np.float32)
    m[np.arange(size), lo] = 1.0 - frac
    m[np.arange(size), lo + 1] = frac
    return m


def distort(images: np.ndarray, rng: np.random.Generator, *, rotation_deg: float = 15.0,
            scale: tuple[float, float] = (0.8, 1.1), shear: float = 0.25, shift_px: float = 3.0,
            elastic_px: float = 1.5, elastic_grid: int = 4, noise: float = 0.1) -> np.ndarray:
    """One random variant of each image. images float32 (N, H, W) in [0, 1] -> same shape.

    Per image: rotation uniform in +-``rotation_deg`` degrees, isotropic scale uniform in
    ``scale``, shear uniform in +-``shear`` (x += shear*y), translation uniform in +-``shift_px``
    pixels per axis (all about the image centre); an elastic displacement field (independent
    N(0, ``elastic_px``²) px displacements on an ``elastic_grid`` x ``elastic_grid`` control grid,
    interpolated linearly over the image); bilinear resampling with a black (0) outside; then
    Gaussian pixel noise of std ``noise``, clipped to [0, 1].
    """
    from scipy import ndimage

    n, h, w = images.shape
    f32 = np.float32
    angle = np.deg2rad(rng.uniform(-rotation_deg, rotation_deg, n))
    zoom = rng.uniform(scale[0], scale[1], n)
    sh = rng.uniform(-shear, shear, n)
    shift = rng.uniform(-shift_px, shift_px, (n, 2))
    # output pixel p (about the centre) = A·q + shift with A = zoom·Shear·R: sample the input at
    # q = A^-1 (p - shift); A^-1 = R(-angle)/zoom, then the inverse shear (x -= sh·y)
    cos, sin = np.cos(angle) / zoom, np.sin(angle) / zoom
    a00, a01, a10, a11 = cos, sin, -sin - sh * cos, cos - sh * sin
    y = np.arange(h, dtype=f32) - f32((h - 1) / 2)
    x = np.arange(w, dtype=f32) - f32((w - 1) / 2)
    py = y[None, :, None] - shift[:, 0, None, None].astype(f32)     # (N, H, 1)
    px = x[None, None, :] - shift[:, 1, None, None].astype(f32)     # (N, 1, W)
    col = lambda v: v.astype(f32)[:, None, None]  # noqa: E731
    rows = col(a00) * py + col(a01) * px + f32((h - 1) / 2)
    cols = col(a10) * py + col(a11) * px + f32((w - 1) / 2)
    k = elastic_grid
    grid = rng.standard_normal((2, n, k, k)).astype(f32) * f32(elastic_px)
    uy, ux = _coarse_to_fine(k, h), _coarse_to_fine(k, w)
    rows += uy @ grid[0] @ ux.T
    cols += uy @ grid[1] @ ux.T
    index = np.broadcast_to(np.arange(n, dtype=f32)[:, None, None], (n, h, w))
    out = ndimage.map_coordinates(images, np.stack([index, rows, cols]), order=1, mode="constant", cval=0.0)
    out += rng.standard_normal(out.shape, dtype=f32) * f32(noise)
    return np.clip(out, 0.0, 1.0, out=out)


def split_originals(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) of the originals: a stratified split, deterministic for ``seed``."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    train, test = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=labels)
    return np.sort(train), np.sort(test)


def _variants(originals: np.ndarray, count: int, rng: np.random.Generator,
              chunk: int = 4096) -> np.ndarray:
    """``count`` distorted variants of every original (N, 32, 32), in order: (N·count, 32, 32, 1)."""
    src = np.repeat(originals, count, axis=0)
    return np.concatenate([distort(src[i:i + chunk], rng) for i in range(0, len(src), chunk)])[..., None]


def digits32_with_sources(test_fraction: float = 0.25, train_variants: int = 16, test_variants: int = 12,
                          seed: int = 0) -> tuple[Dataset, np.ndarray, np.ndarray]:
    """``(dataset, train_source, test_source)``: ``digits32`` and, per image, the index of its original
    in ``sklearn.datasets.load_digits()`` (int64 arrays aligned with train_y / test_y)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    for name, v in (("train_variants", train_variants), ("test_variants", test_variants)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an int >= 1 (distorted images per original), got {v!r}")
    images, labels = _upscaled_originals()
    train_idx, test_idx = split_originals(labels, test_fraction, seed)
    rng = np.random.default_rng(seed)
    parts, sources = [], []
    for idx, count in ((train_idx, train_variants), (test_idx, test_variants)):
        x = _variants(images[idx], count, rng)
        src = np.repeat(idx, count)
        order = rng.permutation(len(src))
        parts += [np.ascontiguousarray(x[order]), labels[src[order]]]
        sources.append(src[order])
    return Dataset("digits32", *parts, num_classes=10), sources[0], sources[1]


@functools.lru_cache(maxsize=2)
def digits32(test_fraction: float = 0.25, train_variants: int = 16, test_variants: int = 12,
             seed: int = 0) -> Dataset:
    """Generate ``digits32`` (see the module docstring): train images are ``train_variants``
    distortions of each train original, test images ``test_variants`` distortions of each held-out
    original; both shuffled; train and test originals never overlap. Cached per process: the
    arrays are read-only."""
    data = digits32_with_sources(test_fraction, train_variants, test_variants, seed)[0]
    for a in (data.train_x, data.train_y, data.test_x, data.test_y):
        a.setflags(write=False)
    return data
