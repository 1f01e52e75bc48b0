"""edgemesh_tf: heterogeneous hybrid-parallel training on TensorFlow + Mesh-TensorFlow."""
from setuptools import find_packages, setup

setup(
    name="edgemesh_tf",
    version="0.1.0",
    description="Uneven (capability-proportional) mesh sharding and hybrid training for heterogeneous edge clusters",
    packages=find_packages(include=["edgemesh_tf", "edgemesh_tf.*"]),
    python_requires=">=3.11",
    install_requires=[
        "tensorflow-cpu==2.21.0",
        "mesh-tensorflow==0.1.21",
        "tensorboard",
        "absl-py",
        "numpy",
        "PyYAML",
        "scikit-learn",
        "matplotlib",
        "pillow",
        "h5py",
    ],
    entry_points={"console_scripts": ["edgemesh=edgemesh_tf.cli.main:run"]},
)
