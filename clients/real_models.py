"""Where the real models that .ci/models fetched from PyPI are, for the pytest suites under
clients/ (python/tests, http/tests)."""
import os

REAL_WHY = "not fetched: .ci/models could not reach PyPI (make test runs it)"


def real_model(name):
    """The path of a real model .ci/models fetched and checked (its ".NAME.ok" mark), or None."""
    d = os.path.join(os.environ.get("RINGLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ringlm"),
                     "models")
    p = os.path.join(d, name)
    return p if os.path.exists(p) and os.path.exists(os.path.join(d, "." + name + ".ok")) else None
