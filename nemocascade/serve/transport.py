"""The client side of a request: waiting on the engine while watching for a disconnect; SSE.

A handler awaits its jobs with `wait` (one result) or iterates `updates`
(token reports, then the results); either cancels the jobs and raises
`ClientGone` as soon as the client disconnects, so the engine skips them and
the route releases the request's slot at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json

from starlette import requests


class ClientGone(Exception):
    """The client disconnected before its response was complete (its jobs are cancelled)."""


async def disconnected(request: requests.Request) -> None:
    """Returns when the client has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def updates(futures, events: asyncio.Queue, request: requests.Request):
    """("tokens", job, row, ids) items as the engine reports them, then ("results", results).

    Raises `ClientGone` (jobs cancelled) if the client disconnects first.
    """
    left = len(futures)
    watch = asyncio.ensure_future(disconnected(request))
    try:
        while left:
            get = asyncio.ensure_future(events.get())
            done, _ = await asyncio.wait({get, watch}, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                get.cancel()
                for f in futures:
                    f.cancel()
                raise ClientGone
            item = get.result()
            if item[0] == "done":
                left -= 1
            else:
                yield item
    finally:
        watch.cancel()
    yield ("results", [f.result() for f in futures])


async def wait(future: concurrent.futures.Future, request: requests.Request):
    """The job's result, or `ClientGone` (job cancelled) if the client disconnects first."""
    result, watch = asyncio.wrap_future(future), asyncio.ensure_future(disconnected(request))
    try:
        done, _ = await asyncio.wait({result, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if result in done:
        return result.result()
    future.cancel()
    raise ClientGone


def sse(payload) -> str:
    """One server-sent event carrying `payload` as JSON."""
    return f"data: {json.dumps(payload)}\n\n"
