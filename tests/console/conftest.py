"""The console tests' fixtures: one `tidemq cluster up --console` of conf/1m-1s-dev per
module, one headless chromium per module, and a fresh 1280x800 tab per test that must log
no browser-console error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.console.browser import Page, chromium, cluster_with_console


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The nodes' addresses ("namesrv", "master", "slave") and the console's "url"."""
    with cluster_with_console(tmp_path_factory.mktemp("console")) as addresses:
        yield addresses


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, cluster) -> Iterator[Page]:
    p = Page(browser, cluster["url"])
    yield p
    p.close()
    assert p.errors == [], p.errors
