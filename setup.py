"""Builds the Python package with Mosaic's CMake and puts the pieces into it: the extension
_mosaic, libmosaic.so beside it (the extension's run path is $ORIGIN), the CLI's Python host and
the bundled backend plugins (torch) in mosaic/plugins, where libmosaic.so looks for them, and
the mosaic program in mosaic/bin (child runs: bench's processes, simulate's profiling).

MOSAIC_BUILD_DIR=DIR reuses a configured build tree (scripts/test.sh's build/, brought up to
date); otherwise the tree is build-pip/ (a full build: about 15 minutes on 2 cores)."""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuildPy(build_py):
    def run(self):
        super().run()
        build = os.environ.get("MOSAIC_BUILD_DIR") or os.path.join(ROOT, "build-pip", "cmake")
        build = os.path.abspath(build)
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                            "-DMOSAIC_BUILD_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "mosaic_python", "mosaic_python_host", "mosaic"], check=True)
        torch = os.path.join(build, "plugins")
        package = os.path.join(self.build_lib, "mosaic")
        # The extension built for this interpreter (its ABI tag), not another Python's.
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        extensions = glob.glob(os.path.join(build, "python", "mosaic", "_mosaic" + suffix))
        if not extensions:
            found = [os.path.basename(f) for f in glob.glob(os.path.join(build, "python", "mosaic", "_mosaic*.so"))]
            raise RuntimeError(f"no _mosaic{suffix} (for {sys.executable}) in {build}/python/mosaic, found {found}: "
                               "is pybind11-dev installed, and was the tree configured with "
                               f"-DPython3_EXECUTABLE={sys.executable}?")
        for f in extensions + [os.path.join(build, "libmosaic.so"), os.path.join(build, "python",
                                                                                 "libmosaic_python_host.so")]:
            shutil.copy2(f, package)
        # The mosaic program, which the calls that run child processes execute (bench's
        # processes, simulate's profiling): bin/mosaic, found beside libmosaic.so.
        os.makedirs(os.path.join(package, "bin"), exist_ok=True)
        shutil.copy2(os.path.join(build, "mosaic"), os.path.join(package, "bin", "mosaic"))
        # Bundled backend plugins, where this build makes them (libtorch-dev installed).
        subprocess.run(["cmake", "--build", build, "--target", "mosaic_torch"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if glob.glob(os.path.join(torch, "libmosaic_*.so")):
            os.makedirs(os.path.join(package, "plugins"), exist_ok=True)
            for f in glob.glob(os.path.join(torch, "libmosaic_*.so")):
                shutil.copy2(f, os.path.join(package, "plugins"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # platform wheel: the package carries shared libraries
        return True


setup(packages=["mosaic"], package_dir={"": "python"}, cmdclass={"build_py": CMakeBuildPy},
      distclass=BinaryDistribution, options={"build": {"build_base": os.path.join("build-pip", "setuptools")}})
