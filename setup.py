"""What pyproject.toml cannot say: a wheel carries the BPF DCTCP beside the Rust binaries
(bloatlab/_bin), built by bpf/build.sh where the building machine can (BTF, clang, bpftool,
libbpf-dev); elsewhere the wheel has none and cc = "dctcp" needs the kernel's own. The object
is CO-RE: built against one kernel's BTF, it loads on others that have BTF."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithBpf(build_py):
    def run(self):
        super().run()
        # An editable install finds target/bpf (make build's) from the checkout instead.
        if getattr(self, "editable_mode", False) or not (HERE / "bpf" / "build.sh").is_file():
            return
        out = Path(self.build_lib) / "bloatlab" / "_bin"
        work = Path(self.get_finalized_command("build").build_temp) / "bpf"
        subprocess.run(["sh", str(HERE / "bpf" / "build.sh"), str(out), str(work)], check=False)


setup(cmdclass={"build_py": BuildPyWithBpf})
