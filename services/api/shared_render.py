"""Concurrent `/metrics` scrapes share one render (single flight): however many ask at once, the scrape process renders
once and each of them streams that body.

A scrape that arrives while a render runs takes that render's body rather than waiting for the next one: its data
were read less than one render before it arrived, and scrapes a moment apart cost one render, not two. A scrape
arriving once a render is over starts the next one.

Each scrape sharing a render gets a handle of its own on the body file, all opened when the render is done; the file
is unlinked then, so it is freed when the last scrape closes its handle. A render nobody waits for any more still runs
to its end (the worker process cannot be interrupted) and its body is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import BinaryIO

Render = Callable[[], Awaitable[str]]  # renders a body into a file; returns its path


class SharedRender:
    """At most one render running; its body handed to every scrape that asked while it ran."""

    def __init__(self, render: Render) -> None:
        self._render = render
        self._running: asyncio.Task[None] | None = None
        self._waiting: list[asyncio.Future[BinaryIO]] = []  # the scrapes the running render will answer

    async def body(self) -> BinaryIO:
        """The running render's body, or a new render's when none runs: an open file, already unlinked (the caller
        closes it)."""
        waiter: asyncio.Future[BinaryIO] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        if self._running is None:
            self._running = asyncio.create_task(self._run())
        try:
            return await waiter
        except asyncio.CancelledError:  # just after its body was handed over, it never streams it: closed here
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                waiter.result().close()
            raise

    async def close(self) -> None:
        """Stop waiting for the running render, if any (its scrapes are cancelled)."""
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._running

    async def _run(self) -> None:
        try:
            path = await self._render()
        except asyncio.CancelledError:
            for waiter in self._finished():
                waiter.cancel()
            raise
        except Exception as exc:  # each scrape fails with it, as it would have alone
            for waiter in self._finished():
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        try:
            for waiter in self._finished():
                if not waiter.done():  # a handle of its own for each scrape still waiting
                    try:
                        waiter.set_result(open(path, "rb"))  # noqa: SIM115 - the scrape streams and closes it
                    except OSError as exc:
                        waiter.set_exception(exc)
        finally:
            os.unlink(path)

    def _finished(self) -> list[asyncio.Future[BinaryIO]]:
        """The scrapes the render that just ended answers; a scrape arriving from now on starts the next render."""
        waiting, self._waiting, self._running = self._waiting, [], None
        return waiting
