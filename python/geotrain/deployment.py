"""Starting geotrain's servers and netsim for Python leaders, and configs for torch models.

    servers = serve("my.yaml", out="runs")   # `geotrain serve my.yaml --out runs`, in the background
    servers.config                           # <run>/config.yaml: what every leader reads
    ...                                      # start one leader per region (OuterSync)
    servers.wait()                           # the summary, report and plots are written

`geotrain serve CONFIG` is `geotrain run CONFIG` with `worker.external: true`: it starts the
servers and netsim only, writes the run folder, prints the endpoints, waits until every region's
leader has logged its `done` event, then stops the servers and writes summary.json and report.md.
"""

import os
import shutil
import subprocess
import time

from geotrain import _core


def find_binary():
    """The geotrain binary: $GEOTRAIN_BINARY, the build's bin/ next to this package
    (build/python/geotrain -> build/bin/geotrain), or `geotrain` on PATH."""
    env = os.environ.get("GEOTRAIN_BINARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.normpath(os.path.join(here, "..", "..", "bin", "geotrain"))
    if os.path.exists(built):
        return built
    found = shutil.which("geotrain")
    if found:
        return found
    raise FileNotFoundError("the geotrain binary was not found: set GEOTRAIN_BINARY, or build it "
                            "(cmake --build build --target geotrain)")


def config_for_model(base_config, named_parameters, out_path, critical=None):
    """Writes `base_config` to `out_path` with model.tensors = the named parameters' table
    ([(name, tensor or size)], in order), and model.critical when given: the config the servers
    need for a model only Python knows. A relative run.wan_profile is kept pointing at the same
    file (a profile's name, such as global-3, is kept as it is). Returns out_path."""
    with open(base_config, encoding="utf-8") as f:
        text = f.read()
    tensors = []
    for name, p in named_parameters:
        size = p if isinstance(p, int) else int(p.numel())
        tensors.append((name, size))
    out = _core.with_model_tensors(text, tensors, critical,
                                   os.path.dirname(os.path.abspath(base_config)))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(out)
    return out_path


class Servers:
    """A running `geotrain serve`: the run folder, its resolved config, and the process."""

    def __init__(self, process, run_dir):
        self.process = process
        self.run_dir = run_dir
        self.config = os.path.join(run_dir, "config.yaml")

    def wait(self, timeout=None):
        """Waits for `geotrain serve` to finish (after every leader's `done`); its exit code."""
        return self.process.wait(timeout)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def serve(config, out="runs", binary=None, startup_timeout=60, stdout=None, extra_args=()):
    """Starts `geotrain serve CONFIG --out OUT` and returns once its servers and netsim accept
    connections (the run folder's endpoints.json exists). Raises RuntimeError with the log tail
    when it exits first."""
    binary = binary or find_binary()
    os.makedirs(out, exist_ok=True)
    before = set(os.listdir(out))
    process = subprocess.Popen([binary, "serve", config, "--out", out, *extra_args], stdout=stdout,
                               stderr=subprocess.STDOUT if stdout is not None else None)
    deadline = time.monotonic() + startup_timeout
    while True:
        for name in sorted(set(os.listdir(out)) - before):
            run_dir = os.path.join(out, name)
            if os.path.exists(os.path.join(run_dir, "endpoints.json")):
                return Servers(process, run_dir)
        if process.poll() is not None:
            raise RuntimeError(f"geotrain serve {config} exited with {process.returncode} before "
                               "its servers were up (its output says why)")
        if time.monotonic() > deadline:
            process.terminate()
            raise RuntimeError(f"geotrain serve {config}: servers not up within {startup_timeout} s")
        time.sleep(0.05)
