"""The OpenAI-compatible HTTP routes (Starlette) over an `engine.Engine`.

    POST /v1/chat/completions   chat, instruct or thinking (`protocol` has the switch)
    POST /v1/completions        raw text continuation (no chat template)
    GET  /v1/models             the one served model
    GET  /health                status, admitted requests, engine counters

Streaming (`stream: true`) sends server-sent events in OpenAI's chunk
format: a first chunk with the role, then `reasoning_content` and `content`
deltas, a last chunk per choice with its `finish_reason`, optionally a usage
chunk, then `data: [DONE]`. With the continuous engine the deltas go out as
the tokens are decoded (the engine reports a streamed job's tokens after
every chunk of `--chunk_steps` steps): each carries the text that no later
token can change (`output.Stream`), and the end of a choice sends what
remains of its final texts, so the deltas add up to the non-streamed
response exactly. The static engine reports nothing before the end: its
deltas are cut from the finished completion (`output.deltas`).

Every request holds one engine slot from admission to the end of its
response; a full engine answers 503. A client that goes away while its
request waits (streaming or not) cancels the job, which the engine then
skips, and the slot is released at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Mapping

from starlette import applications, exceptions, requests, responses, routing

from nemocascade.rollout import modes as modes_lib
from nemocascade.serve import engine as engine_lib, output, protocol, transport


@dataclasses.dataclass(frozen=True)
class Model:
    """What the routes need of a loaded model.

    Attributes:
      name: the `model` id clients send (and `/v1/models` lists).
      tok: tokenizer; template: chat template.
      max_seq_len: context length (prompt + completion tokens).
      budgets: thinking budget per effort ("low"/"medium"/"high"; None = unlimited).
      defaults: temperature, top_p, top_k, effort ("none"/"low"/...), max_tokens.
    """

    name: str
    tok: object
    template: object
    max_seq_len: int
    budgets: Mapping[str, int | None]
    defaults: Mapping[str, object]

    def mode(self, effort: str) -> modes_lib.Mode:
        if effort == "none":
            return modes_lib.get("instruct", self.tok, self.template)
        return modes_lib.get("thinking", self.tok, self.template, self.budgets[effort])


def _error(e: protocol.ApiError) -> responses.JSONResponse:
    return responses.JSONResponse(e.body(), status_code=e.status)


async def _body(request: requests.Request):
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise protocol.ApiError(400, f"malformed JSON body: {e}", None, "invalid_json") from None


class Routes:
    """Request handling bound to one model and one engine."""

    def __init__(self, model: Model, engine: engine_lib.Engine):
        self.model, self.engine = model, engine
        self._modes = {e: model.mode(e) for e in protocol.EFFORTS}
        self._raw_stop = self._modes["none"].stop_ids  # completions stop at the end of a turn

    # Shared -----------------------------------------------------------------
    def _check_model(self, name: str | None) -> None:
        if name is not None and name != self.model.name:
            raise protocol.ApiError(
                404,
                f"The model `{name}` does not exist (serving `{self.model.name}`)",
                "model",
                "model_not_found",
            )

    def _max_tokens(self, prompt_len: int, asked: int | None) -> int:
        room = self.model.max_seq_len - prompt_len
        if room <= 0 or (asked is not None and asked > room):
            raise protocol.ApiError(
                400,
                f"This model's maximum context length is {self.model.max_seq_len} tokens; the "
                f"prompt has {prompt_len} and max_tokens asks for {asked or 'at least 1'} more",
                "messages",
                "context_length_exceeded",
            )
        return asked if asked is not None else min(int(self.model.defaults["max_tokens"]), room)

    def _submit(self, jobs: list[engine_lib.Job], events: asyncio.Queue | None = None):
        """The jobs' futures; with `events`, their token reports and ends are queued there."""
        try:
            self.engine.acquire()
        except engine_lib.QueueFull as e:
            raise protocol.ApiError(
                503, f"server busy: {e}; retry later", None, "queue_full"
            ) from None
        try:
            if events is None:
                return [self.engine.submit(j) for j in jobs]
            loop = asyncio.get_running_loop()

            def post(item) -> None:  # from the engine's thread
                with contextlib.suppress(RuntimeError):  # the event loop is gone (shutdown)
                    loop.call_soon_threadsafe(events.put_nowait, item)

            futures = []
            for n, job in enumerate(jobs):
                f = self.engine.submit(job, lambda k, ids, n=n: post(("tokens", n, k, ids)))
                f.add_done_callback(lambda _: post(("done",)))
                futures.append(f)
            return futures
        except Exception:
            self.engine.release()
            raise

    async def _collect(self, futures, request) -> list[list[engine_lib.Output]]:
        try:
            return [await transport.wait(f, request) for f in futures]
        finally:
            for f in futures:
                f.cancel()

    def _respond(self, jobs, request, build, stream_events):
        """JSON response, or an SSE stream; the slot is released when either ends.

        `stream_events(updates)` turns `transport.updates` items into SSE strings.
        """
        queue = asyncio.Queue() if stream_events else None
        futures = self._submit(jobs, queue)

        if not stream_events:

            async def whole():
                try:
                    return responses.JSONResponse(build(await self._collect(futures, request)))
                except transport.ClientGone:
                    return responses.Response(status_code=499)
                finally:
                    self.engine.release()

            return whole()

        async def events():
            try:
                async for piece in stream_events(transport.updates(futures, queue, request)):
                    yield piece
                yield "data: [DONE]\n\n"
            except transport.ClientGone:
                return
            except protocol.ApiError as e:
                yield transport.sse(e.body())
            except Exception as e:  # the stream has started: report in-band
                logging.exception("stream failed")
                yield transport.sse(protocol.ApiError(500, f"internal error: {e}").body())
            finally:
                for f in futures:
                    f.cancel()
                self.engine.release()

        return responses.StreamingResponse(events(), media_type="text/event-stream")

    # Chat -----------------------------------------------------------------------
    async def chat(self, request: requests.Request):
        req = protocol.parse_chat(await _body(request), self.model.defaults)
        self._check_model(req.model)
        mode, s = self._modes[req.effort], req.sampling
        try:
            prompt_ids = mode.prompt(self.model.tok, req.messages)
        except (ValueError, KeyError) as e:
            raise protocol.bad(
                "messages", f"cannot be rendered by the chat template: {e}"
            ) from None
        job = engine_lib.Job(
            tuple(prompt_ids),
            mode,
            s.method,
            self._max_tokens(len(prompt_ids), s.max_tokens),
            s.n,
            s.seed,
        )
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model.name,
        }

        def texts(ids):
            return output.chat_texts(self.model.tok, ids, mode, s.stop)

        def finish(out, t):
            return "length" if out.truncated and not t.stopped_by_string else "stop"

        def counts(outs):
            reasoning = [output.reasoning_tokens(o.token_ids, mode) for o in outs]
            return protocol.usage(
                len(prompt_ids),
                sum(len(o.token_ids) for o in outs),
                None if mode.name == "instruct" else sum(reasoning),
            )

        def fields(t):
            d = {"content": t.content}
            if mode.name != "instruct":
                d["reasoning_content"] = t.reasoning
            return d

        def build(results):
            outs = results[0]
            choices = []
            for i, o in enumerate(outs):
                t = texts(o.token_ids)
                msg = {"role": "assistant", **fields(t)}
                choices.append(
                    {"index": i, "message": msg, "finish_reason": finish(o, t), "logprobs": None}
                )
            return {**head, "object": "chat.completion", "choices": choices, "usage": counts(outs)}

        def stable(ids):
            return output.stable_chat(self.model.tok, ids, mode, s.stop)

        async def stream(updates):
            chunk = {**head, "object": "chat.completion.chunk"}

            def sse(i, delta, finish_reason=None):
                choice = {"index": i, "delta": delta, "finish_reason": finish_reason}
                return transport.sse({**chunk, "choices": [choice]})

            first = [
                {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                for i in range(s.n)
            ]
            yield transport.sse({**chunk, "choices": first})
            streams = [output.Stream(stable) for _ in range(s.n)]
            async for item in updates:
                if item[0] == "tokens":
                    _, _, k, ids = item
                    for name, piece in streams[k].update(ids):
                        yield sse(k, {name: piece})
                    continue
                outs = item[1][0]
                for i, o in enumerate(outs):
                    t = texts(o.token_ids)
                    final = fields(t)
                    if streams[i].sent:
                        pieces = streams[i].finish(final)
                    else:  # nothing streamed (static engine): token-sized pieces
                        pieces = output.deltas(lambda ids: fields(texts(ids)), o.token_ids, final)
                    for name, piece in pieces:
                        yield sse(i, {name: piece})
                    yield sse(i, {}, finish(o, t))
                if s.include_usage:
                    yield transport.sse({**chunk, "choices": [], "usage": counts(outs)})

        return self._respond([job], request, build, stream if s.stream else None)

    # Completions ---------------------------------------------------------------
    async def completions(self, request: requests.Request):
        req = protocol.parse_completion(await _body(request), self.model.defaults)
        self._check_model(req.model)
        s, tok, mode = req.sampling, self.model.tok, self._modes["none"]
        encoded = [tok.encode(p) for p in req.prompts]
        if any(not ids for ids in encoded):
            raise protocol.bad("prompt", "an empty prompt has no token to continue from")
        jobs = [
            engine_lib.Job(
                tuple(ids), mode, s.method, self._max_tokens(len(ids), s.max_tokens), s.n, s.seed
            )
            for ids in encoded
        ]
        head = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model.name,
        }

        def text(ids):
            return output.completion_text(tok, ids, self._raw_stop, s.stop)

        def rows(results):
            return [o for outs in results for o in outs]

        def finish(o, cut):
            return "length" if o.truncated and not cut else "stop"

        def counts(results):
            n_gen = sum(len(o.token_ids) for o in rows(results))
            return protocol.usage(sum(len(e) for e in encoded), n_gen)

        def build(results):
            choices = []
            for i, o in enumerate(rows(results)):
                t, cut = text(o.token_ids)
                choices.append(
                    {"index": i, "text": t, "finish_reason": finish(o, cut), "logprobs": None}
                )
            return {
                **head,
                "object": "text_completion",
                "choices": choices,
                "usage": counts(results),
            }

        starts = [sum(j.n for j in jobs[:n]) for n in range(len(jobs))]  # job -> first choice

        def chunk(i, piece, finish_reason=None):
            c = {"index": i, "text": piece, "finish_reason": finish_reason, "logprobs": None}
            return transport.sse({**head, "object": "text_completion", "choices": [c]})

        async def stream(updates):
            streams = [
                output.Stream(
                    lambda ids: output.stable_completion(tok, ids, self._raw_stop, s.stop)
                )
                for _ in range(sum(j.n for j in jobs))
            ]
            async for item in updates:
                if item[0] == "tokens":
                    _, n, k, ids = item
                    for _, piece in streams[starts[n] + k].update(ids):
                        yield chunk(starts[n] + k, piece)
                    continue
                results = item[1]
                for i, o in enumerate(rows(results)):
                    t, cut = text(o.token_ids)
                    if streams[i].sent:
                        pieces = streams[i].finish({"text": t})
                    else:
                        pieces = output.deltas(
                            lambda ids: {"text": text(ids)[0]}, o.token_ids, {"text": t}
                        )
                    for _, piece in pieces:
                        yield chunk(i, piece)
                    yield chunk(i, "", finish(o, cut))
                if s.include_usage:
                    yield transport.sse(
                        {
                            **head,
                            "object": "text_completion",
                            "choices": [],
                            "usage": counts(results),
                        }
                    )

        return self._respond(jobs, request, build, stream if s.stream else None)

    # Info ------------------------------------------------------------------------
    async def models(self, request: requests.Request):
        card = {
            "id": self.model.name,
            "object": "model",
            "created": 0,
            "owned_by": "nemocascade",
            "max_model_len": self.model.max_seq_len,
        }
        return responses.JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: requests.Request):
        e = self.engine
        return responses.JSONResponse(
            {"status": "ok", "active": e.active, "max_queue": e.max_queue, "engine": dict(e.stats)}
        )


def _guard(handler):
    """ApiError -> its status and body; anything else -> a 500 error object."""

    async def endpoint(request):
        try:
            result = await handler(request)
            return await result if asyncio.iscoroutine(result) else result
        except protocol.ApiError as e:
            return _error(e)
        except Exception as e:
            logging.exception("request failed")
            return _error(protocol.ApiError(500, f"internal error: {type(e).__name__}: {e}"))

    return endpoint


async def _http_error(request, exc: exceptions.HTTPException):
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return _error(
        protocol.ApiError(
            exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", None, code
        )
    )


def build_app(model: Model, engine: engine_lib.Engine) -> applications.Starlette:
    r = Routes(model, engine)
    return applications.Starlette(
        routes=[
            routing.Route("/v1/chat/completions", _guard(r.chat), methods=["POST"]),
            routing.Route("/v1/completions", _guard(r.completions), methods=["POST"]),
            routing.Route("/v1/models", _guard(r.models), methods=["GET"]),
            routing.Route("/health", _guard(r.health), methods=["GET"]),
        ],
        exception_handlers={exceptions.HTTPException: _http_error},
    )
