"""store.cli.until_signal: how a long-running command stops on SIGTERM/SIGINT (real signals
sent to this process)."""

import signal

import trio

from store.cli import until_signal


def test_a_signal_cancels_the_body_and_answers_128_plus_it(capsys):
    async def body() -> int:
        signal.raise_signal(signal.SIGTERM)
        await trio.sleep_forever()
        return 0  # never: cancelled

    assert trio.run(until_signal, body) == 143
    assert capsys.readouterr().err.strip() == "tidemq: stopped by SIGTERM: what was done so far is kept"


def test_a_graceful_body_winds_down_itself_on_the_first_signal():
    stop = trio.Event()
    after: list[str] = []

    async def body() -> int:
        signal.raise_signal(signal.SIGINT)
        await stop.wait()  # not cancelled: the body still runs its own ending
        await trio.lowlevel.checkpoint()
        after.append("wound down")
        return 0

    assert trio.run(lambda: until_signal(body, graceful=stop)) == 130
    assert stop.is_set() and after == ["wound down"]


def test_a_second_signal_cancels_a_graceful_body_that_does_not_end():
    stop = trio.Event()

    async def body() -> int:
        signal.raise_signal(signal.SIGTERM)
        await stop.wait()
        signal.raise_signal(signal.SIGTERM)
        await trio.sleep_forever()  # a stuck ending: the second signal ends it
        return 0

    assert trio.run(lambda: until_signal(body, graceful=stop)) == 143
