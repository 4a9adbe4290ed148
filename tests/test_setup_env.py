"""Set-up on a machine whose python3 is itself a virtual environment (a GPU image's /opt/torch/.venv)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_image_python(tmp_path) -> Path:
    """A venv standing in for the GPU image's interpreter, holding a package only it has."""
    image = tmp_path / "image-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(image)], check=True)
    purelib = subprocess.run([str(image / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    pkg = Path(purelib) / "image_only_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("WHERE = 'image'\n")
    dist = Path(purelib) / "image_only_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: image-only-pkg\nVersion: 1.0\n")
    return image / "bin" / "python"


def test_system_site_packages_venv_misses_the_image_packages(tmp_path):
    """Why set-up does not use --system-site-packages: it links the base interpreter, not the venv."""
    python = make_image_python(tmp_path)
    subprocess.run([str(python), "-m", "venv", "--without-pip", "--system-site-packages", str(tmp_path / "sys")],
                   check=True)
    probe = subprocess.run([str(tmp_path / "sys" / "bin" / "python"), "-c", "import image_only_pkg"],
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "image_only_pkg" in probe.stderr


def test_base_venv_sees_the_invoking_venvs_packages(tmp_path):
    python = make_image_python(tmp_path)
    venv = tmp_path / "project-venv"
    subprocess.run([str(python), str(ROOT / "tools" / "base_venv.py"), str(venv)], check=True,
                   capture_output=True)
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sys, image_only_pkg; print(image_only_pkg.WHERE, sys.prefix)"],
        check=True, capture_output=True, text=True).stdout.split()
    assert out[0] == "image" and Path(out[1]) == venv
    # The venv's own packages come first; pip inside it sees the image's as installed.
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            check=True, capture_output=True, text=True).stdout
    assert "image-only-pkg==1.0" in listed


def test_setup_script_uses_the_pth_and_pins_torch():
    text = (ROOT / "tools" / "setup_env.sh").read_text()
    assert "tools/base_venv.py" in text and "venv --system-site-packages" not in text
    assert 'for name in ("torch", "triton")' in text and '-c "$constraints"' in text
    subprocess.run(["bash", "-n", str(ROOT / "tools" / "setup_env.sh")], check=True)


def test_offline_wheels_download_the_extras_for_the_image_and_drop_what_it_has(tmp_path):
    """tools/offline_wheels.sh with a stand-in pip: the report and dev extras' requirements (not the image's
    transformers) for the image's Python, nvtx at a version whose domain has push_range, the DFlash reference
    without its pins; the wheels of packages the image holds are removed."""
    log = tmp_path / "pip.log"
    fake = tmp_path / "python"
    fake.write_text(f"""#!/usr/bin/env bash
if [ "$1" = -m ] && [ "$2" = pip ]; then
  echo "$@" >> {log}
  while [ $# -gt 0 ]; do [ "$1" = -d ] && dest=$2; shift; done
  touch "$dest/plotly-7.1.0-py3-none-any.whl" "$dest/PyYAML-6.0-cp312-cp312-manylinux2014_x86_64.whl" \\
        "$dest/pytest_xdist-3.8.0-py3-none-any.whl" "$dest/nvtx-0.2.14-cp312-cp312-manylinux2014_x86_64.whl"
  exit 0
fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    out = tmp_path / "wheels"
    subprocess.run(["bash", str(ROOT / "tools" / "offline_wheels.sh"), str(out)], check=True, capture_output=True,
                   env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)})
    main, dflash = log.read_text().splitlines()
    assert "--python-version 3.12" in main and "--only-binary=:all:" in main
    for req in ("ipywidgets>=8", "plotly>=5", "papermill>=2.6", "pytest>=8", "pytest-xdist", "nvtx==0.2.14"):
        assert req in main.split(), req
    assert "transformers" not in main and "tileinfer" not in main
    assert "--no-deps" in dflash and "dflash==0.1.0" in dflash
    assert sorted(p.name.split("-")[0] for p in out.iterdir()) == ["nvtx", "plotly"]
