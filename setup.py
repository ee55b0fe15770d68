"""Builds the optional compiled accelerators store._accel (store/_accel.pyx),
wire._send_codec (wire/_send_codec.pyx) and wire._remoting_codec (wire/_remoting_codec.pyx); everything else is in pyproject.toml. A build that cannot compile it (no C compiler, no Python headers)
warns and still installs: store.accel then finds no store._accel and the pure-Python
codec runs."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 (any build failure: fall back to pure Python)
            self.warn(f"tidemq: the compiled accelerator was not built ({e}); using pure Python")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self.warn(f"tidemq: {ext.name} was not built ({e}); using pure Python")


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []  # no Cython: pure Python
    try:
        return cythonize(
            [Extension("store._accel", ["store/_accel.pyx"], extra_compile_args=["-O2"]),
             Extension("wire._send_codec", ["wire/_send_codec.pyx"], extra_compile_args=["-O2"]),
             Extension("wire._remoting_codec", ["wire/_remoting_codec.pyx"], extra_compile_args=["-O2"])],
            compiler_directives={"language_level": "3"},
            quiet=True,
        )
    except Exception as e:  # noqa: BLE001 (a Cython error must not fail the install)
        print(f"tidemq: cannot cythonize the accelerators ({e}); using pure Python")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
