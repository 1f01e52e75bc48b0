"""Lazy package exports (edgemesh_tf/lazy.py): every name a package root lists resolves to the object
its module defines, and a name it does not list is an AttributeError naming the package."""
import importlib
import importlib.util

import pytest

from edgemesh_tf.lazy import lazy_exports

LAZY_PACKAGES = ("cluster", "engine", "mesh", "models", "profiling", "training")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_listed_name_resolves_to_its_modules_object(package):
    pkg = importlib.import_module("edgemesh_tf." + package)
    exports = pkg._EXPORTS
    assert exports and set(exports) <= set(pkg.__all__)
    for name, module in exports.items():
        defined = importlib.import_module("edgemesh_tf.%s.%s" % (package, module))
        assert getattr(pkg, name) is getattr(defined, name), (package, name)
        # a submodule of the package under the same name would take the name over once imported
        assert importlib.util.find_spec("edgemesh_tf.%s.%s" % (package, name)) is None, (package, name)


def test_an_unlisted_name_is_an_attribute_error_naming_the_package():
    getattr_ = lazy_exports("edgemesh_tf.engine", {"run_job": "runtime.job"})
    with pytest.raises(AttributeError, match="'edgemesh_tf.engine' has no attribute 'decide'"):
        getattr_("decide")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        importlib.import_module("edgemesh_tf.profiling").nope
