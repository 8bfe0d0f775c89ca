"""The Python package the pip way (docs/install.md, "Python: pip"):

    pip install --no-build-isolation .          # builds, then installs meshstore
    pip wheel --no-build-isolation --no-deps .  # a wheel for machines of this kind

Offline, with Debian's tools: setuptools, wheel, CMake, Ninja, pybind11 and
the C++ dependencies of scripts/setup.sh. The extension is the CMake
target meshstore_python, built in build-wheel/ (or taken from an existing
build: MESHSTORE_BUILD_DIR=build, after scripts/build.sh). The package is
everything CMake puts in <build>/python/meshstore: the pure modules and
the _native extension, which links Debian's shared libraries (CAF,
spdlog, OpenSSL, ...), so the wheel installs where those are installed.
"""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(HERE, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(meshstore VERSION ([0-9.]+)", f.read()).group(1)


def built_package():
    """The package CMake built in <build>/python/meshstore, staged: built
    now, unless MESHSTORE_BUILD_DIR names a build."""
    build = os.environ.get("MESHSTORE_BUILD_DIR")
    if build:
        build = os.path.abspath(build)
    else:
        build = os.path.join(HERE, "build-wheel")
        subprocess.run(["cmake", "-S", HERE, "-B", build, "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=Release"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "meshstore_python"], check=True)
    package = os.path.join(build, "python", "meshstore")
    if not any(n.startswith("_native") for n in os.listdir(package)):
        raise SystemExit(f"setup.py: no _native extension in {package}: build the "
                         "meshstore_python target first")
    # Staged under build-wheel/: what setuptools writes next to the package
    # (its egg-info) stays out of the CMake build.
    stage = os.path.join(HERE, "build-wheel", "stage")
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(package, os.path.join(stage, "meshstore"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return stage


class BinaryDistribution(Distribution):
    """A wheel for this platform and interpreter: the package holds a
    compiled extension."""

    def has_ext_modules(self):
        return True


class StrippedBuildPy(build_py):
    """Copies the package, then strips the extension's debug info (about
    230 MB of the build's 300 MB), as `cmake --install --strip` does."""

    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "meshstore")
        for name in os.listdir(package):
            if name.startswith("_native") and name.endswith(".so"):
                subprocess.run(["strip", "--strip-debug", os.path.join(package, name)], check=True)


PACKAGE_DIR = built_package()

setup(
    name="meshstore",
    version=version(),
    description="meshstore: a distributed tensor store on an actor runtime (Python package)",
    package_dir={"": PACKAGE_DIR},
    packages=["meshstore", "meshstore.actor", "meshstore.torchstore"],
    package_data={"meshstore": ["_native*.so"]},
    python_requires=">=3.11",
    distclass=BinaryDistribution,
    cmdclass={"build_py": StrippedBuildPy},
    # setuptools' own scratch, kept out of the CMake build directory.
    options={"build": {"build_base": os.path.join(HERE, "build-wheel", "setuptools")},
             "bdist_wheel": {"bdist_dir": os.path.join(HERE, "build-wheel", "bdist")}},
)
