"""The serving process's heap: what start made is kept out of the cycle collector's passes
(runtime.server.settle_heap, which wsgi.py's main calls before serving)."""

import gc

from runtime import server


def test_what_start_made_is_kept_out_of_the_cycle_collectors_passes():
    # A full pass over the start's objects paused the server for hundreds of ms with a thousand
    # Realtime sockets open: the tail of their change delivery.
    before = gc.get_threshold()
    try:
        server.settle_heap()
        assert gc.get_freeze_count() > 10_000
        assert gc.get_threshold() == server.GC_THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
