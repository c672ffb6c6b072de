"""What pip builds from clients/python (no broker, no build needed; the build
itself is tests/packaging/python.sh's): pyproject.toml takes the version
from ``lockbroker._core.__version__``, its one source, and ships py.typed;
and when the package under test is an installed distribution, its version
is ``lockbroker.__version__``."""

import importlib.metadata
import os
import tomllib
import unittest

import lockbroker

HERE = os.path.dirname(os.path.abspath(__file__))
PYPROJECT = os.path.join(HERE, "..", "pyproject.toml")


class PackagingTests(unittest.TestCase):
    def setUp(self):
        with open(PYPROJECT, "rb") as f:
            self.pyproject = tomllib.load(f)

    def test_version_comes_from_the_package(self):
        project = self.pyproject["project"]
        self.assertEqual(project["name"], "lockbroker")
        self.assertNotIn("version", project)
        self.assertIn("version", project["dynamic"])
        dynamic = self.pyproject["tool"]["setuptools"]["dynamic"]["version"]
        self.assertEqual(dynamic, {"attr": "lockbroker._core.__version__"})
        self.assertRegex(lockbroker.__version__, r"^\d+\.\d+\.\d+")

    def test_standard_library_only_and_typed(self):
        project = self.pyproject["project"]
        self.assertEqual(project.get("dependencies", []), [])
        self.assertEqual(project["requires-python"], ">=3.11")
        setuptools = self.pyproject["tool"]["setuptools"]
        self.assertEqual(setuptools["packages"], ["lockbroker"])
        self.assertIn("py.typed", setuptools["package-data"]["lockbroker"])
        package = os.path.dirname(lockbroker.__file__)
        self.assertTrue(os.path.isfile(os.path.join(package, "py.typed")))

    def test_installed_version_is_the_packages(self):
        try:
            dist = importlib.metadata.distribution("lockbroker")
        except importlib.metadata.PackageNotFoundError:
            self.skipTest("lockbroker is not installed (imported from the source tree)")
        installed = os.path.realpath(str(dist.locate_file("lockbroker/__init__.py")))
        # (INSTALLER: installed by pip, not the egg-info a build leaves in clients/python)
        if installed != os.path.realpath(lockbroker.__file__) or dist.read_text("INSTALLER") is None:
            self.skipTest("the lockbroker under test is not the installed one")
        self.assertEqual(dist.version, lockbroker.__version__)


if __name__ == "__main__":
    unittest.main()
