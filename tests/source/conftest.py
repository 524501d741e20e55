"""Fork only in a clean process (see tests/isolation.py)."""

import pytest

from tests.isolation import ran_isolated


@pytest.fixture
def isolate_fork(request):
    return lambda: ran_isolated(request)
