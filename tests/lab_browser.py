"""JupyterLab in a real browser: a server on 127.0.0.1 with a token, driven by Playwright through Debian's
chromium (Playwright's own browser downloads are not used). Shared by tests/test_browser.py and
tools/notebook_screenshots.py.
"""

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("TILEINFER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def missing():
    """Why a browser test cannot run here, or None."""
    if not Path(CHROMIUM).is_file():
        return f"no chromium at {CHROMIUM}: run tools/ci_deps.sh (apt-get install chromium)"
    for module in ("playwright", "jupyterlab", "ipywidgets"):
        try:
            __import__(module)
        except ImportError:
            return f"the Python package {module} is not installed: pip install -e .[browser]"
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quiet_settings(directory):
    """User settings without the news prompt, which would cover part of every screenshot."""
    path = directory / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"fetchNews": "false", "checkForUpdates": false}')
    return directory


@contextlib.contextmanager
def jupyter_lab(root_dir, timeout_s=90):
    """A JupyterLab server over `root_dir`; yields its base URL with the token as a query string."""
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
               JUPYTER_CONFIG_DIR=str(Path(root_dir) / ".jupyter-config"),
               JUPYTERLAB_SETTINGS_DIR=str(_quiet_settings(Path(root_dir) / ".lab-settings")))
    log = open(Path(root_dir) / ".jupyter-lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}", "--LabApp.expose_app_in_browser=True",
         "--allow-root",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root_dir)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError("JupyterLab did not start:\n" + (Path(root_dir) / ".jupyter-lab.log").read_text()[-3000:])
                time.sleep(0.5)
        try:
            yield base, token
        except BaseException:
            log.flush()
            print("JupyterLab's log, last lines:\n" + (Path(root_dir) / ".jupyter-lab.log").read_text()[-3000:])
            raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def copy_notebooks(dest, names=None, source=REPO / "notebooks"):
    """Copy notebooks into `dest`/notebooks (the browser may save them; the repository's stay output-free),
    beside a link to the repository's bench/, whose recorded results they read as ../bench/."""
    dest = Path(dest)
    (dest / "notebooks").mkdir(parents=True, exist_ok=True)
    (dest / "bench").symlink_to(REPO / "bench", target_is_directory=True)
    for path in sorted(Path(source).glob("*.ipynb")):
        if names is None or path.stem in names:
            shutil.copy(path, dest / "notebooks" / path.name)
    return dest


@contextlib.contextmanager
def browser_page(width=1280, height=900):
    """A Playwright page in headless Debian chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        console = []
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(120_000)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text[:300]}")
                    if m.type in ("error", "warning") else None)
            yield page
        except BaseException:
            print("the browser's console errors and warnings:\n" + "\n".join(console[-30:]))
            raise
        finally:
            browser.close()


def open_notebook(page, base, token, name):
    """Open notebooks/<name>.ipynb in JupyterLab's single-document mode and wait for its kernel."""
    page.goto(f"{base}/lab/tree/notebooks/{name}.ipynb?token={token}&reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function("() => !!window.jupyterapp", timeout=60_000)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    wait_idle(page)


def wait_idle(page, timeout_ms=300_000):
    """Until the kernel is idle and no cell is queued or running ([*])."""
    page.wait_for_function(
        """() => {
            const status = [...document.querySelectorAll('.jp-StatusBar-TextItem')].map(e => e.textContent).join(' ');
            const queued = [...document.querySelectorAll('.jp-InputArea-prompt')].some(p => p.textContent.includes('*'));
            return status.includes('Idle') && !queued;
        }""", timeout=timeout_ms, polling=500)


def run_all(page, timeout_ms=300_000):
    """Shift+Enter through every cell from the first (Ctrl+Enter on the last: no new cell), then wait
    until every code cell shows its execution count."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    count = cells.count()
    cells.first.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    for i in range(count):
        page.keyboard.press("Shift+Enter" if i < count - 1 else "Control+Enter")
        time.sleep(0.2)
    page.wait_for_function(
        r"""n => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
            return prompts.length > 0 && prompts.every(p => /\[\d+\]/.test(p));
        }""", arg=count, timeout=timeout_ms, polling=500)
    wait_idle(page, timeout_ms)
