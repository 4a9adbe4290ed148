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
