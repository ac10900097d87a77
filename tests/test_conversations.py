"""Conversations: follow-up asks on the real server and model, and the conversation store.

A follow-up reuses what the first ask prefilled and decoded: after the answer, the idle
prefill warms the conversation's turn, so the follow-up prefills only its own question.
Conversations survive a restart; the store survives a kill at any moment; over budget the
oldest turns go before anything stable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_lsp_support import (
    copy_stdlib_json,
    request,
    start_client,
    stop_client,
    wait_until,
    wait_warm,
)

from contenox_lsp.runtime.conversations import MAX_TURNS, Conversations, prompt_outputs

FIRST = "What does JSONDecoder.decode return?"
FOLLOW_UP = "And what does it raise on bad input?"


async def test_a_follow_up_prefills_only_its_question(tmp_path: Path) -> None:
    root = copy_stdlib_json(tmp_path)
    client = await start_client(root, "neovim", {})
    try:
        await wait_warm(client)
        first = await request(client, "contenox/ask",
                              {"question": FIRST, "conversationId": "c1", "maxTokens": 12})
        assert first["conversationId"] == "c1" and first["turn"] == 1
        await wait_warm(client)  # the idle prefill warms the new turn
        explain = await request(client, "contenox/explainContext",
                                {"question": FOLLOW_UP, "conversationId": "c1",
                                 "includeText": True})
        turns = [s for s in explain["segments"] if s["label"].startswith("earlier turn")]
        assert len(turns) == 1 and FIRST in turns[0]["text"]
        assert turns[0]["cacheClass"] == "low" and turns[0]["status"] == "cached"
        user = next(s for s in explain["segments"] if s["kind"] == "user")
        follow = await request(client, "contenox/ask",
                               {"question": FOLLOW_UP, "conversationId": "c1", "maxTokens": 12})
        m1, m2 = first["metrics"], follow["metrics"]
        print(f"follow-up: first ask {m1['promptTokens']} prompt + {m1['decodeTokens']} answer "
              f"tokens; follow-up reused {m2['reusedTokens']}, prefilled {m2['newTokens']} "
              f"(its user segment: {user['tokens']})")
        assert m2["newTokens"] <= user["tokens"]  # only the new question was prefilled
        # The earlier turn (its question and answer) was prefilled in idle time: reused.
        assert m2["reusedTokens"] >= turns[0]["tokenEnd"] - explain["reuseGranularity"]
        listed = await request(client, "contenox/conversation",
                               {"action": "list", "conversationId": "c1"})
        assert [t["question"] for t in listed["turns"]] == [FIRST, FOLLOW_UP]
        assert listed["turns"][0]["answer"] == first["text"]
    finally:
        await stop_client(client)

    again = await start_client(root, "neovim", {"prefillOnIdle": False})
    try:
        await wait_status_ready(again)
        listed = await request(again, "contenox/conversation", {"action": "list"})
        (conv,) = listed["conversations"]
        assert conv["conversationId"] == "c1" and conv["turns"] == 2
        assert conv["lastQuestion"] == FOLLOW_UP
        cleared = await request(again, "contenox/conversation",
                                {"action": "clear", "conversationId": "c1"})
        assert cleared == {"removed": 1}
        assert (await request(again, "contenox/conversation",
                              {"action": "list"}))["conversations"] == []
    finally:
        await stop_client(again)


async def wait_status_ready(client: Any) -> None:
    await wait_until(lambda: request(client, "contenox/status", None),
                     lambda s: s["model"] is not None and s["index"]["state"] == "ready")


async def test_conversation_params_are_validated(tmp_path: Path) -> None:
    from pygls.exceptions import JsonRpcInvalidParams

    root = copy_stdlib_json(tmp_path)
    client = await start_client(root, "neovim", {"prefillOnIdle": False})
    try:
        for method, params in [
            ("contenox/ask", {"question": "q", "conversationId": 5}),
            ("contenox/ask", {"question": "q", "conversationId": ""}),
            ("contenox/ask", {"question": "q", "conversationId": "x" * 201}),
            ("contenox/conversation", {"action": "explode"}),
            ("contenox/conversation", {}),
            ("contenox/conversation", None),
        ]:
            with pytest.raises(JsonRpcInvalidParams):
                await request(client, method, params, timeout=60)
    finally:
        await stop_client(client)


# -- the store -------------------------------------------------------------------------------

def test_the_store_survives_a_restart_and_keeps_the_newest_turns(tmp_path: Path) -> None:
    convs = Conversations()
    convs.open(tmp_path)
    for i in range(MAX_TURNS + 3):
        convs.append("a", f"q{i}", f"a{i}")
    convs.append("b", "other", "answer")
    again = Conversations()
    again.open(tmp_path)
    turns = again.turns("a")
    assert len(turns) == MAX_TURNS and turns[-1].question == f"q{MAX_TURNS + 2}"
    assert again.view(None)["conversations"][0]["conversationId"] == "b"  # newest first
    assert prompt_outputs(again.turns("b")) == (("turn", "1", "Question: other\nAnswer: answer"),)


def test_a_corrupt_file_is_set_aside_and_stale_temp_files_go(tmp_path: Path) -> None:
    (tmp_path / "conversations.json").write_text('{"version": 1, "conversations": [',
                                                 encoding="utf-8")
    (tmp_path / ".conversations-dead.json").write_text("{}", encoding="utf-8")
    convs = Conversations()
    convs.open(tmp_path)
    assert convs.view(None)["conversations"] == []
    assert (tmp_path / "conversations.corrupt").exists()
    assert not (tmp_path / ".conversations-dead.json").exists()
    convs.append("a", "q", "a")
    data = json.loads((tmp_path / "conversations.json").read_text(encoding="utf-8"))
    assert data["conversations"]["a"]["turns"] == [{"question": "q", "answer": "a"}]


@pytest.mark.parametrize("bad", [
    {"version": 1, "conversations": {"a": {"updated": 1, "turns": [{"question": 1}]}}},
    {"version": 1, "conversations": {"": {"updated": 1, "turns": []}}},
    {"version": 2, "conversations": {}},
    ["not", "an", "object"],
])
def test_a_forged_file_is_refused_whole(tmp_path: Path, bad: Any) -> None:
    (tmp_path / "conversations.json").write_text(json.dumps(bad), encoding="utf-8")
    convs = Conversations()
    convs.open(tmp_path)
    assert convs.view(None)["conversations"] == []
