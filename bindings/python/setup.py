"""Builds the package with libspindle.so inside it.

The library is SPINDLE_LIB when that names a file, else the one `make`
builds in the spindle checkout this directory belongs to (../..).  Without
either (a copy of the package alone) nothing is bundled and the package
looks for an installed libspindle.so.0 at run time."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def find_or_build_library():
    lib = os.environ.get("SPINDLE_LIB")
    if lib:
        if not os.path.isfile(lib):
            raise SystemExit("SPINDLE_LIB=%s is not a file" % lib)
        return lib
    if os.path.isfile(os.path.join(ROOT, "Makefile")) and os.path.isfile(os.path.join(ROOT, "include", "spindle.h")):
        subprocess.check_call(["make", "-C", ROOT, "build/libspindle.so"])
        return os.path.join(ROOT, "build", "libspindle.so")
    return None


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = find_or_build_library()
        if lib:
            shutil.copyfile(os.path.realpath(lib), os.path.join(self.build_lib, "spindle", "libspindle.so"))


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
