"""The table of endings (stompfast/_ending.py): what each way of ending does, spelt out once more.

The client's one teardown runs what a row asks for; this test is the specification each
row is held to, as tests/test_lifecycle.py is for the states. The behaviour of each
ending through a real client is tested where it happens: tests/test_client.py (close,
failure), tests/test_reconnect.py (loss, giving up), tests/test_hostile.py.
"""

from __future__ import annotations

from stompfast._ending import ENDINGS, Ending
from stompfast._lifecycle import CLOSED, CLOSING, CONNECTING, FAILED, OPEN, RECONNECTING, TRANSITIONS


def test_every_ending_has_a_row_and_every_move_is_one_the_lifecycle_allows():
    assert set(ENDINGS) == set(Ending)
    for ending, steps in ENDINGS.items():
        for source, target in steps.moves.items():
            assert target in TRANSITIONS[source], (ending, source, target)


def test_only_a_loss_keeps_the_client_going_and_hands_the_loss_to_the_supervisor():
    going = {e for e, s in ENDINGS.items() if not s.record_error}
    assert going == {Ending.LOST, Ending.CONNECT_FAILED}
    assert [e for e, s in ENDINGS.items() if s.supervisor == "hand-over"] == [Ending.LOST]
    lost = ENDINGS[Ending.LOST]
    # its subscriptions stay, to be re-established; only what the broker redelivers is dropped
    assert lost.subscriptions == "drop-unacked" and lost.moves == {OPEN: RECONNECTING}
    # and its pending requests fail now: their replies would go to the lost connection
    assert lost.fail_requests and not lost.release


def test_the_client_is_done_for_after_a_close_a_failure_or_giving_up():
    assert ENDINGS[Ending.CLOSED].moves == {CLOSING: CLOSED}
    assert ENDINGS[Ending.FAILED].moves == {OPEN: FAILED, RECONNECTING: FAILED}
    assert ENDINGS[Ending.GAVE_UP].moves == {RECONNECTING: FAILED}
    # a failure during the first connect leaves the state to connect(), which raises and closes
    assert CONNECTING not in ENDINGS[Ending.FAILED].moves
    assert ENDINGS[Ending.CONNECT_FAILED].moves == {CONNECTING: CLOSED}
    for ending in (Ending.CLOSED, Ending.FAILED, Ending.GAVE_UP):
        steps = ENDINGS[ending]
        assert steps.record_error and steps.fail_receipts and steps.subscriptions.startswith("close"), ending
    # a close forgets the subscriptions; a failure closes them with its error and leaves them listed
    assert ENDINGS[Ending.CLOSED].subscriptions == "close-and-forget"
    assert ENDINGS[Ending.FAILED].subscriptions == "close"


def test_a_link_is_closed_once_and_released_only_when_nothing_reconnects():
    assert not ENDINGS[Ending.GAVE_UP].close_link  # LOST closed it already
    assert {e for e, s in ENDINGS.items() if s.release} == {Ending.CLOSED, Ending.FAILED}
    # the transactions are told once: by the ending that closed their link
    assert {e for e, s in ENDINGS.items() if s.lose_transactions} == {Ending.CLOSED, Ending.FAILED, Ending.LOST}
    # a loss counts once, when a live link ends without our close
    assert {e for e, s in ENDINGS.items() if s.count_loss} == {Ending.FAILED, Ending.LOST}
