"""Shared by the pytest suites under clients/ (python/tests, http/tests): lines in the
repository's test format (PASS/FAIL/SKIP name), so that tests/run.sh counts these tests with
the C ones."""


def pytest_runtest_logreport(report):
    suite = "http" if "/http/" in report.nodeid or report.nodeid.startswith("http/") else "python"
    name = suite + ":" + report.nodeid.split("::")[-1]
    if report.when == "call" and not report.skipped:
        print("\n%s %s" % ("PASS" if report.passed else "FAIL", name))
    elif report.skipped:
        print("\nSKIP %s: %s" % (name, report.longrepr[2] if isinstance(report.longrepr, tuple) else ""))
    elif report.failed:
        print("\nFAIL %s (%s)" % (name, report.when))
