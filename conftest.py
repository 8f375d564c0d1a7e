"""pytest settings for the whole repository: which tests are slow, and how `make test` shares
them between CPU cores (pytest-xdist with --dist loadgroup).

Slow tests execute notebooks, servers or browsers; `make test-fast` leaves them out. nbval runs
a notebook's cells one after another in one kernel, so all cells of a notebook go to one worker.
"""
import pytest

SLOW_FILES = {"test_submit.py", "test_faults.py", "test_browser.py", "test_batch.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
            item.add_marker(pytest.mark.slow)
        elif item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
