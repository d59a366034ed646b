"""pip install ./python: builds tessera._tessera with the project's CMake
(the parent folder; Debian's pybind11-dev and the C++ dependencies of
scripts/build.sh must be installed) for the interpreter running pip.

TESSERA_CMAKE_BUILD_DIR=DIR builds in an existing build folder instead of a
new one (only the extension's target, so nothing built there is redone)."""

import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not (ROOT / "CMakeLists.txt").exists():
            raise RuntimeError(f"{ROOT} is not Tessera's source tree: pip install ./python from a checkout")
        build = pathlib.Path(os.environ.get("TESSERA_CMAKE_BUILD_DIR") or (pathlib.Path(self.build_temp) / "cmake"))
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DTESSERA_PYTHON=ON",
                     f"-DPython3_EXECUTABLE={sys.executable}"]
        if not (build / "CMakeCache.txt").exists():
            configure += ["-DCMAKE_BUILD_TYPE=Release", "-DTESSERA_WERROR=OFF"]
        subprocess.check_call(configure)
        jobs = str(os.environ.get("TESSERA_BUILD_JOBS") or os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "tessera_python", "-j", jobs])
        built = sorted((build / "python" / "tessera").glob("_tessera*.so"))
        if not built:
            raise RuntimeError(f"the build left no _tessera*.so in {build / 'python' / 'tessera'}")
        dest = pathlib.Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], dest)


setup(
    name="tessera",
    version="0.1.0",
    description="PyTorch models with embedding tables on Tessera's parameter servers",
    packages=["tessera"],
    ext_modules=[CMakeExtension("tessera._tessera")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
