"""On/off settings of the kernels launched from now on, each starting from an environment variable: the
variants a benchmark measures with and without before one becomes the default."""

import os


class Switch:
    """`on` starts as `env` says ("0" off, anything else on; unset: `default`); `set` changes it for later
    launches, `label` says it for benchmark tables."""

    def __init__(self, env: str, default: bool = False):
        self.env = env
        self.on = os.environ.get(env, "1" if default else "0") != "0"

    def set(self, on: bool) -> None:
        self.on = bool(on)

    def label(self) -> str:
        return "on" if self.on else "off"
