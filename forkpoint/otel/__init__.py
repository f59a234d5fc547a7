"""A session as an OpenTelemetry trace: the GenAI semantic conventions, plus what OpenInference
readers (Phoenix) and Langfuse read; sent after the fact (:mod:`forkpoint.exporters.otel`) or live
while recording (:class:`LiveExport`). See ``docs/otel.md``.

The trace (GenAI conventions: opentelemetry.io/docs/specs/semconv/gen-ai/, "Development" status;
OpenInference: github.com/Arize-ai/openinference, ``spec/semantic_conventions.md``):

* a root ``invoke_agent`` span (kind INTERNAL, OpenInference ``AGENT``) for the session: the
  header's ``span_id``, from the session's creation to its ``end`` event; with content, the task
  (the first user message) in and the final answer (the last model text, or what a framework's
  answer tool took) out;
* one ``{gen_ai.operation.name} {gen_ai.request.model}`` span per model call (kind CLIENT,
  ``LLM``) with the ``gen_ai.request.*``, ``gen_ai.response.*`` and ``gen_ai.usage.*`` attributes the
  recording holds and their ``llm.*`` twins;
* one ``execute_tool {gen_ai.tool.name}`` span per tool call (kind INTERNAL, ``TOOL``), a child of
  the model call whose ``tool_calls`` it answers (then with ``gen_ai.tool.call.id``), else of its
  recorded parent;
* checkpoints and notes as span events (``forkpoint.checkpoint``, ``forkpoint.note``).

Ids are the recorded ``span_id`` s and a trace id derived from the session id for the default
export; other options (content, a service name, ``--new-trace``) derive other ids from those, so a
backend that keeps the first copy of a span id still receives an export with other options.
Start and end times are the recorded ``ts`` and ``ts + duration_ms`` (a span whose duration is
unknown has ``forkpoint.duration_unknown``). Content (messages, tool arguments and results, tool
definitions, note texts, the command line, override values) is exported only with ``content``, as
the conventions recommend.

This package sits below the runtimes' entry points (:mod:`forkpoint.api` starts a
:class:`LiveExport`); :mod:`.attributes` and :mod:`.spans` are pure Python, :mod:`.sdk` and
:mod:`.live` need the ``otel`` extra when used.
"""

from .live import LiveExport, LiveReport
from .sdk import SCOPE, Sender, SpanFactory, otlp_traces_url, shown
from .spans import (
    SpanEvent,
    SpanPlan,
    TraceBuilder,
    parent_link,
    plan,
    span_id_for,
    stream,
    trace_id_for,
    variant_for,
)

__all__ = [
    "SCOPE",
    "LiveExport",
    "LiveReport",
    "Sender",
    "SpanEvent",
    "SpanFactory",
    "SpanPlan",
    "TraceBuilder",
    "otlp_traces_url",
    "parent_link",
    "plan",
    "shown",
    "span_id_for",
    "stream",
    "trace_id_for",
    "variant_for",
]
