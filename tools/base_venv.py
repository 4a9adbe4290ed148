"""Create a virtual environment that sees this interpreter's packages, even when it is itself a venv.

`python -m venv --system-site-packages` links a venv to the *base* interpreter's site-packages, so a venv
made from another venv (a GPU image whose `python3` is `/opt/torch/.venv/bin/python3`, say) does not see
the packages that interpreter holds — torch and triton among them. Here the new venv gets a `.pth` file
listing this interpreter's site-packages instead: its own packages come first, the base's after, and pip
sees both as installed. Run it with the interpreter whose packages the venv should see:

    python3 tools/base_venv.py .venv
"""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "_tileinfer_base_site.pth"


def base_site_dirs() -> list[str]:
    """This interpreter's site-packages (venv or not), user site excluded, in sys.path order."""
    dirs = list(site.getsitepackages())
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if path not in dirs:
            dirs.append(path)
    return [d for d in dirs if Path(d).is_dir()]


def create(venv: Path) -> Path:
    """Create `venv` (if absent) and write the .pth; returns the .pth's path."""
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    pth = Path(purelib) / PTH_NAME
    pth.write_text("".join(f"{d}\n" for d in base_site_dirs()))
    return pth


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/base_venv.py VENV_DIR")
    print(create(Path(sys.argv[1])))
