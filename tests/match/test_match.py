"""Match keys (what identifies a request across runs) and the divergence diff."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import orjson
import pytest

import forkpoint
from forkpoint import match
from forkpoint.jsondiff import Change, format_changes, json_diff
from forkpoint.match import model_key, normalize_request, tool_key
from forkpoint.redact import scrub_json

URL = "https://api.openai.com/v1/chat/completions"
BODY = {
    "model": "gpt-4o-mini",
    "temperature": 0.2,
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
}
HEADERS = {
    "content-type": "application/json",
    "authorization": "Bearer sk-proj-" + "A" * 40,
    "user-agent": "OpenAI/Python 2.8.0",
    "x-stainless-lang": "python",
    "x-stainless-os": "Linux",
    "x-stainless-retry-count": "0",
    "x-stainless-read-timeout": "600",
    "idempotency-key": "stainless-python-retry-1111",
    "x-request-id": "req_1",
    "host": "api.openai.com",
}


def key(url: str = URL, headers: Any = None, body: Any = None, method: str = "POST") -> str:
    return model_key(normalize_request(method, url, HEADERS if headers is None else headers, body or BODY))


def test_key_ignores_volatile_headers_host_and_key_order() -> None:
    base = key()
    volatile = {
        **HEADERS,
        "authorization": "Bearer sk-proj-" + "B" * 40,
        "user-agent": "OpenAI/Python 9.9.9",
        "x-stainless-os": "MacOS",
        "x-stainless-retry-count": "2",
        "x-stainless-async": "async:asyncio",
        "idempotency-key": "stainless-python-retry-2222",
        "x-request-id": "req_2",
        "host": "127.0.0.1:8080",
        "content-type": "application/json; charset=utf-8",
    }
    assert key(headers=volatile) == base
    assert key(headers={k.upper(): v for k, v in HEADERS.items()}) == base  # header names in any case
    assert key(headers=[["Content-Type", "application/json"]]) == base  # list form
    assert key(url="http://127.0.0.1:54321/v1/chat/completions") == base
    assert key(url="https://proxy.internal:8443/v1/chat/completions") == base
    reordered = json.loads(json.dumps(dict(reversed(list(BODY.items())))))
    reordered["messages"][0] = {"content": "be brief", "role": "system"}
    assert list(reordered) != list(BODY)
    assert key(body=reordered) == base


@pytest.mark.parametrize(
    ("what", "changed"),
    [
        (
            "body content",
            {"body": {**BODY, "messages": [BODY["messages"][0], {"role": "user", "content": "2+3?"}]}},
        ),
        ("a body param", {"body": {**BODY, "temperature": 0.3}}),
        ("a list item", {"body": {**BODY, "tools": []}}),
        ("the path", {"url": "https://api.openai.com/v1/responses"}),
        ("the query", {"url": URL + "?api-version=2024-10-21"}),
        ("the method", {"method": "PUT"}),
        ("anthropic-version", {"headers": {**HEADERS, "anthropic-version": "2023-06-01"}}),
        ("anthropic-beta", {"headers": {**HEADERS, "anthropic-beta": "tools-2024-04-04"}}),
        ("content-type", {"headers": {**HEADERS, "content-type": "text/plain"}}),
    ],
)
def test_key_changes_with_what_the_model_sees(what: str, changed: dict[str, Any]) -> None:
    assert key(**changed) != key(), what


def test_anthropic_version_values_give_different_keys() -> None:
    a = key(headers={"anthropic-version": "2023-06-01"})
    b = key(headers={"anthropic-version": "2023-01-01"})
    assert a != b
    assert a == key(headers={"Anthropic-Version": "2023-06-01", "x-api-key": "sk-ant-whatever"})


def test_a_live_secret_matches_its_recorded_placeholder() -> None:
    secret = "sk-proj-" + "Z" * 40
    live = {"messages": [{"role": "user", "content": f"my key is {secret}"}]}
    recorded = scrub_json(live)
    assert secret not in json.dumps(recorded)
    assert key(body=live) == key(body=recorded)


def _jwt(issued: int) -> str:
    import base64

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    claims = {"iss": "agent@proj.iam.gserviceaccount.com", "iat": issued, "exp": issued + 3600}
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.{'s' * 43}{issued}"


TOKEN_FORM = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="


def test_a_credential_counts_in_the_key_by_its_kind_not_its_value() -> None:
    """A service account's token request (google-auth: Vertex AI) carries a JWT signed afresh at
    every run: its placeholder differed, so no replay of a Vertex agent got past its first request.
    Credentials are out of the key wherever they are; what kind of secret stood there still counts."""
    form = {"content-type": "application/x-www-form-urlencoded"}
    url = "http://127.0.0.1:9/token"  # (a token endpoint on loopback: only hashed, never reached)
    assert key(url, form, TOKEN_FORM + _jwt(1_700_000_000)) == key(
        url, form, TOKEN_FORM + _jwt(1_700_000_999)
    )
    assert key(url, form, TOKEN_FORM + _jwt(1)) != key(
        url, form, TOKEN_FORM.replace("jwt-bearer", "x") + _jwt(1)
    )
    login = {"user": "me", "client_secret": "s3cr3t-one"}
    assert key(body=login) == key(body={**login, "client_secret": "another-secret"})
    assert key(body=login) != key(body={**login, "user": "you"})
    sk = "sk-proj-" + "Z" * 40
    said = {"messages": [{"role": "user", "content": f"my key is {sk}"}]}
    assert key(body=said) == key(
        body={"messages": [{"role": "user", "content": "my key is " + sk[:-1] + "Y"}]}
    )
    assert key(body=said) != key(body={"messages": [{"role": "user", "content": f"your key is {sk}"}]})
    assert tool_key("call_api", {"auth_token": "tok-1"}) == tool_key("call_api", {"auth_token": "tok-2"})


def test_a_token_request_signed_afresh_replays(server: Any, store: Any) -> None:
    """The recording and the replay each sign their own JWT for the token request: the replay serves
    the recorded token answer, then the model call."""
    import requests

    @server.route("/token")
    def token(request: Any) -> Any:
        from tests.modelserver import json_reply

        return json_reply({"access_token": "ya29." + "a" * 60, "expires_in": 3599, "token_type": "Bearer"})

    def run(base: str, issued: int) -> Any:
        got = requests.post(base + "/token", data=TOKEN_FORM + _jwt(issued), timeout=5,
                            headers={"content-type": "application/x-www-form-urlencoded"}).json()  # fmt: skip
        answer = requests.post(base + "/v1/chat/completions", json=BODY, timeout=5,
                               headers={"authorization": "Bearer " + got["access_token"]}).json()  # fmt: skip
        return got, answer

    with forkpoint.record(store=store) as rec:
        recorded = run(server.url, 1_700_000_000)
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        replayed = run("http://127.0.0.1:9", 1_700_000_042)
    assert rp.report()["divergence"] is None and rp.report()["matched"] == 2
    assert replayed[1] == recorded[1]
    assert replayed[0]["access_token"].startswith("[REDACTED:")


def test_calls_with_secrets_of_a_kind_answered_differently_get_the_answer_of_their_own_secret(
    store: Any,
) -> None:
    """The key counts a secret by its kind, so a tool checking two API keys made two identical
    calls answered differently; a program checking them in another order (a set's, which string
    hashes decide anew each run) was served each other's answers under plain "replay ok". Among
    such calls, the one that sent the same secret is served."""
    good, bad = "sk-proj-" + "A" * 48, "sk-proj-" + "B" * 48

    @forkpoint.tool
    def check(api_key: str) -> str:
        return "valid" if api_key == good else "revoked"

    def run(keys: list[str]) -> dict[str, str]:
        return {k: check(k) for k in keys}

    with forkpoint.record(store=store) as rec:
        assert run([good, bad]) == {good: "valid", bad: "revoked"}
    with forkpoint.replay(rec.session_path) as rp:
        assert run([bad, good]) == {good: "valid", bad: "revoked"}
    assert rp.report()["divergence"] is None and rp.report()["matched"] == 2


def test_secrets_sent_in_an_object_built_in_another_order_get_the_answer_of_their_own(store: Any) -> None:
    """The match key reads an object by its keys, whatever order it was built in; the secrets a call
    sent were read in that order: {"b": bad, "a": good} on replay (built from a set) was served the
    answer recorded for {"a": bad, "b": good}, and the other call the first's, under plain "replay ok"."""
    good, bad = "sk-proj-" + "A" * 48, "sk-proj-" + "B" * 48

    @forkpoint.tool
    def check(creds: dict[str, str]) -> str:
        return ", ".join(f"{k}:{'valid' if v == good else 'revoked'}" for k, v in sorted(creds.items()))

    with forkpoint.record(store=store) as rec:
        assert [check({"a": good, "b": bad}), check({"a": bad, "b": good})] == [
            "a:valid, b:revoked",
            "a:revoked, b:valid",
        ]
    with forkpoint.replay(rec.session_path) as rp:
        assert [check({"b": bad, "a": good}), check({"b": good, "a": bad})] == [
            "a:valid, b:revoked",
            "a:revoked, b:valid",
        ]
    assert rp.report()["divergence"] is None and rp.report()["matched"] == 2


def test_calls_with_query_credentials_answered_differently_get_the_answer_of_their_own(
    server: Any, store: Any
) -> None:
    """A query's credential (``?token=``) is out of the key altogether, and was out of the secrets
    a call is served by: a program checking two keys that way, in another order on replay, was
    served each other's answers under plain "replay ok"."""
    import requests

    good, bad = "sk-proj-" + "A" * 48, "sk-proj-" + "B" * 48

    @server.route("/verify")
    def verify(request: Any) -> Any:
        from tests.modelserver import json_reply

        return json_reply({"valid": request["query"].get("token") == good})

    def run(base: str, keys: list[str]) -> dict[str, bool]:
        return {
            k: requests.post(f"{base}/verify?token={k}", json={"q": 1}, timeout=5).json()["valid"]
            for k in keys
        }

    with forkpoint.record(store=store) as rec:
        assert run(server.url, [good, bad]) == {good: True, bad: False}
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert run("http://127.0.0.1:9", [bad, good]) == {good: True, bad: False}
    assert rp.report()["divergence"] is None and rp.report()["matched"] == 2


@pytest.mark.parametrize("client", ["openai", "azure", "anthropic", "x-api-key"])
def test_calls_with_credential_headers_answered_differently_get_the_answer_of_their_own(
    server: Any, store: Any, client: str
) -> None:
    """A program checking two API keys, each key its own client (sent as ``Authorization: Bearer``
    by the openai and anthropic SDKs, ``api-key`` by AzureOpenAI, ``x-api-key`` as Anthropic's HTTP
    API documents it): the credential headers were dropped when recorded, so in another order on
    replay each key was served the other's answer (the bad key worked, the good one was refused)
    under plain "replay ok". With keys other than the recording's, the calls are still served, in
    the order they were recorded."""
    import anthropic
    import openai

    from tests.modelserver import json_reply

    good, bad = "sk-proj-" + "A" * 48, "sk-proj-" + "B" * 48

    def refuse_unknown_keys(request: Any) -> Any:
        sent = request["headers"].get("authorization", "").removeprefix("Bearer ")
        if good in (sent, request["headers"].get("api-key"), request["headers"].get("x-api-key")):
            return None  # (the built-in answer)
        return json_reply({"error": {"type": "authentication_error", "message": "invalid key"}}, 401)

    for path in ("/v1/chat/completions", "/openai/deployments/*", "/v1/messages"):
        server.route(path, refuse_unknown_keys)
    ask = [{"role": "user", "content": "hi"}]

    def works(base: str, key: str) -> bool:
        try:
            if client == "openai":
                openai.OpenAI(api_key=key, base_url=base + "/v1", max_retries=0).chat.completions.create(
                    model="m", messages=ask
                )
            elif client == "azure":
                azure = openai.AzureOpenAI(api_key=key, azure_endpoint=base, api_version="2024-06-01")
                azure.with_options(max_retries=0).chat.completions.create(model="m", messages=ask)
            elif client == "anthropic":
                anthropic.Anthropic(api_key=key, base_url=base, max_retries=0).messages.create(
                    model="m", max_tokens=8, messages=ask
                )
            else:
                body = {"model": "m", "max_tokens": 8, "messages": ask}
                headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
                httpx.post(f"{base}/v1/messages", json=body, headers=headers).raise_for_status()
        except (openai.AuthenticationError, anthropic.AuthenticationError):
            return False
        except httpx.HTTPStatusError as exc:
            assert exc.response.status_code == 401
            return False
        return True

    def run(base: str, keys: list[str]) -> dict[str, bool]:
        return {k: works(base, k) for k in keys}

    with forkpoint.record(store=store) as rec:
        assert run(server.url, [good, bad]) == {good: True, bad: False}
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert run("http://127.0.0.1:9", [bad, good]) == {good: True, bad: False}
    assert rp.report()["reproduced"] and rp.report()["matched"] == 2
    others = ["sk-proj-" + "C" * 48, "sk-proj-" + "D" * 48]
    with forkpoint.replay(rec.session_path) as rp:
        assert run("http://127.0.0.1:9", others) == {others[0]: True, others[1]: False}
    assert rp.report()["reproduced"] and rp.report()["matched"] == 2


def _conversation(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You edit files."}]
    for t in range(turns):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{t}"}]})
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": f"edited {t}"})
    return {"model": "m", "messages": messages, "tools": [{"type": "function", "name": "edit"}]}


def test_a_resent_conversation_hashes_only_its_new_items(monkeypatch: pytest.MonkeyPatch) -> None:
    from forkpoint import canonical

    hashed: list[int] = []
    real = canonical.canonical_json

    def counting(value: Any, **how: Any) -> bytes:
        data = real(value, **how)
        hashed.append(len(data))
        return data

    monkeypatch.setattr(canonical, "canonical_json", counting)
    body = scrub_json(_conversation(200))  # the scrubber's items, as a recorder hands them on
    first = model_key(normalize_request("POST", URL, HEADERS, body))
    assert len(hashed) == 401 + 1 + 1  # every message, the tool list's one item, the request
    grown = scrub_json({**body, "messages": [*body["messages"], {"role": "user", "content": "and?"}]})
    hashed.clear()
    second = model_key(normalize_request("POST", URL, HEADERS, grown))
    assert hashed[0] == len(b'{"content":"and?","role":"user"}') and len(hashed) == 2
    assert first != second
    # the same keys as from fresh objects, hashed whole
    for conversation, k in ((body, first), (grown, second)):
        assert model_key(normalize_request("POST", URL, HEADERS, json.loads(json.dumps(conversation)))) == k


def test_the_digests_of_items_go_with_the_scrubbers_items(monkeypatch: pytest.MonkeyPatch) -> None:
    from forkpoint import redact

    scrubber = redact.Scrubber()
    monkeypatch.setattr(redact, "current", lambda: scrubber)
    monkeypatch.setattr(redact, "CACHE_BUDGET_CHARS", 2_000)  # a few items: most are hashed again
    body = scrubber.json(_conversation(50))
    want = model_key(normalize_request("POST", URL, HEADERS, json.loads(json.dumps(body))))
    for _ in range(2):
        assert model_key(normalize_request("POST", URL, HEADERS, body)) == want
        assert 0 < len(scrubber._digests) <= len(scrubber._returned) < 50
        assert all(scrubber._returned.get(k) is not None for k in scrubber._digests)


@pytest.mark.parametrize("stamped", [False, True], ids=["plain", "time-stamped"])
def test_a_resent_conversation_costs_its_new_items_as_a_recorder_parses_it(
    monkeypatch: pytest.MonkeyPatch, stamped: bool
) -> None:
    """As capture does: each request arrives as bytes, parsed afresh (no item is the same object
    as before), scrubbed and keyed. Each call's key asks for the digests of its new items only, and
    equals the key of the same request hashed whole, also when an earlier item was changed, and
    when the system prompt is stamped with the time at every call (that item is new each time)."""
    from forkpoint import redact
    from forkpoint.capture.decoding import parse_body, scrub_body

    scrubber = redact.Scrubber()
    monkeypatch.setattr(redact, "current", lambda: scrubber)
    asked: list[Any] = []
    real = scrubber.item_digest
    monkeypatch.setattr(scrubber, "item_digest", lambda item: asked.append(item) or real(item))
    conversation = _conversation(0)
    for turn in range(60):
        conversation["messages"].append({"role": "user", "content": f"step {turn}"})
        if turn == 40:  # an earlier item edited (a compacted history): its list starts over
            conversation["messages"][3] = {"role": "user", "content": "summary of steps 0-1"}
        if stamped:
            conversation["messages"][0] = {
                "role": "system",
                "content": f"It is 10:{turn:02d}. You edit files.",
            }
        kind, parsed = parse_body(orjson.dumps(conversation), "application/json")
        body = scrub_body(kind, parsed, parsed=True)
        asked.clear()
        got = model_key(normalize_request("POST", URL, HEADERS, body))
        fresh = json.loads(json.dumps(conversation))
        assert got == model_key(normalize_request("POST", URL, HEADERS, fresh))
        # the new messages (at turn 40, all after the three it still shares), the tool at first;
        # stamped, the system prompt too (and at turn 40 all but the tool: none is shared)
        new = {0: len(conversation["messages"]) + 1, 40: len(conversation["messages"]) - 3 + 3 * stamped}
        assert len(asked) == new.get(turn, 1 + stamped), turn


def test_a_list_whose_slots_were_refilled_is_keyed_as_it_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scrubber's result is read-only by contract, but model_key is public: a caller that puts
    # other items in a keyed list's slots (or reorders them) gets the key of the list as it is now,
    # also for a later list that takes its first items from it.
    from forkpoint import redact

    scrubber = redact.Scrubber()
    monkeypatch.setattr(redact, "current", lambda: scrubber)

    def fresh(body: dict[str, Any]) -> str:
        return model_key(normalize_request("POST", URL, HEADERS, json.loads(json.dumps(body))))

    body = scrubber.json(_conversation(5), parsed=True)
    assert model_key(normalize_request("POST", URL, HEADERS, body)) == fresh(body)
    body["messages"][1] = {"role": "user", "content": "put in its place"}
    assert model_key(normalize_request("POST", URL, HEADERS, body)) == fresh(body)
    body["messages"].reverse()
    assert model_key(normalize_request("POST", URL, HEADERS, body)) == fresh(body)
    grown = scrubber.json({**body, "messages": [*body["messages"], {"role": "user", "content": "next"}]})
    assert grown["messages"][0] is body["messages"][0]  # its first items taken from the list above
    assert model_key(normalize_request("POST", URL, HEADERS, grown)) == fresh(grown)


def test_the_key_tells_lists_of_items_from_lists_of_their_digests() -> None:
    items = [{"role": "user", "content": "hi"}]
    digests = [match.digest(items[0])]
    assert key(body={"messages": items}) != key(body={"messages": digests})


def test_tool_key() -> None:
    assert tool_key("search", {"q": "a", "n": 1}) == tool_key("search", {"n": 1, "q": "a"})
    assert tool_key("search", {"q": "a"}) != tool_key("search", {"q": "b"})
    assert tool_key("search", {"q": "a"}) != tool_key("lookup", {"q": "a"})


# ----------------------------------------------------------------------------- json_diff


def test_json_diff_paths() -> None:
    expected = {
        "a": 1,
        "b": {"c": [1, 2, {"d": "x"}], "e": [1, 2, 3]},
        "gone": True,
        "content-type": "json",
        "t": 1,
    }
    actual = {
        "a": 2,
        "b": {"c": [1, 3, {"d": "y", "z": None}, 4], "e": [1]},
        "content-type": "text",
        "t": True,
        "new": [1],
    }
    changes = json_diff(expected, actual)
    assert [(c.op, c.path, c.expected, c.actual) for c in changes] == [
        ("changed", "$.a", 1, 2),
        ("changed", "$.b.c[1]", 2, 3),
        ("changed", "$.b.c[2].d", "x", "y"),
        ("added", "$.b.c[2].z", None, None),
        ("added", "$.b.c[3]", None, 4),
        ("removed", "$.b.e[1]", 2, None),
        ("removed", "$.b.e[2]", 3, None),
        ("removed", "$.gone", True, None),
        ("changed", "$['content-type']", "json", "text"),
        ("changed", "$.t", 1, True),
        ("added", "$.new", None, [1]),
    ]
    assert json_diff(expected, json.loads(json.dumps(expected))) == []
    assert json_diff([{"a": [1]}], [{"a": [2]}]) == [Change("changed", "$[0].a[0]", 1, 2)]


def test_a_list_of_the_same_items_in_another_order_is_one_reordering() -> None:
    """A reordered tool list read as a change of every field of every tool (eight lines for two
    tools): it is one change, naming the items by their names when they have them."""

    def tool(name: str, description: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "description": description, "parameters": {}}}

    recorded = {"tools": [tool("lookup_order", "Find an order."), tool("refund", "Refund it.")]}
    now = {"tools": list(reversed(recorded["tools"]))}
    (change,) = json_diff(recorded, now)
    assert change == Change("reordered", "$.tools", ["lookup_order", "refund"], ["refund", "lookup_order"])
    assert format_changes([change]) == (
        '  ↕ $.tools: the same 2 items in another order: ["lookup_order","refund"] → ["refund","lookup_order"]'
    )
    assert json_diff([1, 2, 2, 3], [2, 3, 1, 2]) == [Change("reordered", "$", [0, 1, 2, 3], [1, 3, 0, 2])]
    assert Change.from_json(change.to_json()) == change
    # Not the same items: each difference, as before.
    assert [c.path for c in json_diff([1, 2], [2, 3])] == ["$[0]", "$[1]"]
    assert Change("added", "$.x", actual=1).to_json() == {"op": "added", "path": "$.x", "actual": 1}
    assert Change("removed", "$.x", expected=1).to_json() == {"op": "removed", "path": "$.x", "expected": 1}


def test_format_changes_short_values() -> None:
    text = format_changes(
        [
            Change("changed", "$.body.temperature", 0.2, 0.7),
            Change("added", "$.body.seed", actual=42),
            Change("removed", "$.body.top_p", expected=1),
        ]
    )
    lines = text.splitlines()
    assert lines[0] == "  ~ $.body.temperature: 0.2 → 0.7"
    assert lines[1] == "  + $.body.seed: 42"
    assert lines[2] == "  - $.body.top_p: 1"


def test_format_changes_tells_a_lone_surrogate_from_its_escape_as_text() -> None:
    """A file name decoded with surrogateescape and the text "caf\\udce9.txt" printed alike (the
    terminal escapes the surrogate): a string that is not valid Unicode is shown as JSON, and so is
    the other side of its change."""
    text = format_changes(
        [
            Change("changed", "$.args.path", "caf\udce9.txt", "caf\\udce9.txt"),
            Change("added", "$.args.other", actual="x\udcff"),
            Change("changed", "$.args.plain", "caf\\udce9.txt", "café"),
            Change("changed", "$.args.long", "x" * 90 + "caf\udce9.txt", "x" * 90 + "caf\\udce9.txt"),
        ]
    )
    assert text.splitlines() == [
        '  ~ $.args.path: "caf\\udce9.txt" → "caf\\\\udce9.txt"',
        '  + $.args.other: "x\\udcff"',
        "  ~ $.args.plain: caf\\udce9.txt → café",
        "  ~ $.args.long:",
        f'      -"{"x" * 90}caf\\udce9.txt"',
        f'      +"{"x" * 90}caf\\\\udce9.txt"',
    ]


def test_format_changes_quotes_what_would_print_alike_or_steer_the_terminal() -> None:
    text = format_changes(
        [
            Change("changed", "$.args.f", "5", 5),
            Change("changed", "$.args.g", None, "null"),
            Change("changed", "$.out", "\x1b[31mRED\x1b[0m", "RED"),
            Change("added", "$.bell", actual="\x07"),
        ]
    )
    assert text.splitlines() == [
        '  ~ $.args.f: "5" → 5',
        '  ~ $.args.g: null → "null"',
        '  ~ $.out: "\\u001b[31mRED\\u001b[0m" → "RED"',
        '  + $.bell: "\\u0007"',
    ]
    long_text = "\n".join(["a tool's output"] * 9)
    shown = format_changes([Change("changed", "$.out", long_text, long_text + "\x1b]0;title\x07")])
    assert "\x1b" not in shown and "\x07" not in shown and "\\u001b" in shown


def test_format_changes_shows_long_texts_that_differ_only_in_line_endings() -> None:
    """A line-by-line diff of two texts that differ only in line endings has no lines: the change
    printed as "~ $.out:" and nothing under it."""
    old = "\n".join(f"line {i} of a long tool output" for i in range(10))
    for new in (old + "\n", old.replace("\n", "\r\n"), old.replace("\n", "\u2028")):
        lines = format_changes([Change("changed", "$.out", old, new)]).splitlines()
        assert lines[0] == "  ~ $.out:" and len(lines) == 3, lines
        assert lines[1].startswith("      -") and lines[2].startswith("      +")
        assert lines[1] != lines[2].replace("+", "-", 1)  # where they differ is in what is shown


def test_format_changes_long_multiline_strings_as_a_compact_diff() -> None:
    old = "\n".join(f"line {i}: some system prompt text that goes on" for i in range(60))
    new = old.replace("line 30: some", "line 30: SOME")
    text = format_changes([Change("changed", "$.body.messages[0].content", old, new)])
    assert "~ $.body.messages[0].content:" in text
    assert "-line 30: some system prompt" in text
    assert "+line 30: SOME system prompt" in text
    assert "line 5:" not in text and "line 55:" not in text  # only the neighbourhood is shown
    assert len(text) < 600


def test_format_changes_long_single_line_strings_stay_compact() -> None:
    words = [f"word{i}" for i in range(600)]
    old = " ".join(words)
    new = " ".join(w if w != "word300" else "CHANGED" for w in words)
    text = format_changes([Change("changed", "$.body.messages[0].content", old, new)])
    assert "word300" in text and "CHANGED" in text  # the difference is visible...
    assert len(text) < 800, len(text)  # ...without printing two 4 KB lines
    assert "word10 " not in text and "word590" not in text


def test_format_changes_limit() -> None:
    changes = [Change("changed", f"$.x[{i}]", i, i + 1) for i in range(25)]
    text = format_changes(changes, limit=20)
    assert len(text.splitlines()) == 21
    assert text.splitlines()[-1] == "  … and 5 more differences"


# ----------------------------------------------------------------------------- end to end


def test_replay_matches_despite_volatile_headers_and_another_port(server: Any, store: Any) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "b": 1, "a": 2}
    with forkpoint.record(store=store) as rec, httpx.Client() as client:
        first = client.post(
            server.url + "/v1/chat/completions",
            content=json.dumps(body),
            headers={
                "content-type": "application/json",
                "x-stainless-retry-count": "0",
                "idempotency-key": "k1",
                "user-agent": "agent/1",
                "authorization": "Bearer secret-token-1234",
            },
        ).json()
    server.stop()
    reordered = json.dumps({"a": 2, "b": 1, "messages": body["messages"], "model": "m"})
    with forkpoint.replay(rec.session_path) as rp, httpx.Client() as client:
        again = client.post(
            "http://127.0.0.1:9/v1/chat/completions",
            content=reordered,
            headers={
                "content-type": "application/json",
                "x-stainless-retry-count": "3",
                "idempotency-key": "k2",
                "user-agent": "agent/2",
                "x-request-id": "abc",
            },
        ).json()
    assert again == first
    assert rp.report()["matched"] == 1 and rp.report()["divergence"] is None


def _two_calls(server: Any, store: Any) -> tuple[Any, list[Any]]:
    bodies = [{"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(2)]
    with forkpoint.record(store=store) as rec, httpx.Client() as client:
        answers = [client.post(server.url + "/v1/chat/completions", json=b).json() for b in bodies]
    return rec.session_path, answers


def _replay_both(path: Any, server_url: str, **kw: Any) -> tuple[list[Any], Any]:
    bodies = [{"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(2)]
    with forkpoint.replay(path, **kw) as rp, httpx.Client() as client:
        got = [client.post(server_url + "/v1/chat/completions", json=b).json() for b in bodies]
    return got, rp.report()


def test_replay_uses_the_stored_keys_when_their_spec_is_the_same(
    server: Any, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forkpoint.log import Session
    from forkpoint.match import key_spec
    from forkpoint.replay import replayer

    path, answers = _two_calls(server, store)
    session = Session.load(path)
    assert session.header["keys"] == key_spec() and all("keys" not in e for e in session.events)
    computed: list[Any] = []
    real = replayer.event_key

    def counting(event: Any, ignore: Any = None) -> str:
        computed.append(event.get("seq"))
        return real(event, ignore)

    monkeypatch.setattr(replayer, "event_key", counting)
    got, report = _replay_both(session, server.url)
    assert got == answers and report["matched"] == 2 and report["divergence"] is None
    assert computed == []  # nothing recomputed: the stored keys were used

    # Another version of the key functions: every key is computed again, and still matches.
    monkeypatch.setattr("forkpoint.match.KEY_VERSION", match.KEY_VERSION + 1)
    got, report = _replay_both(Session.load(path), server.url)
    assert got == answers and report["matched"] == 2
    assert sorted(computed) == [e["seq"] for e in session.by_type("model_call")]


def test_a_wrong_stored_key_is_checked_before_a_divergence(server: Any, store: Any) -> None:
    from forkpoint.log import Session

    path, answers = _two_calls(server, store)
    session = Session.load(path)
    for e in session.by_type("model_call"):
        e["key"] = "0" * 64  # as if computed by a buggy recorder under the same spec
    got, report = _replay_both(session, server.url)
    assert got == answers and report["matched"] == 2 and report["divergence"] is None


def test_ignore_rules_given_to_a_replay_change_the_spec(server: Any, store: Any) -> None:
    with forkpoint.record(store=store) as rec, httpx.Client() as client:
        answer = client.post(
            server.url + "/v1/chat/completions", json={"model": "m", "metadata": {"request_id": "r-1"}}
        ).json()
    with forkpoint.replay(rec.session_path, ignore=[{"path": "$.body.metadata.request_id"}]) as rp:
        with httpx.Client() as client:
            again = client.post(
                server.url + "/v1/chat/completions", json={"model": "m", "metadata": {"request_id": "r-2"}}
            ).json()
    assert again == answer and rp.report()["divergence"] is None


@pytest.mark.parametrize("with_id", [False, True], ids=["same-request", "with-a-request-id"])
def test_two_servers_asked_the_same_thing_are_told_apart(server: Any, store: Any, with_id: bool) -> None:
    """Host and port are not in the match key (a test's server gets another port each run), so two
    servers asked the same thing shared one queue: a run that asked them in the other order got
    each one's answer from the other, and "replay ok"."""
    from tests.modelserver import LocalServer, json_reply

    other = LocalServer()
    try:
        for s in (server, other):
            s.route("/v1/lookup", lambda r, port=s.port: json_reply({"port": port}), method="POST")

        def ask(order: list[Any]) -> list[int]:
            def body() -> dict[str, Any]:  # (with a fresh request id: served by id drift)
                return {"q": "x", **({"request_id": str(uuid.uuid4())} if with_id else {})}

            return [httpx.post(s.url + "/v1/lookup", json=body()).json()["port"] for s in order]

        with forkpoint.record(store=store) as rec:
            live = ask([server, other])
        with forkpoint.replay(rec.session_path) as rp:
            assert ask([other, server]) == live[::-1]
        assert rp.report()["reproduced"]
    finally:
        other.stop()


def test_two_parts_of_one_file_are_told_apart_by_their_range(server: Any, store: Any) -> None:
    """``Range`` was not in the match key: a run that fetched the parts of a file in another order
    (a fork that went another way) got each part's bytes for the other, and "replay ok"."""
    from tests.modelserver import Reply

    data = bytes(range(200))

    def part(request: Any) -> Reply:
        start, end = (int(n) for n in request["headers"]["range"].removeprefix("bytes=").split("-"))
        return Reply(data[start : end + 1], 206)

    server.route("/files/blob.bin", part, method="GET")

    def fetch(ranges: list[str]) -> list[bytes]:
        url = server.url + "/files/blob.bin"
        return [httpx.get(url, headers={"Range": f"bytes={r}"}).content for r in ranges]

    with forkpoint.record(store=store) as rec:
        live = fetch(["0-99", "100-199"])
    assert live == [data[:100], data[100:]]
    with forkpoint.replay(rec.session_path) as rp:
        assert fetch(["100-199", "0-99"]) == live[::-1]
    assert rp.report()["reproduced"]


def test_a_divergence_names_the_packages_upgraded_since_the_recording(
    server: Any, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LangGraph team upgrades langchain-openai, which now renders another request: the report
    says which packages changed version since the recording, not only the JSON path that differs
    (the header kept no langchain version at all, and the report never compared them)."""
    from forkpoint import plugins
    from forkpoint.log import Session

    real = plugins.versions
    url = server.url + "/v1/chat/completions"

    def at_recording(names: Any) -> dict[str, str]:
        return {**real(names), "langchain-openai": "0.1.0"}

    monkeypatch.setattr(plugins, "versions", at_recording)
    with forkpoint.record(store=store) as rec, httpx.Client() as client:
        client.post(url, json={"model": "m", "messages": []})
    monkeypatch.setattr(plugins, "versions", real)
    assert (
        Session.load(rec.session_path).header["versions"]["langchain-core"]
        == real(["langchain-core"])["langchain-core"]
    )

    with forkpoint.replay(rec.session_path) as rp, httpx.Client() as client:
        client.post(url, json={"model": "m", "messages": []})  # the same request: nothing said
    assert rp.report()["divergence"] is None
    with (
        forkpoint.replay(rec.session_path),
        httpx.Client() as client,
        pytest.raises(forkpoint.Divergence) as err,
    ):
        client.post(url, json={"model": "m", "messages": [], "stream_options": {"include_usage": True}})
    now = real(["langchain-openai"])["langchain-openai"]
    assert (
        f"at another version than when recorded (an upgrade may change what is sent): langchain-openai 0.1.0 → {now}."
        in str(err.value)
    )
    assert err.value.report["versions"] == [["langchain-openai", "0.1.0", now]]


def test_a_recorded_version_steers_no_terminal() -> None:
    from forkpoint.replay import format_divergence

    nasty = "1\x1b]0;pwned\x07"
    text = format_divergence(
        {"kind": "model_call", "position": 1, "reason": "r", "versions": [["openai", nasty, "2.0"]]}
    )
    assert "\x1b" not in text and "openai " + json.dumps(nasty) + " → 2.0" in text


def test_the_credentials_of_a_query_are_read_by_name() -> None:
    """As the key reads a query: two credentials sent in another order are the same secrets sent."""
    from forkpoint.match import query_credentials

    one, two = "tok-" + "1" * 24, "tok-" + "2" * 24
    sent = query_credentials(f"http://127.0.0.1/v?access_token={one}&api_key={two}&q=x")
    assert len(sent) == 2 and sent == query_credentials(
        f"http://127.0.0.1/v?q=x&api_key={two}&access_token={one}"
    )
