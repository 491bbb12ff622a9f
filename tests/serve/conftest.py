"""Fixtures for the `ouro serve` tests (the binary and model fixtures come from tests/conftest.py).

  server         session-scoped servelib.Server: `ouro serve --port 0 -t 2`, default flags; .url is the
                 base URL (http://127.0.0.1:PORT). Teardown: SIGTERM, exit code 0 within 30 s.
  server_url     its base URL (str).
  serve_factory  call serve_factory("--api-key", "k", ...) for a server of one's own (same teardown,
                 unless the test stopped it itself).
  ref            ref(prompt, n, chat=True, system=None): greedy output of `ouro generate --json`.
"""
import pathlib
import sys

import pytest

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # so test modules can `import servelib`
    sys.path.insert(0, str(_HERE))

import servelib  # noqa: E402


@pytest.fixture(scope="session")
def server(ouro_bin, model_path):
    srv = servelib.Server(ouro_bin, model_path)
    yield srv
    rc = srv.stop(timeout=30)
    assert rc == 0, f"ouro serve exited {rc} on SIGTERM\nstderr:\n{srv.tail()}"


@pytest.fixture(scope="session")
def server_url(server):
    return server.url


@pytest.fixture
def serve_factory(ouro_bin, model_path):
    started = []

    def start(*flags, **kw):
        srv = servelib.Server(ouro_bin, model_path, *flags, **kw)
        started.append(srv)
        return srv

    yield start
    failures = []
    for srv in started:
        if srv.returncode is not None:
            continue  # the test stopped it and checked the exit itself
        try:
            rc = srv.stop(timeout=30)
        except AssertionError as e:
            failures.append(str(e))
            continue
        if rc != 0:
            failures.append(f"{srv.argv} exited {rc} on SIGTERM\nstderr:\n{srv.tail()}")
    assert not failures, "\n\n".join(failures)


@pytest.fixture(scope="session")
def ref(ouro_bin, model_path):
    def reference(prompt, n, chat=True, system=None):
        return servelib.reference(ouro_bin, model_path, prompt, n, chat=chat, system=system)
    return reference
