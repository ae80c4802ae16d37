"""Tokens reach the HTTP side's queues in order with one event-loop wake-up per burst (``inspector.serve.loop_mail``)."""

from __future__ import annotations

import asyncio
import threading

from inspector.serve.loop_mail import LoopMail


def test_items_posted_from_threads_arrive_in_order_per_queue_with_fewer_wakeups():
    async def main():
        loop = asyncio.get_running_loop()
        mail = LoopMail(loop)
        queues = [asyncio.Queue() for _ in range(4)]
        go = threading.Barrier(4)

        def slot(i: int) -> None:
            go.wait()
            for k in range(200):
                mail.post(queues[i], (i, k))

        threads = [threading.Thread(target=slot, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        got = [[] for _ in range(4)]
        for i, q in enumerate(queues):
            for _ in range(200):
                got[i].append(await asyncio.wait_for(q.get(), 10))
        for t in threads:
            t.join()
        return got, mail.wakeups

    got, wakeups = asyncio.run(main())
    assert got == [[(i, k) for k in range(200)] for i in range(4)]
    assert 1 <= wakeups < 800, wakeups


def test_a_post_after_the_loop_closed_is_dropped_quietly():
    loop = asyncio.new_event_loop()
    mail = LoopMail(loop)
    loop.close()
    mail.post(asyncio.Queue(), "late")  # no error
    assert mail.wakeups == 0
