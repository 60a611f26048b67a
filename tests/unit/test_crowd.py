"""The simulated crowd's pieces that need no server: deterministic behaviour per seed and
username, answer kinds and hidden qualities, and the LLM writer over the real openai client
against the fake OpenAI-compatible server."""

from __future__ import annotations

import random

import openai
import pytest

from crowdpref.config import CrowdConfig
from crowdpref.errors import ConfigError, CrowdprefError
from crowdpref.settings import load_settings
from crowdpref.simulation.crowd import SimulatedCrowd, llm_answer_writer, open_answer_writer, template_answer
from tests.fakes.openai_server import FakeOpenAIServer


def test_dropouts_are_deterministic_per_seed_and_username():
    crowd = CrowdConfig(dropout_rate=0.3)
    first = [SimulatedCrowd(crowd, seed=1).drops_out(f"p-{i}") for i in range(200)]
    again = [SimulatedCrowd(crowd, seed=1).drops_out(f"p-{i}") for i in range(200)]
    other = [SimulatedCrowd(crowd, seed=2).drops_out(f"p-{i}") for i in range(200)]
    assert first == again and first != other
    assert 40 <= sum(first) <= 80  # ~30 %
    forced = SimulatedCrowd(crowd, seed=1, dropouts={"p-1"})
    assert forced.drops_out("p-1") and not forced.drops_out("p-2")
    assert all(0 <= forced.answers_before_leaving(f"p-{i}", 5) < 5 for i in range(50))


def test_answer_kinds_follow_the_rates_and_quality_orders_them():
    crowd = CrowdConfig(low_effort_rate=0.2, offensive_rate=0.1)
    answers = [template_answer(random.Random(i), crowd) for i in range(2000)]
    share = {kind: sum(a.kind == kind for a in answers) / len(answers) for kind in ("considered", "low_effort", "offensive")}
    assert 0.17 < share["low_effort"] < 0.23 and 0.07 < share["offensive"] < 0.13
    mean = {kind: sum(a.hidden_quality for a in answers if a.kind == kind) / max(1, sum(a.kind == kind for a in answers))
            for kind in share}
    assert mean["considered"] > 0.6 > 0.25 > mean["low_effort"] > mean["offensive"]
    assert all(0 <= a.hidden_quality <= 1 for a in answers)
    considered = [a for a in answers if a.kind == "considered"]
    assert all(a.text.endswith(".") and len(a.text) > 40 for a in considered)


def _reply(body):
    return "I would listen first, because people open up when they feel heard."


def test_llm_writer_uses_the_real_client_and_keeps_the_truth():
    with FakeOpenAIServer(reply=_reply) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, timeout=5, max_retries=0)
        write = llm_answer_writer(client, "fake-model", CrowdConfig(low_effort_rate=0, offensive_rate=0), server.base_url)
        answer = write("How would you comfort a friend?", "empathy", random.Random(3))
    assert answer.text.startswith("I would listen first") and answer.kind == "considered"
    assert "How would you comfort a friend?" in server.requests[0]["messages"][-1]["content"]


def test_llm_writer_errors_are_one_line_without_the_key():
    with FakeOpenAIServer(mode="unauthorized") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-secret-crowd-key", timeout=5, max_retries=0)
        write = llm_answer_writer(client, "m", CrowdConfig(low_effort_rate=0, offensive_rate=0), server.base_url)
        with pytest.raises(CrowdprefError, match="rejected the API key") as err:
            write("q?", "empathy", random.Random(1))
    assert "sk-secret-crowd-key" not in str(err.value) and "\n" not in str(err.value)
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=2, max_retries=0)
    write = llm_answer_writer(client, "m", CrowdConfig(low_effort_rate=0, offensive_rate=0), "http://127.0.0.1:9/v1")
    with pytest.raises(CrowdprefError, match="APIConnectionError.*crowd.llm: false"):
        write("q?", "empathy", random.Random(1))


def test_llm_crowd_without_endpoint_is_a_config_error(monkeypatch):
    for name in ("OPENAI_BASE_URL", "CROWDPREF_OPENAI_BASE_URL", "OPENAI_MODEL", "CROWDPREF_OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert open_answer_writer(CrowdConfig(llm=False), load_settings()) is None
    with pytest.raises(ConfigError, match="crowd.llm is true"):
        open_answer_writer(CrowdConfig(llm=True), load_settings())
