"""edgemesh_tf: heterogeneous hybrid-parallel training on TensorFlow + Mesh-TensorFlow."""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def runtime_requirements(path=os.path.join(HERE, "requirements.txt")):
    """requirements.txt down to its "# Tests" line (the test tools), without comments: one list for
    `pip install -r requirements.txt` and `pip install .`, environment markers included (TensorFlow's
    distribution per platform)."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("# Tests"):
                break
            line = re.sub(r"(^|\s)#.*", "", line).strip()
            if line:
                out.append(line)
    return out


def version(path=os.path.join(HERE, "edgemesh_tf", "version.py")):
    """The package's VERSION, read from its one definition without importing the package."""
    with open(path) as f:
        return re.search(r'^VERSION = "([^"]+)"', f.read(), re.M).group(1)


setup(
    name="edgemesh_tf",
    version=version(),
    description="Uneven (capability-proportional) mesh sharding and hybrid training for heterogeneous edge clusters",
    packages=find_packages(include=["edgemesh_tf", "edgemesh_tf.*"]),
    python_requires=">=3.11",
    install_requires=runtime_requirements(),
    entry_points={"console_scripts": ["edgemesh=edgemesh_tf.cli.main:run"]},
)
